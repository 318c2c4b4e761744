"""`sendonce campaign forecast ID --recipients FILE`: who a file would reach and when the send
would end, before anything is published (domain/campaigns/forecast.py). Parsing and
presentation only; nothing is written.

It reads what publishing would: the campaign, the suppression list (the consumer's table), the
campaigns sharing the provider now (the shared limiter's slots) and the rate the consumer
paces the provider at; and prices the audience with `sendonce cost`'s model.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import yaml
from rich.table import Table

from sendonce.domain.campaigns.forecast import Forecast, Sharer, Sharing, forecast
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups, MailboxGroupsError
from sendonce.domain.deliverability.ports import Suppression
from sendonce.domain.sending.shares import rate_in_force
from sendonce.wiring.stores import build_suppressions
from sendonce_ops.cli_context import Cli, json_option, pass_cli
from sendonce_ops.cost.model import campaign_cost
from sendonce_ops.endpoints import ConsumerPaces, sending_settings
from sendonce_ops.preview_cli import recipient_rows
from sendonce_ops.sending_cli import duration


class _NoSuppressions:
    """A deployment without a suppression list suppresses nobody."""

    def suppressed_among(self, emails: Any) -> dict[str, Suppression]:
        return {}


def _groups(path: Path | None) -> MailboxGroups:
    """The default table, extended by a YAML or JSON file of group -> domain patterns."""
    groups = MailboxGroups()
    if path is None:
        return groups
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise MailboxGroupsError(f"{path}: cannot read a groups table: {exc}") from None
    if not isinstance(data, Mapping) or not all(isinstance(v, list) for v in data.values()):
        raise MailboxGroupsError(f"{path}: expected a mapping of group -> list of domain patterns")
    try:
        return groups.extended(data)
    except MailboxGroupsError as exc:
        raise MailboxGroupsError(f"{path}: {exc}") from None


def _when(ms: int | None) -> str:
    if ms is None:
        return "never (its send window does not open within a year)"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cost(result: Forecast, mode: str) -> dict[str, Any]:
    if not result.audience:
        return {"aws_total": 0.0, "note": "nobody to send to"}
    try:
        cost = campaign_cost(result.audience, result.provider, mode).as_dict()
    except ValueError as exc:
        return {"aws_total": None, "note": str(exc)}
    return {
        "aws_total": cost["aws_total"],
        "per_1000_recipients": cost["per_1000_recipients"],
        "note": cost["provider_note"],
    }


def _print(cli: Cli, result: Forecast, cost: dict[str, Any]) -> None:
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("rows read", f"{result.rows_read:,}")
    table.add_row("bad rows (not published)", f"{result.bad_rows:,}")
    table.add_row("repeated ids (sent once)", f"{result.repeated_ids:,}")
    same = "sent once" if result.dedupe_addresses else "sent to each"
    table.add_row(f"same address, another id ({same})", f"{result.duplicate_addresses:,}")
    table.add_row("suppressed (not sent)", f"{result.suppressed:,}")
    table.add_row("audience", f"{result.audience:,}")
    for group, n in result.groups.items():
        share = f" ({n / result.audience:.0%})" if result.audience else ""
        table.add_row(f"  {group}", f"{n:,}{share}")
    cli.out.print(table)
    sharing = f", shared with {result.campaigns_sharing} campaign(s) sending now" if result.campaigns_sharing else ""
    click.echo(
        f"rate: {result.rate:.1f} {result.provider} requests/s x {result.recipients_per_request} recipient(s)"
        f" = {result.recipients_per_s:.1f} recipients/s{sharing}"
    )
    click.echo(f"starts {_when(result.starts_at_ms)}, ends {_when(result.ends_at_ms)} (ETA {duration(result.eta_s)})")
    click.echo(f"not applied: {', '.join(result.not_applied)} (sendonce does not enforce them yet)")
    total = cost.get("aws_total")
    money = "unknown" if total is None else f"${total:,.2f}"
    click.echo(f"AWS cost (sendonce cost's model): {money}; {cost.get('note') or ''}".rstrip("; "))


@click.command("forecast")
@click.argument("campaign_id")
@click.option(
    "--recipients",
    "path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The recipients file a publish would read.",
)
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl"]), default=None, help="Default: from the extension.")
@click.option("--dedupe-addresses", is_flag=True, help="As publish --dedupe-addresses: an address is sent once.")
@click.option(
    "--mailbox-groups",
    "groups_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="A YAML/JSON file of group -> domain patterns added to the default table.",
)
@json_option
@pass_cli
def campaign_forecast(
    cli: Cli,
    campaign_id: str,
    path: Path,
    fmt: str | None,
    dedupe_addresses: bool,
    groups_path: Path | None,
    as_json: bool,
) -> None:
    """Who FILE would reach (after suppressions, repeats, per mailbox provider) and when the
    send would end, at the share of the rate the campaigns sending now leave it. Nothing is
    published or written."""
    run_forecast(
        cli, campaign_id, path, fmt, dedupe_addresses=dedupe_addresses, groups_path=groups_path, as_json=as_json
    )


def run_forecast(
    cli: Cli,
    campaign_id: str,
    path: Path,
    fmt: str | None,
    *,
    dedupe_addresses: bool,
    groups_path: Path | None = None,
    as_json: bool,
) -> None:
    """`campaign forecast`, and `campaign publish --dry-run`."""
    groups = _groups(groups_path)
    campaign = cli.service().get(campaign_id)
    settings = sending_settings(cli.session, cli.endpoints, os.environ)
    suppressions = (
        build_suppressions(settings.suppressions_table, cli.clients.dynamodb)
        if settings.suppressions_table
        else _NoSuppressions()
    )
    now = cli.sending_now()
    # The campaigns sending on its provider now, each with what it has left (its status).
    found = next((p for p in now.providers() if p.provider == campaign.provider), None)
    others = tuple(
        Sharer(c.claimant, None if c.to_send is None else math.ceil(c.to_send / (c.recipients_per_request or 1)))
        for c in (found.campaigns if found else ())
    )
    rate = now.rate_in_force(campaign.provider)
    if rate is None:  # not paced by the limiter: the rate the consumer is configured with
        pace = ConsumerPaces(cli.session, cli.endpoints, os.environ)[campaign.provider]
        rate = rate_in_force(pace.rate, pace.reserve)
    sharing = Sharing(rate=rate, others=others, batch_size=now.batch_size(campaign.provider))
    rows: Iterator[Any] = recipient_rows(path, fmt)
    result = forecast(
        campaign,
        rows,
        suppressions=suppressions,
        groups=groups,
        sharing=sharing,
        now_ms=int(dt.datetime.now(dt.UTC).timestamp() * 1000),
        dedupe_addresses=dedupe_addresses,
    )
    cost = _cost(result, campaign.delivery_mode)
    if as_json:
        click.echo(json.dumps({**result.as_dict(), "cost": cost}))
    else:
        _print(cli, result, cost)
