"""`make bench-fair`'s round of caps per mailbox-provider group (issue 32, item 1).

The stack is deployed with a Google cap (`pacing: {google: CAP}`, emails per second) below
what the provider takes (Resend's team limit x 100 emails a batch request). One batch-mode
campaign whose recipients are `--groups-google` Google (gmail.com), half the rest Microsoft
(outlook.com, uncapped) and half other domains: measured at the local Resend server (each
email's `accepted_at`), the Google emails per second (the busiest second against the cap,
goal: within 10 %), the rate of the others while Google sent, and duplicates and missing
per address.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.scale_stack import SENDER_DOMAIN, ScaleStack, bench_campaign
from sendonce.domain.deliverability.group_caps import send_group_size
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups
from sendonce.domain.models import CampaignState
from sendonce.wiring.api import build_campaign_reports
from sendonce.wiring.clients import Clients

GOAL_TOLERANCE = 0.10  # issue 32: the busiest second within 10 % of the cap


@dataclass(frozen=True)
class GroupsConfig:
    recipients: int = 2_000
    google_share: float = 0.6
    google_cap: float = 20.0
    send_timeout_s: float = 420.0
    complete_timeout_s: float = 180.0

    @property
    def context(self) -> tuple[tuple[str, str], ...]:
        """The deployment's CDK context for this round: its caps."""
        return (("pacing", json.dumps({"google": self.google_cap})),)


def recipients(campaign_id: str, config: GroupsConfig) -> list[dict[str, Any]]:
    """Google for `google_share` of them, spread through the list; Microsoft and other
    domains for the rest. Every address names the campaign, so the provider's count is its."""
    google = round(config.recipients * config.google_share)
    rows = []
    for i in range(config.recipients):
        if i * google // config.recipients != (i + 1) * google // config.recipients:
            email = f"g{i}.{campaign_id}@gmail.com"
        elif i % 2:
            email = f"m{i}.{campaign_id}@outlook.com"
        else:
            email = f"u{i}@{campaign_id}.{SENDER_DOMAIN}"
        rows.append({"recipient_id": f"r{i:07d}", "email": email, "variables": {"name": f"User {i}"}})
    return rows


