"""A campaign's delivery status, its completion, and the reconciliation of its counters.

A campaign counted from its creation (`CampaignCounters.totals` answers) is read from its
counters: one Query, whatever its size. Any other campaign (created before counters, or
by a service that does not count) is read in full: every batch record and every ledger
record, which is also what `reconcile` compares the counters with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sendonce.domain.campaigns.counters import StateCounts, complete, state_counts
from sendonce.domain.campaigns.ports import CampaignCounters, CampaignStore, CounterTotals, Counts
from sendonce.domain.models import Campaign, CampaignState, DeliveryState
from sendonce.domain.sending.ports import DeliveryReads


@dataclass(frozen=True)
class DeliveryStatus:
    campaign_id: str
    state: CampaignState
    total: int
    pending: int
    in_progress: int
    sent: int
    failed: int
    suppressed: int
    unknown: int
    cancelled: int
    dead_lettered: int
    state_reason: str | None = None

    @property
    def remaining(self) -> int:
        return self.pending + self.in_progress + self.dead_lettered

    @property
    def done(self) -> bool:
        """Every published recipient has ended (the campaign may not have completed yet)."""
        return self.total > 0 and self.remaining == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "state": self.state.value,
            "state_reason": self.state_reason,
            "total": self.total,
            "pending": self.pending,
            "in_progress": self.in_progress,
            "sent": self.sent,
            "failed": self.failed,
            "suppressed": self.suppressed,
            "unknown": self.unknown,
            "cancelled": self.cancelled,
            "dead_lettered": self.dead_lettered,
            "remaining": self.remaining,
            "done": self.done,
        }


def _status(campaign: Campaign, counts: StateCounts) -> DeliveryStatus:
    return DeliveryStatus(
        campaign_id=campaign.campaign_id,
        state=campaign.state,
        state_reason=campaign.state_reason,
        total=counts.total,
        pending=counts.pending,
        in_progress=counts.claimed + counts.in_flight,
        sent=counts.sent,
        failed=counts.failed,
        suppressed=counts.suppressed,
        unknown=counts.unknown,
        cancelled=counts.cancelled,
        dead_lettered=counts.dead_lettered,
    )


def ledger_counts(campaigns: CampaignStore, ledger: DeliveryReads, campaign_id: str) -> StateCounts:
    """Counts by ledger state from a full read: O(recipients)."""
    recipient_ids: set[str] = set()
    for batch, _ in campaigns.batches(campaign_id):
        recipient_ids.update(r.recipient_id for r in batch.recipients)
    counts: Counter[DeliveryState] = Counter()
    for record in ledger.records(campaign_id):
        recipient_ids.discard(record.recipient_id)
        counts[record.state] += 1
    counts[DeliveryState.PENDING] += len(recipient_ids)  # published, never claimed
    return StateCounts(**{state.value: counts[state] for state in DeliveryState})


def delivery_status(
    campaigns: CampaignStore, ledger: DeliveryReads, campaign_id: str, counters: CampaignCounters | None = None
) -> DeliveryStatus:
    """Counts of every published recipient by ledger state. A pure read: from the counters
    when the campaign is counted (they lag the ledger by the stream's delay), else in full."""
    campaign = campaigns.get(campaign_id)
    totals = counters.totals(campaign_id) if counters is not None else None
    if totals is not None:
        return _status(campaign, state_counts(totals.counts))
    return _status(campaign, ledger_counts(campaigns, ledger, campaign_id))


def complete_if_done(
    campaigns: CampaignStore,
    ledger: DeliveryReads,
    campaign_id: str,
    *,
    now_ms: int,
    counters: CampaignCounters | None = None,
) -> Campaign | None:
    """The `complete` event, when every published recipient ended. The write is conditional
    on the campaign still sending and no publish lease live, so a publish under way keeps it
    open. A counted campaign is judged by its counters, and only once they have counted
    every recorded batch (they may lag: then it is not complete yet, and the aggregator
    completes it when they catch up). Returns the completed campaign, or None."""
    totals = counters.totals(campaign_id) if counters is not None else None
    if totals is not None and not totals.caught_up:
        return None
    status = delivery_status(campaigns, ledger, campaign_id, counters)
    if status.state is not CampaignState.SENDING or not status.done:
        return None
    return complete(campaigns, campaign_id, unknown=status.unknown, now_ms=now_ms)


@dataclass(frozen=True)
class Drift:
    state: str
    counter: int
    ledger: int


@dataclass(frozen=True)
class Reconciliation:
    campaign_id: str
    counted: bool  # False: the campaign has no counters (created before them); nothing to compare
    counters: StateCounts | None
    ledger: StateCounts
    drifts: tuple[Drift, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "counted": self.counted,
            "counters": self.counters.as_dict() if self.counters else None,
            "ledger": self.ledger.as_dict(),
            "drifts": [d.__dict__ for d in self.drifts],
        }


def reconcile(
    campaigns: CampaignStore, ledger: DeliveryReads, counters: CampaignCounters, campaign_id: str
) -> Reconciliation:
    """Compare a campaign's counters with a full read of its batches and ledger: every
    state whose counts differ is a drift (at rest there is none; while the campaign sends,
    the counters lag by the stream's delay). O(recipients): the ledger is read over its
    shards in parallel."""
    campaigns.get(campaign_id)  # raises CampaignNotFoundError
    totals = counters.totals(campaign_id)
    full = ledger_counts(campaigns, ledger, campaign_id)
    if totals is None:
        return Reconciliation(campaign_id=campaign_id, counted=False, counters=None, ledger=full, drifts=())
    counted = state_counts(totals.counts)
    counted_d, full_d = counted.as_dict(), full.as_dict()
    drifts = [Drift(state=s, counter=counted_d[s], ledger=full_d[s]) for s in full_d if counted_d[s] != full_d[s]]
    if not totals.caught_up:
        drifts.append(Drift(state="batches", counter=totals.counts.batches, ledger=totals.recorded_batches))
    return Reconciliation(campaign_id=campaign_id, counted=True, counters=counted, ledger=full, drifts=tuple(drifts))


def reconciliation_of(campaign_id: str, totals: CounterTotals | None, recorded: Mapping[str, int]) -> Reconciliation:
    """The drifts between the counters and counts of the campaign's ledger records by state
    (`recorded`: state value -> records, read a page at a time by a reconcile job). Which
    recipients were published is the published markers' to say (one per recipient, the
    counters' `published`): a published recipient with no record is pending. A campaign
    without counters has nothing to compare: its ledger counts are its records' own."""
    states: Counter[DeliveryState] = Counter({DeliveryState(s): n for s, n in recorded.items()})
    if totals is None:
        ledger = StateCounts(**{state.value: states[state] for state in DeliveryState})
        return Reconciliation(campaign_id=campaign_id, counted=False, counters=None, ledger=ledger, drifts=())
    counted = state_counts(totals.counts)
    full = state_counts(Counts(states=states, published=totals.counts.published))
    counted_d, full_d = counted.as_dict(), full.as_dict()
    drifts = [Drift(state=s, counter=counted_d[s], ledger=full_d[s]) for s in full_d if counted_d[s] != full_d[s]]
    records = sum(n for s, n in states.items() if s is not DeliveryState.PENDING)
    if records > totals.counts.published:
        # More recipients recorded than published: a marker (or a publish) the counters missed.
        drifts.append(Drift(state="published", counter=totals.counts.published, ledger=records))
    if not totals.caught_up:
        drifts.append(Drift(state="batches", counter=totals.counts.batches, ledger=totals.recorded_batches))
    return Reconciliation(campaign_id=campaign_id, counted=True, counters=counted, ledger=full, drifts=tuple(drifts))
