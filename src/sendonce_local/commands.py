"""The `sendonce` commands that run sendonce on this machine: `sendonce local api` and
`sendonce demo` (its body is sendonce_local/demo/run.py).

sendonce_ops/cli.py attaches them by name (`LOCAL_COMMANDS`) and imports this module
only when one of them is listed or run: the operator CLI itself imports neither the
Lambda handlers nor this tooling.
"""

from __future__ import annotations

import functools
import importlib.util
import signal
import sys
from typing import Any

import click

from sendonce_local.demo.run import demo
from sendonce_ops.cli_context import Cli, pass_cli

# The `local` extra. Without it these commands are listed as unavailable and say what to
# install, rather than failing part way with an import error (looked up, not imported: the
# CDK library takes seconds to import, and `sendonce --help` lists these commands).
_MISSING = [name for name in ("moto", "aws_cdk", "cdk_nag", "plotly") if importlib.util.find_spec(name) is None]
if _MISSING:
    raise ImportError(f"not installed: {', '.join(_MISSING)}")

__all__ = ["demo", "local"]


@click.group()
def local() -> None:
    """Run parts of sendonce on this machine (against moto or a real account)."""


@local.command("api")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--fire-schedules",
    is_flag=True,
    help="Also fire the stack's campaign schedules when due, in this process (moto never fires them).",
)
@click.option(
    "--clock-ahead",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="With --fire-schedules: fire by a clock this many seconds ahead of this machine's.",
)
@pass_cli
def local_api(cli: Cli, host: str, port: int, fire_schedules: bool, clock_ahead: float) -> None:
    """Serve the operator HTTP API's handler on loopback, as API Gateway would call it.

    Requests carry your AWS identity as the IAM caller, so state changes record it.
    """
    from sendonce_local.http_api import LocalHttpApi

    firer = _schedule_firer(cli, clock_ahead) if fire_schedules else None
    handler = api_handler(cli)
    server = LocalHttpApi(handler, caller_arn=cli.operator(), host=host, port=port, function_name="sendonce-api")
    cli.warn(
        f"sendonce API on {server.url} (OpenAPI: {server.url}/openapi.json, Swagger UI: {server.url}/swagger); "
        "Ctrl-C stops"
    )
    sys.stderr.flush()

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        if firer is not None:
            firer.stop()


def api_handler(cli: Cli) -> Any:
    """The operator API's handler as the deployed function runs it, with what this CLI knows of
    the stack: the operator service, and preview and test sends with the consumer's settings
    (the stack's consumer function's, or SENDONCE_* variables), not this process's environment."""
    from sendonce.handlers import api
    from sendonce.handlers.preview_routes import SendingOnDemand

    # Read once, when a preview or test send first needs them.
    settings = functools.cache(cli.consumer_settings)
    sending = SendingOnDemand(settings, campaigns_table=cli.endpoints.campaigns_table)
    return functools.partial(api.lambda_handler, service=cli.service(), sending=sending)


def _schedule_firer(cli: Cli, clock_ahead: float) -> Any:
    """The local EventBridge Scheduler: fires the stack's schedule group, invoking the
    scheduled-start handler in process with the stack's own settings."""

    from sendonce.domain.campaigns import lifecycle
    from sendonce.handlers import scheduled_start
    from sendonce.wiring.api import campaign_service
    from sendonce_local.scheduler_poller import LocalClock, SchedulePoller

    settings = cli.endpoints.api_settings()
    if not (settings.scheduler_group and settings.scheduled_start_function_arn):
        raise click.UsageError("--fire-schedules: the stack has no schedule group (ScheduleGroupName output)")
    start_settings = settings.model_copy(
        update={"scheduler_group": None, "scheduler_role_arn": None, "scheduled_start_function_arn": None}
    )
    service = campaign_service(start_settings, operator=lifecycle.AUTOMATIC)
    clock = LocalClock()
    clock.advance(clock_ahead)
    firer = SchedulePoller(
        client=cli.session.client("scheduler"),
        handlers={
            settings.scheduled_start_function_arn: functools.partial(scheduled_start.lambda_handler, service=service)
        },
        group_names=[settings.scheduler_group],
        clock=clock,
    )
    cli.warn(f"firing schedules of group {settings.scheduler_group} (clock {clock_ahead:g} s ahead)")
    return firer.start()
