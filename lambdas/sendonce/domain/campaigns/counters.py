"""Per-campaign counters kept from the tables' streams, exact at rest.

Status, completion and the brakes' totals must cost the same at any campaign size, and
nothing on the send path may take a write per recipient on one item. So the counts are
kept by an aggregator off the send path: DynamoDB streams of the ledger (every change of a
delivery's state) and of the campaigns table (every batch record published) reach it in
order per stream shard, and it keeps one counter item per (campaign, stream shard) holding
the counts and the last sequence number it applied from that shard.

Exactly once: a retried or bisected batch may bring records again, so only records whose
sequence number is greater than the item's are applied, and the write is conditional on
the item still holding the sequence number read (optimistic concurrency: a conflict reads
again and retries). A batch's positions of one campaign move together, up to
MOVES_PER_WRITE at a time, in one atomic write that also adds their sum to the campaign's
totals and their report increments, merged, to its report aggregates: a status read or a
completion check reads the totals (one request, whatever the campaign's size), and the
totals and the report take one write per batch, not one per position. An A/B campaign's
sends per variant are more numbers of the same report increments (the campaign's test read
once per process, for records of deliveries with a variant): no write more.

Published recipients are counted distinct: a recipient can be in several batches (a
re-run publish packed differently), so each batch's recipients are marked published once
(`CampaignCounters.mark_published`: a marker per recipient that names the batch that
published it first). A replay of the same batch finds its own markers and counts them
again, which is what makes the count exact whatever was applied before a crash.

Counters lag the ledger by the stream's delay. They decide status, completion and rates,
never whether to send (the ledger's conditional writes decide that). Completion is never
premature: a campaign is complete by its counters only when every recorded batch has been
counted (`CounterTotals.caught_up`), so a recipient published but not yet claimed is
pending, not missing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.ports import MOVES_PER_WRITE, Advance, CampaignCounters, CampaignStore, Counts
from sendonce.domain.campaigns.report_data import LedgerChange, increments_of, variant_key
from sendonce.domain.errors import CampaignBusyError, CampaignNotFoundError, IllegalTransitionError
from sendonce.domain.models import Campaign, CampaignState, DeliveryState

logger = logging.getLogger(__name__)

# A counter item's write meets another writer's only when two invocations apply the same
# stream shard at once (a retried batch racing its original): read again and retry.
CONFLICT_ATTEMPTS = 8
CACHED_CAMPAIGNS = 256  # the A/B tests kept per process (a campaign's test never changes)


@dataclass(frozen=True)
class StreamPosition:
    """Where a record sits: its table's stream (`source`), shard and sequence number.
    Sequence numbers are decimal strings of varying length: compared as integers."""

    source: str
    shard_id: str
    sequence: int

    @property
    def stream(self) -> str:
        return f"{self.source}#{self.shard_id}"


@dataclass(frozen=True)
class DeliveryChange:
    """A ledger item changed: its state before (None: inserted) and after (None: removed)."""

    campaign_id: str
    position: StreamPosition
    old: DeliveryState | None
    new: DeliveryState | None
    # For the campaign's report (domain/campaigns/report.py): when the change was made, and
    # the provider events it added, as (kind, recipient domain or None).
    at_ms: int = 0
    new_events: tuple[tuple[str, str | None], ...] = ()
    # The recipient's mailbox-provider group, as its claim kept it (None before any claim).
    mailbox_group: str | None = None
    # The recipient, and an A/B campaign's variant as its claim recorded it (None: none).
    recipient_id: str | None = None
    variant: str | None = None


@dataclass(frozen=True)
class BatchRecorded:
    """A batch record was inserted in the campaigns table (once per batch id)."""

    campaign_id: str
    position: StreamPosition
    batch_id: str
    recipient_ids: tuple[str, ...]


Change = DeliveryChange | BatchRecorded


@dataclass(frozen=True)
class StateCounts:
    """Counts of every published recipient by state; never-claimed recipients are pending."""

    pending: int
    claimed: int
    in_flight: int
    sent: int
    failed: int
    suppressed: int
    unknown: int
    cancelled: int
    dead_lettered: int

    @property
    def total(self) -> int:
        return sum(self.as_dict().values())

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def state_counts(counts: Counts) -> StateCounts:
    """Every published recipient in exactly one state. A record is pending when its state
    is; a published recipient without a record is pending too. While the streams lag, the
    ledger's counts may run ahead of `published`: never a negative pending."""
    states = counts.states
    recorded = sum(n for s, n in states.items() if s is not DeliveryState.PENDING)
    return StateCounts(
        pending=max(0, counts.published - recorded),
        claimed=max(0, states[DeliveryState.CLAIMED]),
        in_flight=max(0, states[DeliveryState.IN_FLIGHT]),
        sent=max(0, states[DeliveryState.SENT]),
        failed=max(0, states[DeliveryState.FAILED]),
        suppressed=max(0, states[DeliveryState.SUPPRESSED]),
        unknown=max(0, states[DeliveryState.UNKNOWN]),
        cancelled=max(0, states[DeliveryState.CANCELLED]),
        dead_lettered=max(0, states[DeliveryState.DEAD_LETTERED]),
    )


