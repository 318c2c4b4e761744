"""`sendonce campaign preview` and `sendonce campaign test-send`: parsing and presentation only.

Registered on the `campaign` group by sendonce_ops/cli.py. Both need what the consumer sends
with (provider secrets' names, rates, suppression table, unsubscribe key and link): they read
the consumer function's environment from the stack, with SENDONCE_* variables over it
(sendonce_ops.endpoints.sending_settings). Addresses go in; only fingerprints come out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from sendonce.domain import limits
from sendonce.domain.campaigns.input_rules import strict_json_loads
from sendonce.domain.campaigns.preview import Preview, recipient_of
from sendonce.domain.campaigns.recipients_file import (
    RecipientFileError,
    RecipientReader,
    Row,
    format_for,
)
from sendonce.domain.errors import InvalidCampaignError
from sendonce.domain.models import TestSendRecord
from sendonce.wiring.preview import OperatorSending, build_operator_sending
from sendonce.wiring.stores import build_test_send_log
from sendonce_ops.endpoints import sending_settings

BAD_INPUT, PARTIAL = 2, 3  # sendonce_ops.cli.ExitCode


def _sending(obj: Any) -> OperatorSending:
    return build_operator_sending(sending_settings(obj.session, obj.endpoints, os.environ), obj.clients)


def _variables(raw: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        data = strict_json_loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidCampaignError(f"--vars: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise InvalidCampaignError('--vars: expected a JSON object, e.g. {"name": "Ann"}')
    return data


def recipient_rows(path: Path, fmt: str | None) -> Iterator[Row]:
    name = str(path)
    try:
        handle = path.open(encoding="utf-8-sig", newline="")
    except FileNotFoundError:
        raise RecipientFileError(f"{name}: no such file") from None
    except OSError as exc:
        raise RecipientFileError(f"{name}: cannot be read: {exc}") from None
    with handle:
        try:
            yield from RecipientReader(handle, format_for(name, fmt), name=name)
        except UnicodeDecodeError:
            raise RecipientFileError(f"{name}: not UTF-8 text") from None


def _recipient_at(where: str, fmt: str | None) -> Any:
    path, _, line = where.rpartition(":")
    if not path or not line.isdigit():
        raise InvalidCampaignError(f"--recipient: {where!r} is not FILE:LINE (e.g. people.csv:12)")
    for row in recipient_rows(Path(path), fmt):
        if row.line == int(line):
            if row.recipient is None:
                raise InvalidCampaignError(f"{path}:{line}: {row.problem}")
            return row.recipient
    raise InvalidCampaignError(f"{path}:{line}: no recipient on that line (a header, a blank line, or past the end)")


def _print_preview(preview: Preview, out: Path | None) -> None:
    click.echo(f"campaign {preview.campaign_id}, recipient {preview.recipient_id}, provider {preview.provider}")
    if preview.variant is not None:
        awaits = " (one of the rest: it gets the winner once picked; the first variant is shown)"
        click.echo(f"variant {preview.variant}" + (awaits if preview.awaits_winner else ""))
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("From", Text(preview.sender))
    if preview.reply_to:
        table.add_row("Reply-To", Text(preview.reply_to))
    table.add_row("Subject", Text(preview.subject or "-"))
    for name, value in preview.headers.items():
        table.add_row(name, Text(value))
    if not preview.unsubscribe_configured:
        table.add_row("List-Unsubscribe", "(none: no unsubscribe key and link configured)")
    click.get_current_context().obj.out.print(table)
    if preview.text is not None:
        click.echo("--- text ---\n" + preview.text)
    if preview.html is not None and out is None:
        click.echo("--- html ---\n" + preview.html)


@click.command("preview")
@click.argument("campaign_id")
@click.option("--recipient", "recipient_at", default=None, help="Render for the recipient on FILE:LINE.")
@click.option("--vars", "variables", default=None, help='Render with these variables (JSON, e.g. {"name": "Ann"}).')
@click.option(
    "--recipients",
    "recipients_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="With --check: render every recipient of this file.",
)
@click.option("--check", is_flag=True, help="Render every recipient of --recipients; report each that fails.")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl"]), default=None, help="Default: from the extension.")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None, help="Write the HTML part here.")
@click.option("--variant", default=None, help="An A/B campaign's variant to show (default: the recipient's own).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@click.pass_obj
def campaign_preview(
    obj: Any,
    campaign_id: str,
    recipient_at: str | None,
    variables: str | None,
    recipients_path: Path | None,
    check: bool,
    fmt: str | None,
    out: Path | None,
    variant: str | None,
    as_json: bool,
) -> None:
    """Show the email as the consumer renders it: subject, headers, text and HTML; nothing is sent.

    Variables the templates use but are not given, and those given but unused, are named.
    Exit 2 when the templates fail for the recipient (or, with --check, for any row).
    """
    if check != (recipients_path is not None):
        raise click.UsageError("--check and --recipients FILE go together")
    if check:
        if recipient_at or variables or out or variant:
            raise click.UsageError(
                "--check takes no --recipient, --vars, --out or --variant (it renders every variant)"
            )
        _check(obj, campaign_id, recipients_path, fmt, as_json)  # type: ignore[arg-type]
        return
    if recipient_at and variables:
        raise click.UsageError("give --recipient FILE:LINE or --vars JSON, not both")
    recipient = _recipient_at(recipient_at, fmt) if recipient_at else recipient_of(_variables(variables))
    preview = _sending(obj).preview.preview(campaign_id, recipient, variant=variant)
    if out is not None and preview.html is not None:
        out.write_text(preview.html, encoding="utf-8")
    if as_json:
        click.echo(json.dumps(preview.as_dict()))
    else:
        _print_preview(preview, out)
        if out is not None and preview.html is not None:
            click.echo(f"HTML written to {out}")
    if preview.missing:
        click.echo(f"variables the templates use, not given: {', '.join(preview.missing)}", err=True)
    if preview.unused:
        click.echo(f"variables given, used by no template: {', '.join(preview.unused)}", err=True)
    if not preview.ok:
        click.echo(f"error: {preview.error}", err=True)
        raise click.exceptions.Exit(BAD_INPUT)


def _check(obj: Any, campaign_id: str, path: Path, fmt: str | None, as_json: bool) -> None:
    preview = _sending(obj).preview
    report = preview.check(campaign_id, recipient_rows(path, fmt))
    for problem in report.problems:
        who = f" ({problem.recipient_id})" if problem.recipient_id else ""
        click.echo(f"{path}:{problem.line}{who}: {problem.problem}", err=True)
    if as_json:
        click.echo(json.dumps(report.as_dict()))
    else:
        click.echo(
            f"checked {report.checked} recipient(s) of {path}: {report.failed} failed"
            + (f", {report.duplicates} repeated id(s) skipped" if report.duplicates else "")
        )
        if report.unused:
            click.echo(f"variables given, used by no template: {', '.join(sorted(report.unused))}")
    if report.failed:
        raise click.exceptions.Exit(BAD_INPUT)


@click.command("test-send")
@click.argument("campaign_id")
@click.option(
    "--to",
    "to",
    multiple=True,
    required=True,
    help=f"Address(es), comma-separated or repeated; at most {limits.TEST_SEND_ADDRESSES}.",
)
@click.option("--vars", "variables", default=None, help="Template variables (JSON object).")
@click.option("--include-suppressed", is_flag=True, help="Send to suppressed addresses too (otherwise refused).")
@click.option(
    "--variant", default=None, help="An A/B campaign's variant to send (default: each of them, to every address)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@click.pass_obj
def campaign_test_send(
    obj: Any,
    campaign_id: str,
    to: tuple[str, ...],
    variables: str | None,
    include_suppressed: bool,
    variant: str | None,
    as_json: bool,
) -> None:
    """Send the campaign's email, marked as a test ([TEST] subject, X-Sendonce-Test header), to a few addresses.

    Through the campaign's provider and the shared send rate; never through the ledger: the
    campaign's counts, state and later real sends are unchanged. Recorded beside the campaign
    (`campaign status` shows the latest). Exit 3 when some address was not sent.
    """
    addresses = [a for value in to for a in value.split(",") if a.strip()]
    record = _sending(obj).test_sends.send(
        campaign_id,
        addresses,
        variables=_variables(variables),
        by=obj.operator(),
        include_suppressed=include_suppressed,
        variant=variant,
    )
    if as_json:
        click.echo(json.dumps(_record_json(record)))
    else:
        click.echo(
            f"test send {record.test_send_id} of {campaign_id} via {record.provider}: "
            f"{record.sent} of {len(record.outcomes)} sent"
        )
        for outcome in record.outcomes:
            result = f"sent ({outcome.provider_message_id})" if outcome.sent else f"not sent: {outcome.error}"
            note = f" [suppressed: {outcome.suppressed}]" if outcome.suppressed else ""
            which = f" variant {outcome.variant}:" if outcome.variant is not None else ""
            click.echo(f"  <email:{outcome.email_fingerprint}>{which} {result}{note}")
    if record.sent < len(record.outcomes):
        raise click.exceptions.Exit(PARTIAL)


def latest_test_sends(obj: Any, campaign_id: str) -> tuple[list[TestSendRecord], int]:
    """The latest test sends of a campaign and their count (for `campaign status`)."""
    log = build_test_send_log(obj.endpoints.campaigns_table, obj.clients.dynamodb)
    return log.recent(campaign_id, limit=limits.TEST_SENDS_SHOWN)


def json_of_test_sends(records: list[TestSendRecord], count: int) -> dict[str, Any]:
    return {"count": count, "recent": [_record_json(r) for r in records]}


def _record_json(record: TestSendRecord) -> dict[str, Any]:
    return {**record.model_dump(mode="json"), "sent": record.sent}


def print_test_sends(obj: Any, records: list[TestSendRecord], count: int) -> None:
    if not count:
        return
    table = Table(title=f"test sends: {count} (latest {len(records)})", title_justify="left")
    for column in ("at", "by", "sent", "to (fingerprints)"):
        table.add_column(column)
    for record in records:
        table.add_row(
            record.at,
            Text(record.by),
            f"{record.sent}/{len(record.outcomes)}",
            ", ".join(o.email_fingerprint for o in record.outcomes),
        )
    obj.out.print(table)
