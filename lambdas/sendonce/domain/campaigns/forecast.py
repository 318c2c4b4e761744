"""A forecast before anyone is sent anything (issue 32, item 5): who a recipients file would
reach, at which mailbox providers, and when the send would end.

From the file and the campaign, nothing published and nothing written:

- the audience: the file's good rows, a repeated recipient_id once, an address repeated
  under another id once or each time (as `publish --dedupe-addresses` would), less the
  suppressed addresses (one consistent read per 100 addresses);
- the audience per mailbox-provider group (deliverability/mailbox_groups.py);
- an ETA: the campaign's share of its provider's rate as the shared limiter would divide it
  (`shares.divide`: weights, priority, max_rates) among the campaigns sending now, each
  draining what it has left, the shares divided again whenever one ends; times the
  recipients a request carries; from its start (now, or its `send_at`), its sending time
  laid over its send window's open hours.

The ETA assumes the rate in force now holds, that a campaign whose remaining recipients are
unknown keeps sending, and that no other campaign starts. Per-group caps and a warm-up ramp
are not applied (sendonce does not enforce them yet), and the forecast says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sendonce.domain.campaigns.recipients_file import Row, RowTally
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups
from sendonce.domain.deliverability.ports import Suppressions
from sendonce.domain.models import MAX_RECIPIENTS_PER_BATCH, Campaign, email_fingerprint
from sendonce.domain.sending.shares import Claimant, divide

SUPPRESSION_READ = 100  # addresses per consistent read (one BatchGetItem)
# A window that never opens again would make the walk endless: a forecast past this says so.
HORIZON_MS = 366 * 24 * 3600 * 1000


@dataclass(frozen=True)
class Sharer:
    """A campaign sending now: how it shares, and the provider requests it has left (None:
    unknown, so it is taken to keep sending)."""

    claimant: Claimant
    requests_left: float | None = None


@dataclass(frozen=True)
class Sharing:
    """The provider's rate in force (requests/s) and the campaigns sending with it now."""

    rate: float
    others: tuple[Sharer, ...] = ()
    batch_size: int = 1  # recipients one batch-mode request carries at most


@dataclass
class Forecast:
    campaign_id: str
    provider: str
    rows_read: int = 0
    bad_rows: int = 0
    repeated_ids: int = 0
    duplicate_addresses: int = 0
    dedupe_addresses: bool = False
    suppressed: int = 0
    audience: int = 0
    groups: dict[str, int] = field(default_factory=dict)
    rate: float = 0.0  # provider requests per second assigned to the campaign at its start
    recipients_per_request: int = 1
    campaigns_sharing: int = 0  # other campaigns sending on the provider now
    starts_at_ms: int = 0
    ends_at_ms: int | None = None  # None: past HORIZON_MS (a window that never opens)
    not_applied: tuple[str, ...] = ("mailbox-provider group caps", "warm-up")

    @property
    def recipients_per_s(self) -> float:
        return self.rate * self.recipients_per_request

    @property
    def eta_s(self) -> float | None:
        """Seconds from its start to its last send."""
        return None if self.ends_at_ms is None else (self.ends_at_ms - self.starts_at_ms) / 1000

    def as_dict(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.__dict__.items() if k != "not_applied"},
            "not_applied": list(self.not_applied),
            "recipients_per_s": self.recipients_per_s,
            "eta_s": self.eta_s,
        }


def claimant_of(campaign: Campaign) -> Claimant:
    return Claimant(
        campaign_id=campaign.campaign_id, weight=campaign.weight, priority=campaign.priority, max_rate=campaign.max_rate
    )


def _others(campaign: Campaign, sharing: Sharing) -> dict[str, Sharer]:
    return {s.claimant.campaign_id: s for s in sharing.others if s.claimant.campaign_id != campaign.campaign_id}


def assigned_rate(campaign: Campaign, sharing: Sharing) -> float:
    """The campaign's requests/s among the campaigns sending now, as `shares.divide` gives it."""
    me = claimant_of(campaign)
    return divide(sharing.rate, [*(s.claimant for s in _others(campaign, sharing).values()), me])[me.campaign_id]


