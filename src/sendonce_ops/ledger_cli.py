"""`sendonce ledger show CAMPAIGN RECIPIENT`: one delivery's record and history.
Registered on `sendonce` by sendonce_ops/cli.py."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from sendonce_ops.cli_context import (
    Cli,
    ExitCode,
    fail,
    json_option,
    pass_cli,
)

# --- ledger -------------------------------------------------------------------------


@click.group()
def ledger() -> None:
    """The delivery ledger: one record per (campaign, recipient)."""


@ledger.command("show")
@click.argument("campaign_id")
@click.argument("recipient_id")
@json_option
@pass_cli
def ledger_show(cli: Cli, campaign_id: str, recipient_id: str, as_json: bool) -> None:
    """One delivery's record and history (the address appears only as a fingerprint)."""
    record = cli.service().delivery(campaign_id, recipient_id)
    if record is None:
        fail(
            ExitCode.BAD_INPUT,
            f"error: no ledger record for recipient {recipient_id!r} of campaign {campaign_id!r} "
            "(not claimed by a consumer yet, or never published)",
        )
    if as_json:
        cli.json(record.model_dump(mode="json"))
        return
    click.echo(f"delivery {campaign_id} / {recipient_id}")
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for name in (
        "state",
        "reason",
        "error_class",
        "attempts",
        "provider",
        "provider_message_id",
        "batch_id",
        "owner",
        "lease_until_ms",
        "maybe_sent_at_ms",
        "email_fingerprint",
        "updated_at",
    ):
        value = getattr(record, name)
        if value is not None:
            table.add_row(name, Text(str(value.value if hasattr(value, "value") else value)))
    cli.out.print(table)
    history = Table(title="history", title_justify="left")
    for column in ("at", "event", "owner", "detail"):
        history.add_column(column)
    for entry in record.history:
        history.add_row(*(Text(str(entry.get(c) or "")) for c in ("at", "event", "owner", "detail")))
    cli.out.print(history)
