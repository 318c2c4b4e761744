"""`sendonce campaign forecast ID --recipients FILE`: who a file would reach and when the send
would end, before anything is published (domain/campaigns/forecast.py). Parsing and
presentation only; nothing is written.

It reads what publishing would: the campaign, the suppression list (the consumer's table), the
campaigns sharing the provider now (the shared limiter's slots) and the rate the consumer
paces the provider at (the forecast service, domain/campaigns/forecasting.py, as the operator
API's); and prices the audience with `sendonce cost`'s model.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import yaml
from rich.table import Table

from sendonce.domain.campaigns.forecast import Forecast
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups, MailboxGroupsError
from sendonce.domain.sending.shares import rate_in_force
from sendonce.wiring.operator import build_forecast_service
from sendonce_ops.cli_context import Cli, json_option, pass_cli
from sendonce_ops.cost.model import audience_cost
from sendonce_ops.endpoints import ConsumerPaces, sending_settings
from sendonce_ops.preview_cli import recipient_rows
from sendonce_ops.sending_cli import duration


def _groups(path: Path | None, groups: MailboxGroups) -> MailboxGroups:
    """The deployment's table (the consumer's), extended by a YAML or JSON file of group ->
    domain patterns."""
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


def _print(cli: Cli, result: Forecast, cost: dict[str, Any]) -> None:
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("rows read", f"{result.rows_read:,}")
    table.add_row("bad rows (not published)", f"{result.bad_rows:,}")
    table.add_row("repeated ids (sent once)", f"{result.repeated_ids:,}")
    same = "sent once" if result.dedupe_addresses else "sent to each"
    table.add_row(f"same address, another id ({same})", f"{result.duplicate_addresses:,}")
    checked = "suppressed (not sent)" if result.suppressions_checked else "suppressed (no suppression list read)"
    table.add_row(checked, f"{result.suppressed:,}")
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
    if result.group_caps:
        caps = ", ".join(f"{group} {cap:g}/s" for group, cap in result.group_caps.items())
        click.echo(f"caps per mailbox group: {caps}; the ETA follows {result.bound_by} (each cap as if not shared)")
    click.echo(f"starts {_when(result.starts_at_ms)}, ends {_when(result.ends_at_ms)} (ETA {duration(result.eta_s)})")
    if result.warmup_days is not None:
        click.echo(
            f"warm-up: {result.warmup_left_today:,} left today for the sending domain; the audience needs"
            f" {result.warmup_days} day(s) of its ramp"
        )
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
    service = cli.service()
    service.get(campaign_id)  # an unknown campaign fails before anything else is read
    settings = sending_settings(cli.session, cli.endpoints, os.environ)
    groups = _groups(groups_path, settings.group_pacing.groups)
    paces = ConsumerPaces(cli.session, cli.endpoints, os.environ)

    def consumer_rate(provider: str) -> float:  # not paced by the limiter: the consumer's configured rate
        pace = paces[provider]
        return rate_in_force(pace.rate, pace.reserve)

    forecasts = build_forecast_service(
        cli.endpoints.campaigns_table,
        settings.suppressions_table,
        cli.clients,
        campaigns=service,
        paces=paces,
        groups=groups,
        caps=settings.group_pacing.caps,
        warm=settings.warmup_schedules,
        fallback_rate=consumer_rate,
    )
    result, _ = forecasts.of_rows(campaign_id, recipient_rows(path, fmt), dedupe_addresses=dedupe_addresses, keep=0)
    cost = audience_cost(result.audience, result.provider, result.delivery_mode)
    if as_json:
        click.echo(json.dumps({**result.as_dict(), "cost": cost}))
    else:
        _print(cli, result, cost)
