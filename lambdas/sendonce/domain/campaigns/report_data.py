"""A campaign report's data as it is kept: the per-minute and per-domain aggregates, and the
increments a batch of ledger changes adds to them (the counters' aggregator folds the
stream into them; the consumer adds the duplicates it prevented). Only values and pure
functions: the ports, the aggregator and the consumer import this module, and the report
itself (report.py) is built from it.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sendonce.domain.campaigns.variants import AbTest, VariantFigures, assign

MINUTE_MS = 60_000

# The outcomes a delivery ends as (docs/ledger.md), in the order the page stacks them.
OUTCOMES = ("sent", "failed", "suppressed", "unknown", "dead_lettered", "cancelled")
# The provider events drawn per mailbox provider.
FEEDBACK = ("delivered", "bounced", "complained")
# What the report counts per mailbox-provider group and minute (issue 32): the sends and the
# provider events (a delivery delay counts as deferred) from the ledger's stream, and the
# emails whose request a group's cap held to a later second (the consumer's count). Kept as
# numbers of the minute items the outcomes are in, named `g:<group>:<kind>`: no item more.
GROUP_KINDS = ("sent", "deferred", "bounced", "complained", "held")
# Unique opens and clicks per minute, numbers of the same minute items (the events function's).
ENGAGEMENT_COUNTS = ("opened", "clicked")
# An A/B campaign's figures per variant (issue 33): its test emails sent, and their recipients'
# unique opens and clicks, numbers of the same minute items too, named `v:<variant>:<kind>`
# (the aggregator adds `sent` with the outcomes, the events function the other two with its
# own): no item more, no write more. The rest, who got the winner, count under REST.
VARIANT_KINDS = ("sent", "opened", "clicked")
VARIANT_PREFIX = "v:"
REST = "*"  # never a variant id (variants.VARIANT_ID_PATTERN starts with a letter or digit)
_GROUP_EVENTS = {"delivery_delayed": "deferred", "bounced": "bounced", "complained": "complained"}
GROUP_PREFIX = "g:"


def group_count(group: str, kind: str) -> str:
    """The name a minute item keeps `kind` of `group` under."""
    return f"{GROUP_PREFIX}{group}:{kind}"


def group_count_of(name: str) -> tuple[str, str] | None:
    """(group, kind) of a name `group_count` gave; None for any other name."""
    if not name.startswith(GROUP_PREFIX):
        return None
    group, _, kind = name[len(GROUP_PREFIX) :].rpartition(":")
    return (group, kind) if group and kind in GROUP_KINDS else None


def variant_count(variant: str, kind: str) -> str:
    """The name a minute item keeps `kind` ("sent", "opened", "clicked") of `variant` under."""
    return f"{VARIANT_PREFIX}{variant}:{kind}"


def variant_count_of(name: str) -> tuple[str, str] | None:
    """(variant, kind) of a name `variant_count` gave; None for any other name."""
    if not name.startswith(VARIANT_PREFIX):
        return None
    variant, _, kind = name[len(VARIANT_PREFIX) :].rpartition(":")
    return (variant, kind) if variant and kind in VARIANT_KINDS else None


def variant_key(campaign_id: str, recipient_id: str, test: AbTest, claimed: str | None = None) -> str:
    """What a recipient's figures count under: its test variant, or REST for one of the rest
    (who got the winner). `claimed`: the variant its claim recorded, when known; a test
    recipient whose claim recorded another (none does: a claim records the recipient's own
    variant) counts under REST, so that a variant's figures are of its test emails only."""
    assigned = assign(campaign_id, recipient_id, test)
    if assigned is None or (claimed is not None and claimed != assigned):
        return REST
    return assigned


@dataclass(frozen=True)
class Bucket:
    """Counts of one period starting at `start_ms` (UTC epoch ms), by name."""

    start_ms: int
    counts: Mapping[str, int]


@dataclass(frozen=True)
class Mark:
    """A lifecycle move marked on the timeline (a pause, resume, cancel, brake, start...):
    when, which event, who took it (an operator, or sendonce on its own) and why. Written
    beside each transition (lifecycle.apply), one small item each."""

    at_ms: int
    event: str
    reason: str | None = None
    by: str | None = None


@dataclass(frozen=True)
class AuditVerdict:
    """The latest audit against the provider's records (sendonce campaign audit)."""

    at_ms: int
    verdict: str  # e.g. "0 duplicates, every difference explained"
    duplicates: int
    differences: int


