"""`sendonce sending`: every campaign sending now on this account, side by side (its share of
the provider's rate, its messages' dwell, its ETA); and the line `campaign status|watch`
print of one campaign's. Presentation only: the figures are SendingNow's
(domain/sending/sending_now.py), read from the shared limiter's slot items."""

from __future__ import annotations

from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from sendonce.domain.campaigns.status import DeliveryStatus
from sendonce.domain.models import Campaign, CampaignState
from sendonce.domain.sending.sending_now import DEFAULT_WINDOW_S, MAX_WINDOW_S, CampaignSending
from sendonce_ops.cli_context import Cli, json_option, pass_cli


def duration(seconds: float | None) -> str:
    """45s, 3m 20s, 2h 05m; "-" when unknown."""
    if seconds is None:
        return "-"
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}/s"


def sending_of(cli: Cli, campaign: Campaign, status: DeliveryStatus) -> CampaignSending | None:
    """The campaign in its provider's last DEFAULT_WINDOW_S seconds; None when it is not
    sending (then nothing is read) or took no part in them."""
    if status.state is not CampaignState.SENDING:
        return None
    return cli.sending_now().campaign(campaign, status, window_s=DEFAULT_WINDOW_S)


def sending_json(sending: CampaignSending | None) -> dict[str, Any] | None:
    return None if sending is None else sending.as_dict()


def sending_line(sending: CampaignSending | None, status: DeliveryStatus, *, short: bool = False) -> str:
    """The campaign's rate, share, dwell and ETA, or that it is not sending now; `short`: for
    `watch`'s progress line."""
    if sending is None:
        if status.state is not CampaignState.SENDING:
            return f"not sending now ({status.state.value})"
        return f"not sending now (no place in the last {DEFAULT_WINDOW_S} s)"
    dwell = f", dwell {duration(sending.dwell_s)}" if sending.dwell_s is not None else ""
    eta = f", ETA {duration(sending.eta_s)}"
    if short:
        return f"{_rate(sending.rate)} ({sending.share:.0%} of {sending.provider}){dwell}{eta}"
    assigned = f", assigned {_rate(sending.assigned_rate)}" if sending.assigned_rate is not None else ""
    return (
        f"sending now (last {sending.window_s} s): {_rate(sending.rate)}, "
        f"{sending.share:.0%} of {sending.provider}'s requests{assigned}{dwell}{eta}"
    )


@click.command("sending")
@click.option(
    "--window",
    "window_s",
    type=click.IntRange(1, MAX_WINDOW_S),
    default=DEFAULT_WINDOW_S,
    show_default=True,
    help="Seconds looked back (whole seconds before this one).",
)
@json_option
@pass_cli
def sending(cli: Cli, window_s: int, as_json: bool) -> None:
    """Every campaign sending now on this account, side by side: its share of the provider's rate.

    Rate: its provider requests per second over the window; share: of the provider's requests
    there; assigned: the rate the sharing rules give it now, at the rate in force; dwell: how long
    its latest message waited in the queue; ETA: its recipients still to send at that rate.
    One Query per provider (the shared limiter's slot items), two small reads per campaign.
    """
    providers = cli.sending_now().providers(window_s=window_s)
    campaigns = [c for p in providers for c in p.campaigns]
    if as_json:
        cli.json(
            {
                "window_s": window_s,
                "providers": [p.as_dict() for p in providers],
                "campaigns": [c.as_dict() for c in campaigns],
            }
        )
        return
    if not campaigns:
        click.echo(f"no campaign sent in the last {window_s} s")
        return
    for p in providers:
        table = Table(
            title=f"{p.provider}: {_rate(p.rate)} taken over the last {window_s} s, {_rate(p.rate_in_force)} in force",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
        )
        for column in ("campaign", "weight", "priority", "max rate", "rate", "share", "assigned", "dwell", "ETA"):
            table.add_column(
                column, justify="left" if column in ("campaign", "priority") else "right", min_width=len(column)
            )
        for c in p.campaigns:
            cap = f"{c.claimant.max_rate:g}/s" if c.claimant.max_rate is not None else "-"
            table.add_row(
                Text(c.campaign_id),
                str(c.claimant.weight),
                c.claimant.priority,
                cap,
                _rate(c.rate),
                f"{c.share:.0%}",
                _rate(c.assigned_rate),
                duration(c.dwell_s),
                duration(c.eta_s),
            )
        cli.out.print(table)
