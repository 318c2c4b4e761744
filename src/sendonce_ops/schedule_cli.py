"""`sendonce campaign reschedule` and `sendonce campaign unschedule` (and the `--at` of
publish): parsing and presentation only. Registered on the `campaign` group by cli.py.

A time is ISO 8601 with its UTC offset (2026-12-02T09:00:00+01:00, or Z), in the future;
anything else is refused before any AWS call (docs/operations-campaigns.md).
"""

from __future__ import annotations

from typing import Any

import click

from sendonce.domain.campaigns.scheduling import EXAMPLE, parse_instant

AT_HELP = f"Schedule the send: ISO 8601 with a UTC offset ({EXAMPLE}, or Z for UTC), in the future."


def at_option(required: bool) -> Any:
    return click.option("--at", "at", required=required, default=None, metavar="TIME", help=AT_HELP)


def instant(at: str | None) -> int | None:
    """--at as epoch ms (a bad time is InvalidCampaignError: exit 2, naming --at)."""
    return None if at is None else parse_instant(at, what="--at")


@click.command("reschedule")
@click.argument("campaign_id")
@at_option(required=True)
@click.option("--reason", default=None, help="Recorded with the state change.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@click.pass_obj
def campaign_reschedule(cli: Any, campaign_id: str, at: str, reason: str | None, as_json: bool) -> None:
    """Move a scheduled campaign's start (a firing for the old time then starts nothing)."""
    send_at_ms = instant(at)
    assert send_at_ms is not None
    campaign = cli.service(writes=True).reschedule(campaign_id, send_at_ms, reason=reason)
    cli.transition_output(campaign, "rescheduled", as_json)


@click.command("unschedule")
@click.argument("campaign_id")
@click.option("--reason", default=None, help="Recorded with the state change.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@click.pass_obj
def campaign_unschedule(cli: Any, campaign_id: str, reason: str | None, as_json: bool) -> None:
    """Back to draft, schedule deleted. The recipients recorded stay recorded and unsent: the next
    publish (now or --at) sends them with its own; cancel closes them."""
    campaign = cli.service(writes=True).unschedule(campaign_id, reason=reason)
    cli.transition_output(campaign, "unscheduled", as_json)
