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

Counting (`count_audience`: O(rows), one suppression read per 100 addresses) and timing
(`timed`: the campaign and who shares its rate, O(1) in the rows) are apart, so that a file
counted in parts (s3_forecast.py) is timed once, from the merged counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from sendonce.domain.campaigns.recipients_file import Row, RowTally
from sendonce.domain.campaigns.scheduling import iso
from sendonce.domain.deliverability.group_caps import GroupPacing
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups
from sendonce.domain.deliverability.ports import Suppression
from sendonce.domain.deliverability.warmup import Warmup, day_of, next_day_ms
from sendonce.domain.models import MAX_RECIPIENTS_PER_BATCH, Campaign, email_fingerprint
from sendonce.domain.sending.shares import Claimant, divide

SUPPRESSION_READ = 100  # addresses per consistent read (one BatchGetItem)
# A window that never opens again would make the walk endless: a forecast past this says so.
HORIZON_MS = 366 * 24 * 3600 * 1000


class SuppressionReads(Protocol):
    """What a forecast reads of the suppression list (deliverability/ports.py's Suppressions)."""

    def suppressed_among(self, emails: Iterable[str]) -> dict[str, Suppression]: ...


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


COUNT_FIELDS = ("rows_read", "bad_rows", "repeated_ids", "duplicate_addresses", "suppressed", "audience")


@dataclass
class AudienceCount:
    """What counting rows found: the audience and why the others are left out, per group.
    Counts of parts of one file add up (`plus`); repeats across parts are not seen."""

    rows_read: int = 0
    bad_rows: int = 0
    repeated_ids: int = 0
    duplicate_addresses: int = 0
    suppressed: int = 0
    audience: int = 0
    groups: dict[str, int] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNT_FIELDS}

    @classmethod
    def of(cls, counts: dict[str, int], groups: dict[str, int] | None = None) -> AudienceCount:
        """From `counts` by name (COUNT_FIELDS; others ignored, a missing one 0) and `groups`."""
        found = cls(groups=dict(groups or {}))
        for name in COUNT_FIELDS:
            setattr(found, name, int(counts.get(name, 0)))
        return found

    def plus(self, other: AudienceCount) -> AudienceCount:
        groups = dict(self.groups)
        for name, n in other.groups.items():
            groups[name] = groups.get(name, 0) + n
        theirs = other.counts()
        return AudienceCount.of({k: v + theirs[k] for k, v in self.counts().items()}, groups)