@dataclass(frozen=True)
class ReportAggregates:
    """What the campaign's aggregates hold beyond its status."""

    outcomes_per_minute: list[Bucket] = field(default_factory=list)
    duplicates_prevented_per_minute: list[Bucket] = field(default_factory=list)
    feedback_by_domain: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    unknowns_settled: Mapping[str, int] = field(default_factory=dict)  # "sent" / "not_sent"
    marks: list[Mark] = field(default_factory=list)
    # GROUP_KINDS per mailbox-provider group and minute: group -> buckets of {kind: n}.
    groups_per_minute: Mapping[str, list[Bucket]] = field(default_factory=dict)
    # Unique opens and clicks per minute (each recipient's first, in its minute): counts
    # {"opened": n, "clicked": n}, kept by the events function (adapters/dynamodb/engagement.py).
    engagement_per_minute: list[Bucket] = field(default_factory=list)
    # An A/B campaign's figures per variant, summed over its minutes: test variants by id, the
    # rest under REST (kept by the aggregator and the events function: VARIANT_KINDS).
    variants: Mapping[str, VariantFigures] = field(default_factory=dict)
    # The same per minute: variant (or REST) -> buckets of {kind: n}, a send in the minute it
    # ended `sent`, an open or a click in the minute of the recipient's first.
    variants_per_minute: Mapping[str, list[Bucket]] = field(default_factory=dict)


# --- Duplicates prevented: counted by the consumer, not the stream ---------------------------
#
# A refused claim writes nothing to the ledger, so no stream record shows it. The consumer
# adds a message's refused claims in one small write, only when it had any (a fresh message
# writes nothing more), to one of PREVENTED_WRITERS items per minute chosen by its batch id:
# a redrive of many messages spreads its writes instead of queueing them on one item, and
# they never share an item with the aggregator's transactions.
PREVENTED_WRITERS = 8


def prevented_writers() -> list[str]:
    """Every item name `prevented_writer` can give."""
    return [f"consumer-{k}" for k in range(PREVENTED_WRITERS)]


def prevented_writer(batch_id: str) -> str:
    """The report item a message's duplicates prevented are added to (stable per batch)."""
    return f"consumer-{zlib.crc32(batch_id.encode()) % PREVENTED_WRITERS}"


# --- Kept as the ledger changes (the stream aggregator folds each batch of changes) ---------

FINAL_OUTCOMES = frozenset(OUTCOMES)


@dataclass(frozen=True)
class LedgerChange:
    """One delivery's change as a stream record shows it: its state before and after, when,
    and the provider events it gained (kind, recipient domain or None), the recipient's
    mailbox-provider group (None: its item has none, claimed before groups were kept), and, an
    A/B campaign's delivery, what its figures count under (`variant_key`; None: no A/B test)."""

    old_state: str | None
    new_state: str | None
    at_ms: int
    new_events: tuple[tuple[str, str | None], ...] = ()
    mailbox_group: str | None = None
    variant: str | None = None


@dataclass
class ReportIncrements:
    """What a batch of ledger changes adds to a campaign's report aggregates."""

    # (minute start, outcome, group_count or variant_count name)
    outcomes: Counter[tuple[int, str]] = field(default_factory=Counter)
    prevented: Counter[int] = field(default_factory=Counter)  # minute start
    feedback: Counter[tuple[str, str]] = field(default_factory=Counter)  # (domain, event kind)
    unknowns_settled: Counter[str] = field(default_factory=Counter)  # "sent" / "not_sent"

    def __bool__(self) -> bool:
        return bool(self.outcomes or self.prevented or self.feedback or self.unknowns_settled)


def minute_of(at_ms: int) -> int:
    return at_ms - at_ms % MINUTE_MS


def increments_of(changes: Iterable[LedgerChange]) -> ReportIncrements:
    """A delivery counts on the timeline in the minute it reached its outcome (once: a change
    that leaves the outcome as it was adds nothing); an unknown that becomes sent counts as
    settled; each new event counts for its recipient's domain. A send and a deferral, bounce
    or complaint count for the recipient's mailbox group too, in the minute of the change, and
    a send for its variant (an A/B campaign's: `variant_count`)."""
    increments = ReportIncrements()
    for change in changes:
        minute = minute_of(change.at_ms)
        group = change.mailbox_group
        if change.new_state != change.old_state and change.new_state in FINAL_OUTCOMES:
            increments.outcomes[(minute, change.new_state)] += 1
            if change.old_state == "unknown" and change.new_state == "sent":
                increments.unknowns_settled["sent"] += 1
            if group and change.new_state == "sent":
                increments.outcomes[(minute, group_count(group, "sent"))] += 1
            if change.variant and change.new_state == "sent":
                increments.outcomes[(minute, variant_count(change.variant, "sent"))] += 1
        for kind, domain in change.new_events:
            if kind in FEEDBACK:
                increments.feedback[(domain or "unknown domain", kind)] += 1
            if group and kind in _GROUP_EVENTS:
                increments.outcomes[(minute, group_count(group, _GROUP_EVENTS[kind]))] += 1
    return increments
