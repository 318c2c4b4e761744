"""`sendonce suppression ...` and `sendonce campaign unknowns`: parsing and presentation only.

Registered on the main command line by `cli.add_command(suppression)` and
`campaign.add_command(campaign_unknowns)` (sendonce_ops/cli.py). The commands read the
group's context object for the boto3 session and the stack name, and take the tables from
SENDONCE_SUPPRESSIONS_TABLE / SENDONCE_LEDGER_TABLE / SENDONCE_CAMPAIGNS_TABLE or the stack's
outputs SuppressionsTableName / LedgerTableName / CampaignsTableName. Addresses go in; what
comes out is fingerprints: the list never holds an address.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import boto3
import click

from sendonce.contract import Output, env_name
from sendonce.domain.campaigns.unknowns import DEFAULT_UNKNOWN_WINDOW_S
from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.deliverability.suppressions import ChangeReport, parse_reason
from sendonce.wiring.clients import Clients
from sendonce.wiring.operator import build_suppression_service, build_unknown_outcomes
from sendonce_ops.endpoints import DEFAULT_STACK, EndpointsError, stack_outputs

REASONS = [r.value for r in SuppressionReason]


def _session(obj: Any) -> boto3.session.Session:
    return getattr(obj, "session", None) or boto3.session.Session()


def _clients(obj: Any) -> Clients:
    clients = getattr(obj, "clients", None)
    return clients if isinstance(clients, Clients) else Clients(_session(obj))


def table_name(obj: Any, env: str, output: str) -> str:
    value = os.environ.get(env)
    if value:
        return value
    stack = getattr(obj, "stack", None) or DEFAULT_STACK
    value = stack_outputs(_session(obj), stack).get(output)
    if not value:
        raise EndpointsError(f"stack {stack!r} has no output {output} (or set {env})")
    return value


def _service(obj: Any):
    return build_suppression_service(
        table_name(obj, env_name("suppressions_table"), Output.SUPPRESSIONS_TABLE_NAME), _clients(obj)
    )


def _report(report: ChangeReport, verb: str, unchanged: str, as_json: bool) -> None:
    if as_json:
        click.echo(
            json.dumps({verb: report.changed, unchanged: report.unchanged, "invalid_lines": report.invalid_lines})
        )
        return
    click.echo(f"{verb} {report.changed}, {unchanged} {report.unchanged}")
    if report.invalid_lines:
        shown = ", ".join(map(str, report.invalid_lines[:20])) + (" ..." if len(report.invalid_lines) > 20 else "")
        click.echo(f"not addresses (skipped), by position: {shown}", err=True)


def _reason(value: str) -> SuppressionReason:
    try:
        return parse_reason(value, SuppressionReason.MANUAL)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
reason_option = click.option("--reason", type=click.Choice(REASONS), default="manual", show_default=True)


@click.group()
def suppression() -> None:
    """The suppression list: addresses that are never sent to (stored as fingerprints)."""


@suppression.command("add")
@click.argument("emails", nargs=-1, required=True)
@reason_option
@json_option
@click.pass_obj
def suppression_add(obj: Any, emails: tuple[str, ...], reason: str, as_json: bool) -> None:
    """Suppress addresses; one already on the list keeps its first reason."""
    report = _service(obj).add(
        emails, reason=_reason(reason), source=f"cli:{getattr(obj, 'operator_name', None) or 'operator'}"
    )
    _report(report, "added", "already suppressed", as_json)
    if report.invalid_lines:
        raise click.exceptions.Exit(2)


@suppression.command("remove")
@click.argument("emails", nargs=-1, required=True)
@json_option
@click.pass_obj
def suppression_remove(obj: Any, emails: tuple[str, ...], as_json: bool) -> None:
    """Take addresses off the list (they may be sent to again)."""
    _report(_service(obj).remove(emails), "removed", "not on the list", as_json)


@suppression.command("check")
@click.argument("email")
@json_option
@click.pass_obj
def suppression_check(obj: Any, email: str, as_json: bool) -> None:
    """Whether an address is suppressed, and why (exit 0 either way)."""
    found = _service(obj).check(email)
    if as_json:
        click.echo(json.dumps(found.__dict__ if found else None, default=str))
    elif found:
        click.echo(f"suppressed: {found.reason.value} (source {found.source}, since {found.created_at})")
    else:
        click.echo("not suppressed")


@suppression.command("list")
@json_option
@click.pass_obj
def suppression_list(obj: Any, as_json: bool) -> None:
    """Every entry: fingerprint, reason, source, campaign, since. One line each; streams."""
    for entry in _service(obj).list():
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "fingerprint": entry.fingerprint,
                        "reason": entry.reason.value,
                        "source": entry.source,
                        "campaign_id": entry.campaign_id,
                        "created_at": entry.created_at,
                    }
                )
            )
        else:
            click.echo(
                f"{entry.fingerprint}  {entry.reason.value:<12}  {entry.source:<28}  "
                f"{entry.campaign_id or '-':<20}  {entry.created_at or ''}"
            )


@suppression.command("import")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False, allow_dash=True))
@reason_option
@json_option
@click.pass_obj
def suppression_import(obj: Any, path: Path, reason: str, as_json: bool) -> None:
    """Add the addresses of a file: one per line, or CSV `email[,reason]` (a header row,
    blank lines and # comments are skipped). Lines that are not addresses are reported by
    number, never printed."""
    service = _service(obj)
    if str(path) == "-":
        report = service.import_lines(sys.stdin, reason=_reason(reason), source="cli:import")
    else:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            report = service.import_lines(handle, reason=_reason(reason), source=f"cli:import:{path.name}")
    _report(report, "added", "already suppressed", as_json)
    if report.invalid_lines:
        raise click.exceptions.Exit(3)


@click.command("unknowns")
@click.argument("campaign_id")
@click.option(
    "--older-than",
    "older_than_s",
    type=click.IntRange(min=0),
    default=DEFAULT_UNKNOWN_WINDOW_S,
    show_default=True,
    help="Seconds a delivery must have been unknown (no provider 'sent' event since).",
)
@json_option
@click.pass_obj
def campaign_unknowns(obj: Any, campaign_id: str, older_than_s: int, as_json: bool) -> None:
    """Deliveries whose outcome is still unknown: `campaign resume --include-unknown` may send them again."""
    outcomes = build_unknown_outcomes(
        table_name(obj, env_name("ledger_table"), Output.LEDGER_TABLE_NAME),
        table_name(obj, env_name("campaigns_table"), Output.CAMPAIGNS_TABLE_NAME),
        _clients(obj),
    )
    for unknown in outcomes.older_than(campaign_id, older_than_s):
        if as_json:
            click.echo(json.dumps(unknown.__dict__))
        else:
            click.echo(
                f"{unknown.recipient_id}  {unknown.provider or '-'}  {unknown.email_fingerprint or '-'}  {unknown.reason or ''}"
            )