@dataclass
class Forecast:
    campaign_id: str
    provider: str
    delivery_mode: str = "single"
    rows_read: int = 0
    bad_rows: int = 0
    repeated_ids: int = 0
    duplicate_addresses: int = 0
    dedupe_addresses: bool = False
    suppressed: int = 0
    audience: int = 0
    groups: dict[str, int] = field(default_factory=dict)
    # False: no suppression list was read (a deployment without one): `suppressed` is 0.
    suppressions_checked: bool = True
    rate: float = 0.0  # provider requests per second assigned to the campaign at its start
    recipients_per_request: int = 1
    campaigns_sharing: int = 0  # other campaigns sending on the provider now
    starts_at_ms: int = 0
    ends_at_ms: int | None = None  # None: past HORIZON_MS (a window that never opens)
    # The caps per mailbox group that apply to the campaign (emails/s), and which limit the
    # ETA follows: "rate" (its share of the provider's) or "<group> cap".
    group_caps: dict[str, float] = field(default_factory=dict)
    bound_by: str = "rate"
    not_applied: tuple[str, ...] = ()
    # Its sending domain's warm-up (deliverability/warmup.py): the days its audience needs
    # at the ramp's caps (1: it fits in what is left of the first day), and what the domain's
    # first day has left.
    warmup_days: int | None = None
    warmup_left_today: int | None = None

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

    def view(self, *, problems: list[str], exact: bool = True) -> dict[str, Any]:
        """The forecast as the operator API answers it (and an S3 forecast job's result):
        `as_dict` with its instants in ISO 8601, the first reported rows and whether the
        counts are exact (False: a file counted in parts, whose repeats across parts were
        not seen)."""
        return {
            **self.as_dict(),
            "starts_at": iso(self.starts_at_ms),
            "ends_at": None if self.ends_at_ms is None else iso(self.ends_at_ms),
            "problems": problems,
            "exact": exact,
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


def _unsuppressed(emails: list[str], suppressions: SuppressionReads) -> tuple[list[str], int]:
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


def count_audience(
    rows: Iterable[Row], *, suppressions: SuppressionReads | None, groups: MailboxGroups, tally: RowTally
) -> AudienceCount:
    """Who `rows` reach: `tally` passes the good rows on (a repeated id once, a repeated
    address as its `dedupe_addresses` says) and keeps the first reported rows; the suppressed
    ones are read 100 addresses a request. Without a suppression list, nobody is suppressed."""
    counted = AudienceCount(groups=dict.fromkeys(groups.names, 0))

    def counting(row_source: Iterable[Row]) -> Iterator[Row]:
        for row in row_source:
            counted.rows_read += 1
            yield row

    emails = (r.email for r in tally.recipients(counting(rows)))
    for chunk in _chunks(emails, SUPPRESSION_READ):
        kept, suppressed = _unsuppressed(chunk, suppressions) if suppressions is not None else (chunk, 0)
        counted.suppressed += suppressed
        counted.audience += len(kept)
        for name, n in groups.count(kept).items():
            counted.groups[name] = counted.groups.get(name, 0) + n
    counted.bad_rows, counted.repeated_ids, counted.duplicate_addresses = (
        tally.bad,
        tally.duplicates,
        tally.duplicate_addresses,
    )
    return counted


def timed(
    campaign: Campaign,
    counted: AudienceCount,
    *,
    sharing: Sharing,
    now_ms: int,
    dedupe_addresses: bool = False,
    suppressions_checked: bool = True,
    pacing: GroupPacing | None = None,
    warm: Warmup | None = None,
    sent_on: Callable[[str, str], int] | None = None,
) -> Forecast:
    """The forecast of sending `counted`'s audience to `campaign` from now (or its send_at):
    at its share of the provider's rate, or, when slower, at a mailbox group's cap (the whole
    cap, as if no other campaign sent to that group: the ETA is then a lower bound)."""
    result = Forecast(
        campaign_id=campaign.campaign_id,
        provider=campaign.provider,
        delivery_mode=campaign.delivery_mode,
        rows_read=counted.rows_read,
        bad_rows=counted.bad_rows,
        repeated_ids=counted.repeated_ids,
        duplicate_addresses=counted.duplicate_addresses,
        dedupe_addresses=dedupe_addresses,
        suppressed=counted.suppressed,
        audience=counted.audience,
        groups=dict(counted.groups),
        suppressions_checked=suppressions_checked,
    )
    result.rate = assigned_rate(campaign, sharing)
    if campaign.delivery_mode == "batch":
        result.recipients_per_request = max(1, min(sharing.batch_size, MAX_RECIPIENTS_PER_BATCH))
    result.campaigns_sharing = len(_others(campaign, sharing))
    result.starts_at_ms = max(now_ms, campaign.send_at_ms or 0)
    seconds = sending_s(campaign, math.ceil(result.audience / result.recipients_per_request), sharing)
    pacing = pacing or GroupPacing()
    for group, count in result.groups.items():
        cap = pacing.cap(group, campaign.pacing)
        if cap is None or not count:
            continue
        result.group_caps[group] = cap
        if seconds is not None and count / cap > seconds:
            seconds, result.bound_by = count / cap, f"{group} cap"
    result.ends_at_ms = ends_at(campaign, None if seconds is None else seconds * 1000, result.starts_at_ms)
    if warm is not None and seconds is not None:
        _warm_up(result, campaign, warm, sent_on, per_s=result.audience / seconds if seconds else None)
    return result


def _warm_up(
    result: Forecast,
    campaign: Campaign,
    warm: Warmup,
    sent_on: Callable[[str, str], int] | None,
    *,
    per_s: float | None,
) -> None:
    """Its sending domain's ramp: what the first day has left (the domain's day item, as
    `sent_on` reads it: every campaign of the domain counts), then a day's cap a day; the
    last day's share at the campaign's pace, from that day's midnight (UTC). As if no other
    campaign of the domain sent after now."""
    found = warm.cap(campaign.sender, result.starts_at_ms)
    if found is None:
        return
    domain, cap = found
    day = day_of(result.starts_at_ms)
    left = max(0, cap - (sent_on(domain, day.isoformat()) if sent_on else 0))
    result.warmup_left_today, result.warmup_days = left, 1
    remaining = result.audience - left
    day_ms = result.starts_at_ms
    while remaining > 0 and result.warmup_days < 366:
        day_ms = next_day_ms(day_ms)
        result.warmup_days += 1
        today = warm.cap(campaign.sender, day_ms)
        if today is None or today[1] >= remaining:
            last = ends_at(campaign, remaining / per_s * 1000 if per_s else 0, day_ms)
            if last is not None and (result.ends_at_ms is None or last > result.ends_at_ms):
                result.ends_at_ms, result.bound_by = last, "warm-up"
            return
        remaining -= today[1]
    if remaining > 0:
        result.ends_at_ms, result.bound_by = None, "warm-up"


def forecast(
    campaign: Campaign,
    rows: Iterable[Row],
    *,
    suppressions: SuppressionReads | None,
    groups: MailboxGroups,
    sharing: Sharing,
    now_ms: int,
    dedupe_addresses: bool = False,
) -> Forecast:
    """The forecast for publishing `rows` to `campaign` now (or at its send_at)."""
    tally = RowTally(keep=0, dedupe_addresses=dedupe_addresses)
    counted = count_audience(rows, suppressions=suppressions, groups=groups, tally=tally)
    return timed(
        campaign,
        counted,
        sharing=sharing,
        now_ms=now_ms,
        dedupe_addresses=dedupe_addresses,
        suppressions_checked=suppressions is not None,
    )
