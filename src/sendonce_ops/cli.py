"""`sendonce`: the operator's command line. Parsing and presentation only; every decision
is CampaignService's (lambdas/sendonce/campaigns.py), as it is for the HTTP API.

Endpoints come from the CloudFormation stack's outputs or SENDONCE_* variables
(sendonce_ops.endpoints). docs/cli.md lists the commands with examples.
"""

from __future__ import annotations

import importlib
import os
import traceback
from typing import Any

import click
from rich.console import Console

from sendonce_ops.cli_context import EXIT_CODES_HELP, Cli, ExitCode, classify, fail
from sendonce_ops.endpoints import DEFAULT_STACK
from sendonce_ops.forecast_cli import campaign_forecast
from sendonce_ops.preview_cli import campaign_preview, campaign_test_send
from sendonce_ops.schedule_cli import campaign_reschedule, campaign_unschedule


class _Group(click.Group):
    """Turns the domain's errors into a message on stderr and a documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - every error leaves with a message and a code
            code, message = classify(exc)
            click.echo(message, err=True)
            if code is ExitCode.UNEXPECTED and os.environ.get("SENDONCE_DEBUG"):
                traceback.print_exc()
            ctx.exit(int(code))


# The commands that run sendonce on this machine (moto, the local HTTP API, the demo), by
# name: their module is imported only when one of them is listed or run, so operating a
# deployed stack loads neither the Lambda handlers nor moto and the CDK.
LOCAL_COMMANDS_MODULE = "sendonce_local.commands"
LOCAL_COMMANDS = ("demo", "local")


class _Sendonce(_Group):
    """The `sendonce` group: its own commands, and the local ones attached on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LOCAL_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in LOCAL_COMMANDS:
            command = _local_command(cmd_name)
        return command


def _local_command(name: str) -> click.Command:
    try:
        module = importlib.import_module(LOCAL_COMMANDS_MODULE)
    except ImportError as error:
        return _unavailable(name, error)
    return getattr(module, name)


def _unavailable(name: str, error: ImportError) -> click.Command:
    """A stand-in that says why `sendonce NAME ...` cannot run, whatever its arguments."""
    reason = f"the local tooling (sendonce_local) cannot be imported: {error}"

    @click.command(
        name, help=f"Unavailable: {reason}.", short_help=f"(unavailable: {error})", add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )  # fmt: skip
    def unavailable() -> None:
        if os.environ.get("SENDONCE_DEBUG"):
            traceback.print_exception(error)
        fail(
            ExitCode.UNEXPECTED,
            f"error: `sendonce {name}` is unavailable: {reason}. It needs the local tooling's dependencies "
            "(moto[server], aws-cdk-lib, constructs, cdk-nag, plotly): `pip install 'sendonce[local]'`.",
        )

    return unavailable


@click.group(cls=_Sendonce, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--stack",
    envvar="SENDONCE_STACK",
    default=DEFAULT_STACK,
    show_default=True,
    help="CloudFormation stack whose outputs name the queues and tables. SENDONCE_QUEUE_URL, "
    "SENDONCE_DEAD_LETTER_QUEUE_URL, SENDONCE_LEDGER_TABLE and SENDONCE_CAMPAIGNS_TABLE override them "
    "(with all four set, no stack is read). Env: SENDONCE_STACK.",
)
@click.option(
    "--operator",
    "operator_name",
    envvar="SENDONCE_OPERATOR",
    default=None,
    help="Recorded as who changed a campaign's state. Default: your AWS identity's ARN. Env: SENDONCE_OPERATOR.",
)
@click.pass_context
def cli(ctx: click.Context, stack: str, operator_name: str | None) -> None:
    """Operate sendonce campaigns: create, publish, pause, resume, cancel, watch; the DLQ; the ledger.

    Region and credentials come from the usual AWS settings (AWS_REGION, AWS_PROFILE, ...);
    AWS_ENDPOINT_URL points every client elsewhere (e.g. moto's server).
    """
    ctx.obj = Cli(
        stack=stack,
        operator_name=operator_name,
        out=Console(highlight=False),
        err=Console(stderr=True, highlight=False),
    )


def main() -> None:
    cli(prog_name="sendonce")


# --- the commands, by group (each module parses and presents; the services decide) ---

from sendonce_ops.campaign_cli import campaign  # noqa: E402
from sendonce_ops.dlq_cli import dlq  # noqa: E402
from sendonce_ops.ledger_cli import ledger  # noqa: E402
from sendonce_ops.publish_cli import campaign_publish  # noqa: E402

cli.add_command(campaign)
campaign.add_command(campaign_publish)
cli.add_command(dlq)
cli.add_command(ledger)

# --- campaigns sharing the providers' rate (docs/operations.md, "Who is sending now") ---

from sendonce_ops.sending_cli import sending  # noqa: E402

cli.add_command(sending)

# --- deliverability: the suppression list, unknown outcomes (docs/deliverability.md) ---

from sendonce_ops.audit_cli import campaign_audit  # noqa: E402
from sendonce_ops.deliverability_cli import campaign_unknowns, suppression  # noqa: E402
from sendonce_ops.jobs_cli import job  # noqa: E402
from sendonce_ops.report_cli import campaign_report  # noqa: E402

cli.add_command(suppression)
campaign.add_command(campaign_unknowns)
campaign.add_command(campaign_report)
campaign.add_command(campaign_audit)
cli.add_command(job)
campaign.add_command(campaign_preview)
campaign.add_command(campaign_test_send)
campaign.add_command(campaign_forecast)
campaign.add_command(campaign_reschedule)
campaign.add_command(campaign_unschedule)

# --- the cost model (docs/benchmarks.md) ---

from sendonce_ops.cost import cost  # noqa: E402

cli.add_command(cost)


if __name__ == "__main__":
    main()