def sending_s(campaign: Campaign, requests: float, sharing: Sharing) -> float | None:
    """Seconds of sending the campaign's `requests` take while the others drain theirs: the
    rate divided anew each time one of them ends. None: it would never get a place."""
    me = claimant_of(campaign)
    left = {cid: s.requests_left for cid, s in _others(campaign, sharing).items()}
    claimants = {cid: s.claimant for cid, s in _others(campaign, sharing).items()}
    mine, elapsed = float(requests), 0.0
    while mine > 1e-9:
        rates = divide(sharing.rate, [*(claimants[c] for c in left), me])
        steps = [mine / rates[me.campaign_id]] if rates[me.campaign_id] > 0 else []
        steps += [n / rates[c] for c, n in left.items() if n is not None and rates[c] > 0]
        if not steps:
            return None
        step = min(steps)
        elapsed += step
        mine -= rates[me.campaign_id] * step
        left = {c: (None if n is None else n - rates[c] * step) for c, n in left.items()}
        left = {c: n for c, n in left.items() if n is None or n > 1e-9}
    return elapsed


def ends_at(campaign: Campaign, sending_ms: float | None, start_ms: int) -> int | None:
    """When `sending_ms` of sending, from `start_ms`, ends in the campaign's send window's
    open stretches (all the time without a window). None: never (no rate, or no opening)."""
    if sending_ms is None:
        return None
    needed_ms = sending_ms
    if needed_ms <= 0:
        return start_ms
    window = campaign.window
    if window is None:
        return start_ms + round(needed_ms)
    at = start_ms
    while at - start_ms < HORIZON_MS:
        if not window.is_open(at):
            at = window.next_opening(at)
            continue
        closes = window.closing_after(at)
        if closes is None or closes - at >= needed_ms:
            return at + round(needed_ms)
        needed_ms -= closes - at
        at = closes
    return None


def _unsuppressed(emails: list[str], suppressions: Suppressions) -> tuple[list[str], int]:
    suppressed = suppressions.suppressed_among(emails)
    if not suppressed:
        return emails, 0
    kept = [e for e in emails if email_fingerprint(e) not in suppressed]
    return kept, len(emails) - len(kept)


def _chunks(items: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def forecast(
    campaign: Campaign,
    rows: Iterable[Row],
    *,
    suppressions: Suppressions,
    groups: MailboxGroups,
    sharing: Sharing,
    now_ms: int,
    dedupe_addresses: bool = False,
) -> Forecast:
    """The forecast for publishing `rows` to `campaign` now (or at its send_at)."""
    result = Forecast(campaign_id=campaign.campaign_id, provider=campaign.provider, dedupe_addresses=dedupe_addresses)
    tally = RowTally(keep=0, dedupe_addresses=dedupe_addresses)
    counted: dict[str, int] = dict.fromkeys(groups.names, 0)

    def counting(row_source: Iterable[Row]) -> Iterator[Row]:
        for row in row_source:
            result.rows_read += 1
            yield row

    emails = (r.email for r in tally.recipients(counting(rows)))
    for chunk in _chunks(emails, SUPPRESSION_READ):
        kept, suppressed = _unsuppressed(chunk, suppressions)
        result.suppressed += suppressed
        result.audience += len(kept)
        for name, n in groups.count(kept).items():
            counted[name] += n
    result.bad_rows, result.repeated_ids, result.duplicate_addresses = (
        tally.bad,
        tally.duplicates,
        tally.duplicate_addresses,
    )
    result.groups = counted
    result.rate = assigned_rate(campaign, sharing)
    if campaign.delivery_mode == "batch":
        result.recipients_per_request = max(1, min(sharing.batch_size, MAX_RECIPIENTS_PER_BATCH))
    result.campaigns_sharing = len(_others(campaign, sharing))
    result.starts_at_ms = max(now_ms, campaign.send_at_ms or 0)
    seconds = sending_s(campaign, math.ceil(result.audience / result.recipients_per_request), sharing)
    result.ends_at_ms = ends_at(campaign, None if seconds is None else seconds * 1000, result.starts_at_ms)
    return result
