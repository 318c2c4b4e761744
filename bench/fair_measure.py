"""What `make bench-fair` measures of a round (bench/fair.py runs the rounds): each campaign's
share of the emails while all had work queued, Jain's index, the limiter key's write units,
and the local Resend server's record of when each email was accepted."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.scale_stack import SENDER_DOMAIN, ScaleStack


@dataclass(frozen=True)
class Timeline:
    consumers_at: float  # time.time() when the round's consumers had started
    emails: dict[str, list[float]]  # per campaign role: when each of its emails was accepted


def shares(timeline: Timeline) -> dict[str, Any]:
    """Each campaign's share of the emails accepted while all had work queued: from the
    consumers' start (every campaign published) to the first campaign's last email; its rate
    there, and Jain's index (sum x)^2 / (n * sum x^2) of the rates."""
    start, emails = timeline.consumers_at, timeline.emails
    if not emails or not all(emails.values()):
        return {"window_s": None, "rates": {}, "shares": {}, "jain": None}
    end = min(max(times) for times in emails.values())
    window = end - start
    counts = {role: sum(1 for t in times if start <= t <= end) for role, times in emails.items()}
    rates = {role: n / window if window > 0 else 0.0 for role, n in counts.items()}
    total = sum(counts.values())
    # The span in which every campaign was actually sending (first email of the last to start,
    # to the last email of the first to finish); none when one only started after another ended.
    overlap = min(max(t) for t in emails.values()) - max(min(t) for t in emails.values())
    per_second = {}  # emails accepted in each second of the window
    for role, times in emails.items():
        seconds = Counter(int(t - start) for t in times if start <= t <= end)
        per_second[role] = [seconds.get(s, 0) for s in range(int(window) + 1)]
    return {
        "window_s": round(window, 2),
        "all_sending_s": round(max(overlap, 0.0), 2),
        "emails_in_window": counts,
        "shares": {role: round(n / total, 3) if total else None for role, n in counts.items()},
        "rates_per_s": {role: round(r, 1) for role, r in rates.items()},
        "jain": jain(list(rates.values())),
        "per_second": per_second,
    }


def jain(rates: Sequence[float]) -> float | None:
    squares = sum(x * x for x in rates)
    return round(sum(rates) ** 2 / (len(rates) * squares), 3) if squares else None


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def limiter_units(stack: ScaleStack) -> tuple[str, int, int]:
    """The limiter's partition key in the campaigns table: (key, write units, writes)."""
    for figure in stack.accountant.hottest(stack.deployed.campaigns_table, None):
        if figure.partition.startswith("limiter#"):
            return figure.partition, figure.units, figure.writes
    return "limiter#resend", 0, 0


def in_flight(sqs: Any, queue_url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessagesNotVisible"])


def accepted_by_campaign(resend_url: str) -> dict[str, list[float]]:
    """The local Resend server's records: when each email was accepted, by campaign (every
    bench campaign's addresses are `u<i>@<campaign>.<sender domain>`)."""
    with urllib.request.urlopen(resend_url + "/_local/accepted", timeout=120) as response:
        records = json.loads(response.read())["accepted"]
    suffix = "." + SENDER_DOMAIN
    by_campaign: dict[str, list[float]] = {}
    for email in records:
        for address in email["to"]:
            domain = address.rsplit("@", 1)[-1].lower()
            if domain.endswith(suffix):
                by_campaign.setdefault(domain.removesuffix(suffix), []).append(float(email["accepted_at"]))
    return by_campaign