def run_groups(stack: ScaleStack, config: GroupsConfig, say: Callable[[str], None]) -> dict[str, Any]:
    campaign_id = "groups-1"
    rows = recipients(campaign_id, config)
    groups = MailboxGroups()
    by_group = Counter(groups.of_address(r["email"]) for r in rows)
    stack.operator.create(bench_campaign(campaign_id, "bench-fair caps per mailbox group"))
    runtimes = [stack.consumer_runtime() for _ in range(stack.consumer_count)]
    accepted_before = stack.resend.stats()["emails_accepted"]
    stack.client.publish(campaign_id, iter(rows))
    say(f"groups: {len(rows):,} published ({dict(by_group)}), Google cap {config.google_cap:g}/s")
    stack.accountant.reset()
    consumers_at = time.time()
    stack.start_consumers(runtimes=runtimes)
    accepted = 0
    try:
        deadline = time.monotonic() + config.send_timeout_s
        while accepted < len(rows) and time.monotonic() < deadline:
            time.sleep(0.5)
            accepted = stack.resend.stats()["emails_accepted"] - accepted_before
        sent_s = time.time() - consumers_at
        deadline = time.monotonic() + config.complete_timeout_s
        completed = False
        while not completed and time.monotonic() < deadline:
            completed = stack.operator.get(campaign_id).state is CampaignState.COMPLETED
            if not completed:
                time.sleep(1)
    finally:
        stack.stop_consumers()
    say(f"groups: {accepted:,} of {len(rows):,} accepted in {sent_s:.0f} s, completed {completed}")

    # The cap's key (limiter#group#google, its slot items) against the scale rule's 0.1 a recipient.
    key = next(
        (
            f
            for f in stack.accountant.hottest(stack.deployed.campaigns_table, None)
            if f.partition == "limiter#group#google"
        ),
        None,
    )
    emails = _accepted(stack.resend.url, campaign_id)
    google = sorted(t for address, t in emails if groups.of_address(address) == "google")
    others = sorted(t for address, t in emails if groups.of_address(address) != "google")
    per_second = Counter(int(t) for t in google)
    busiest = max(per_second.values()) if per_second else 0
    span = (google[-1] - google[0]) if len(google) > 1 else None
    # The others while Google sent: their rate between Google's first and last email.
    others_during = [t for t in others if google and google[0] <= t <= google[-1]]
    counts = Counter(address for address, _ in emails)
    wanted = {r["email"] for r in rows}
    stack.drain_aggregator(say, "groups")
    # The report's counts per group (issue 32, item 6): its sends against what was sent, and
    # the Google emails the cap held to a later second.
    report = build_campaign_reports(stack.api_settings, Clients(stack.functions["api"])).report(campaign_id)
    reported = {g: sum(b.counts.get("sent", 0) for b in bs) for g, bs in report.groups_over_time.items()}
    held = report.held_back()
    stack.resend.reset()
    return {
        "recipients": len(rows),
        "by_group": dict(by_group),
        "google_cap_per_s": config.google_cap,
        "google_send_group": send_group_size(config.google_cap),
        "google_busiest_second": busiest,
        "google_busiest_over_cap": round(busiest / config.google_cap, 3),
        "google_mean_per_s": round((len(google) - 1) / span, 2) if span else None,
        "google_seconds": len(per_second),
        "others_per_s_while_google_sent": round(len(others_during) / span, 1) if span else None,
        "others_last_s": round(others[-1] - consumers_at, 1) if others else None,
        "google_last_s": round(google[-1] - consumers_at, 1) if google else None,
        "group_key_write_units_per_google_recipient": round(key.units / by_group["google"], 4) if key else None,
        "group_key_writes": key.writes if key else 0,
        "duplicates": sum(n - 1 for n in counts.values() if n > 1),
        "missing": len(wanted - set(counts)),
        "completed": completed,
        "sent_s": round(sent_s, 1),
        "report_sent_by_group": reported,
        "report_agrees": reported == {g: n for g, n in by_group.items() if n},
        "report_held_by_group": held,
        "met": busiest <= config.google_cap * (1 + GOAL_TOLERANCE)
        and not (wanted - set(counts))
        and all(n == 1 for n in counts.values())
        and reported == {g: n for g, n in by_group.items() if n},
    }


def _accepted(resend_url: str, campaign_id: str) -> list[tuple[str, float]]:
    """(address, accepted_at) of every email of the campaign the local Resend server accepted."""
    with urllib.request.urlopen(resend_url + "/_local/accepted", timeout=120) as response:
        records = json.loads(response.read())["accepted"]
    found = []
    for email in records:
        for address in email["to"]:
            address = address.lower()
            if f".{campaign_id}@" in address or address.endswith(f"@{campaign_id}.{SENDER_DOMAIN}"):
                found.append((address, float(email["accepted_at"])))
    return found


def line(figures: dict[str, Any]) -> str:
    return (
        f"{figures['recipients']:,} recipients {figures['by_group']}: Google cap {figures['google_cap_per_s']:g}/s "
        f"(send groups of {figures['google_send_group']}), busiest second {figures['google_busiest_second']} "
        f"({figures['google_busiest_over_cap']:.0%} of the cap), mean {figures['google_mean_per_s']}/s; "
        f"others {figures['others_per_s_while_google_sent']}/s meanwhile; its key "
        f"{figures['group_key_write_units_per_google_recipient']} write units a Google recipient; "
        f"duplicates {figures['duplicates']}, missing {figures['missing']}; the report's sends per group "
        f"{'agree' if figures['report_agrees'] else 'DISAGREE: ' + str(figures['report_sent_by_group'])}, "
        f"held by the cap {figures['report_held_by_group']}" + ("" if figures["met"] else " (goal missed)")
    )