def delta_of(change: DeliveryChange) -> Counter[DeliveryState]:
    """A ledger change's effect on the counts: old state -1, new state +1."""
    delta: Counter[DeliveryState] = Counter()
    if change.old is not None:
        delta[change.old] -= 1
    if change.new is not None:
        delta[change.new] += 1
    return delta


def unapplied(changes: Iterable[Change], applied_through: int | None) -> list[Change]:
    """The changes after the last sequence number applied (None: nothing applied yet), in order."""
    fresh = [c for c in changes if applied_through is None or c.position.sequence > applied_through]
    return sorted(fresh, key=lambda c: c.position.sequence)


@dataclass
class AggregateReport:
    applied: int = 0  # records counted now
    repeated: int = 0  # records applied before (a retried or overlapping batch)
    completed: list[str] = field(default_factory=list)


class CounterAggregator:
    """Applies a batch of stream records to the counters, then completes the campaigns
    whose counters say every published recipient ended (the campaign completes whoever
    finishes last: consumer, publisher or this)."""

    def __init__(
        self,
        *,
        counters: CampaignCounters,
        campaigns: CampaignStore,
        clock_ms: Callable[[], int],
        conflict_attempts: int = CONFLICT_ATTEMPTS,
    ):
        self._counters = counters
        self._campaigns = campaigns
        self._clock_ms = clock_ms
        self._attempts = conflict_attempts
        # An A/B campaign's test never changes: read once per campaign and process, and only
        # for a record of a delivery with a variant (lru_cache keeps no CampaignNotFoundError).
        self._ab_test_of = lru_cache(maxsize=CACHED_CAMPAIGNS)(lambda campaign_id: campaigns.get(campaign_id).ab_test)

    def apply(self, changes: Iterable[Change]) -> AggregateReport:
        report = AggregateReport()
        by_campaign: dict[str, dict[str, list[Change]]] = {}
        for change in changes:
            by_campaign.setdefault(change.campaign_id, {}).setdefault(change.position.stream, []).append(change)
        for campaign_id, streams in by_campaign.items():
            ordered = sorted(streams)
            for start in range(0, len(ordered), MOVES_PER_WRITE):
                chunk = {stream: streams[stream] for stream in ordered[start : start + MOVES_PER_WRITE]}
                applied = self._apply_chunk(campaign_id, chunk)
                report.applied += applied
                report.repeated += sum(len(group) for group in chunk.values()) - applied
        for campaign_id in by_campaign:
            completed = self.complete_if_done(campaign_id)
            if completed is not None:
                report.completed.append(campaign_id)
                logger.info("campaign completed", extra={"campaign_id": campaign_id, "reason": completed.state_reason})
        return report

    def _apply_chunk(self, campaign_id: str, streams: dict[str, list[Change]]) -> int:
        """Move the positions of `streams` (one campaign's) on in one atomic write; the
        records applied."""
        for _ in range(self._attempts):
            moves: list[Advance] = []
            ledger_changes: list[LedgerChange] = []
            applied = 0
            for stream, changes in streams.items():
                applied_through = self._counters.applied_through(campaign_id, stream)
                fresh = unapplied(changes, applied_through)
                if not fresh:
                    continue
                delta = Counts()
                for change in fresh:
                    if isinstance(change, DeliveryChange):
                        delta.states.update(delta_of(change))
                        old, new = (s.value if s else None for s in (change.old, change.new))
                        ledger_changes.append(
                            LedgerChange(
                                old,
                                new,
                                change.at_ms,
                                change.new_events,
                                change.mailbox_group,
                                self._variant_key(change),
                            )
                        )
                    else:
                        # Markers first: a crash before the counter write replays this batch,
                        # which finds its own markers and counts them again.
                        delta.published += self._counters.mark_published(
                            campaign_id, change.batch_id, change.recipient_ids
                        )
                        delta.batches += 1
                moves.append(Advance(stream, applied_through, fresh[-1].position.sequence, delta))
                applied += len(fresh)
            if not moves:
                return 0
            increments = increments_of(ledger_changes)
            if self._counters.advance(campaign_id, moves, report=increments or None):
                return applied
        raise CampaignBusyError(f"counters of {campaign_id!r}: {self._attempts} conflicting writes")

    def _variant_key(self, change: DeliveryChange) -> str | None:
        """What an A/B campaign's delivery counts under in its report (report_data.variant_key);
        None for any other delivery, whose item has no variant (then no campaign is read)."""
        if change.variant is None or change.recipient_id is None:
            return None
        try:
            test = self._ab_test_of(change.campaign_id)
        except CampaignNotFoundError:
            return None
        if test is None:
            return None
        return variant_key(change.campaign_id, change.recipient_id, test, change.variant)

    def complete_if_done(self, campaign_id: str) -> Campaign | None:
        """Complete a sending campaign whose counters are caught up and say every published
        recipient ended, when no batch is open (the consumer's hint: a resume that reopened
        recipients holds it above zero until their messages settle, while the counters may
        still show them ended) and no publish lease is live.

        The campaign item first (one read): while any batch is open, which is all of a
        campaign's sending but its end, its totals (one more read) are not read. The
        completing write is conditional either way."""
        try:
            campaign = self._campaigns.get(campaign_id)
        except CampaignNotFoundError:
            return None
        if campaign.state is not CampaignState.SENDING or campaign.open_batches > 0:
            return None
        totals = self._counters.totals(campaign_id)
        if totals is None or not totals.caught_up:
            return None
        counts = state_counts(totals.counts)
        if not counts.total or counts.pending or counts.claimed or counts.in_flight or counts.dead_lettered:
            return None
        return complete(self._campaigns, campaign_id, unknown=counts.unknown, now_ms=self._clock_ms())


def complete(campaigns: CampaignStore, campaign_id: str, *, unknown: int, now_ms: int) -> Campaign | None:
    """The `complete` event; conditional on the campaign still sending and no publish lease
    live at `now_ms`. Returns the completed campaign, or None when it did not apply."""
    reason = f"{unknown} outcome(s) unknown" if unknown else "every recipient ended"
    try:
        return lifecycle.apply(
            campaigns,
            campaign_id,
            CampaignEvent.COMPLETE,
            by=lifecycle.AUTOMATIC,
            reason=reason,
            # Every published recipient has ended, so messages still queued carry only ended
            # ones: the count starts again from nothing (a reopening publish adds to it).
            unless_publishing_at_ms=now_ms,
            open_batches=0,
        )
    except IllegalTransitionError:
        return None
