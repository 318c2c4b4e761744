"""What campaigns need from the outside world: the campaign store (the campaign, its batches
and send groups), the counters kept from the streams, the report aggregates, the start
schedules and the recipients files."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from sendonce.domain.campaigns.report_data import ReportAggregates, ReportIncrements
from sendonce.domain.campaigns.variants import Decision
from sendonce.domain.models import (
    BatchMessage,
    Campaign,
    CampaignState,
    Content,
    DeliveryState,
    SendGroup,
)


class BatchStatus(StrEnum):
    NEW = "new"  # recorded now
    RECORDED = "recorded"  # recorded before, never confirmed on the queue
    ENQUEUED = "enqueued"  # recorded and on the queue before


@dataclass(frozen=True)
class StateChange:
    """One conditional write of the campaign lifecycle, built by lifecycle.apply from one row
    group of its transition table (domain/campaigns/lifecycle.py) and written by
    `CampaignStore.transition`.

    `stays`: the state is kept, and so are who set it and why. `publishing_until_ms` sets the
    shared publish lease (what completion waits for) and, with `holder`, that publisher's own
    lease to the same instant; `unless_publishing_at_ms` refuses the change while a publish
    lease is live then. `send_at_ms` sets the start time, `clear_send_at` removes it,
    `if_send_at_ms` makes the write conditional on it; `if_reason` on the current state's
    reason. With `mark` (the event's name), the change also leaves a mark for the campaign's
    report (report_data.Mark: when, by whom, why), one small item of its own."""

    to: CampaignState
    allowed_from: tuple[CampaignState, ...]
    by: str
    reason: str | None = None
    stays: bool = False
    mark: str | None = None
    publishing_until_ms: int | None = None
    holder: str | None = None
    unless_publishing_at_ms: int | None = None
    open_batches: int | None = None
    send_at_ms: int | None = None
    clear_send_at: bool = False
    if_send_at_ms: int | None = None
    if_reason: str | None = None


class CampaignRecords(Protocol):
    """A campaign's own record: its state and settings, its content, its lifecycle's writes."""

    def create(self, campaign: Campaign) -> Campaign: ...

    def get(self, campaign_id: str) -> Campaign:
        """The campaign's state and settings, without its content (a small read)."""
        ...

    def content(self, campaign_id: str) -> Content:
        """The campaign's content, written once at creation and never changed."""
        ...

    def transition(self, campaign_id: str, change: StateChange) -> Campaign:
        """One conditional write of the lifecycle (`StateChange`, built by lifecycle.apply from
        the transition table); raises IllegalTransitionError when the campaign's current
        state is not among `change.allowed_from` (or one of the change's other conditions
        does not hold)."""
        ...

    def end_publish(self, campaign_id: str, holder: str, *, now_ms: int) -> None:
        """End `holder`'s publish lease. The shared lease goes with the last live holder's
        (another publisher's lease still running at `now_ms` keeps it), and only if nothing
        changed the campaign since that was read (a publisher renewing meanwhile keeps it)."""
        ...

    def record_decision(self, campaign_id: str, decision: Decision) -> Campaign:
        """Record an A/B campaign's winner, once: the campaign as it is after the write, or, when
        a decision was recorded before, as it is with that one (the first decision stands)."""
        ...

    def list(self, state: CampaignState | None = None) -> Iterator[Campaign]:
        """Every campaign (optionally only those in `state`), by id. An operator's read: the
        DynamoDB store scans the campaigns table (never the ledger) once per call."""
        ...


class BatchRecords(Protocol):
    """A campaign's published batches: recorded once each, whether each reached the queue, how
    many are still open."""

    def add_batch(self, batch: BatchMessage) -> BatchStatus:
        """Record a published batch (one more open batch when new)."""
        ...

    def batch_settled(self, campaign_id: str) -> int:
        """A batch's message was acknowledged with every recipient ended; the open batches left (a hint)."""
        ...

    def reset_open_batches(self, campaign_id: str, count: int) -> None: ...

    def mark_batch_enqueued(self, campaign_id: str, batch_id: str) -> None: ...

    def batches(self, campaign_id: str) -> Iterator[tuple[BatchMessage, bool]]:
        """Every batch of the campaign with whether it reached the queue."""
        ...

    def batches_page(self, campaign_id: str, cursor: str | None, limit: int) -> tuple[list[BatchMessage], str | None]:
        """Up to `limit` batch records after `cursor` (None: from the first), and the cursor
        after them (None: there are no more). For jobs, which read a campaign in pages."""
        ...

    def batches_page_marked(
        self, campaign_id: str, cursor: str | None, limit: int
    ) -> tuple[list[tuple[BatchMessage, bool]], str | None]:
        """`batches_page`, each batch with whether it reached the queue (a start's job)."""
        ...


class GroupRecords(Protocol):
    """Batch mode's send groups, each frozen once recorded."""

    def record_group(self, group: SendGroup) -> SendGroup:
        """Freeze a send group's membership; if one with this id exists, return that one."""
        ...

    def get_group(self, campaign_id: str, group_id: str) -> SendGroup | None: ...

    def groups_of_batch(self, campaign_id: str, batch_id: str) -> list[SendGroup]:
        """The send groups recorded for one batch, oldest first."""
        ...


class CampaignStore(CampaignRecords, BatchRecords, GroupRecords, Protocol):
    """The whole campaign store (the DynamoDB adapter, the in-memory fake): what wiring
    builds. A service takes the roles it uses."""


@dataclass
class Counts:
    """What one stream shard contributed to a campaign's totals (or a delta of it)."""

    states: Counter[DeliveryState] = field(default_factory=Counter)
    published: int = 0  # distinct recipients
    batches: int = 0  # batch records counted

    def add(self, other: Counts) -> None:
        self.states.update(other.states)
        self.published += other.published
        self.batches += other.batches

    @property
    def empty(self) -> bool:
        return not self.published and not self.batches and not any(self.states.values())


@dataclass(frozen=True)
class CounterTotals:
    """A campaign's counters summed over its items (one Query)."""

    recorded_batches: int  # batch records written (in the same transaction as each batch)
    counts: Counts

    @property
    def caught_up(self) -> bool:
        """Every recorded batch's recipients are in `published`."""
        return self.counts.batches >= self.recorded_batches


@dataclass(frozen=True)
class Advance:
    """One stream position of a campaign moved on: its records after `expected` up to
    `through` add `delta` (expected None: nothing applied from it yet)."""

    stream: str
    expected: int | None
    through: int
    delta: Counts


# The most positions one `advance` moves (its atomic write holds each position's item, the
# campaign's total and the report's increments: DynamoDB takes 100 items a transaction).
MOVES_PER_WRITE = 32


class CampaignCounters(Protocol):
    """Per-campaign counters kept from the tables' streams (domain/campaigns/counters.py):
    one item per (campaign, stream shard) with the counts and the last sequence number
    applied, and the campaign's totals kept with them, beside a campaign's `recorded` item
    (batches written; absent for a campaign created before counters, or by a service that
    does not count)."""

    def applied_through(self, campaign_id: str, stream: str) -> int | None:
        """The last sequence number applied from `stream` (None: nothing yet); a consistent read."""
        ...

    def advance(self, campaign_id: str, moves: Sequence[Advance], *, report: ReportIncrements | None = None) -> bool:
        """Move each position of `moves` (at most MOVES_PER_WRITE) to its `through` and add its
        delta, to its own item and to the campaign's totals, and `report` to the campaign's
        report aggregates: one atomic write, made only if every position is still its
        `expected`; False (nothing written) when another writer moved any."""
        ...

    def mark_published(self, campaign_id: str, batch_id: str, recipient_ids: Iterable[str]) -> int:
        """Mark each recipient published by `batch_id` unless another batch did first;
        how many are this batch's (the same answer however often it is asked)."""
        ...

    def totals(self, campaign_id: str) -> CounterTotals | None:
        """The campaign's counters summed (its totals: a bounded read, whatever its size);
        None when the campaign is not counted."""
        ...


class CampaignScheduler(Protocol):
    """The one-time schedule per campaign that starts a scheduled send (EventBridge Scheduler).
    Its firing carries the campaign id and the instant it was set for."""

    def set(self, campaign_id: str, send_at_ms: int) -> None:
        """Create the campaign's schedule, or move it to `send_at_ms`."""
        ...

    def delete(self, campaign_id: str) -> None:
        """Delete the campaign's schedule; nothing when there is none."""
        ...

    def set_opening(self, campaign_id: str, opens_at_ms: int) -> None:
        """Create the one-time schedule that resumes a campaign its send window paused, at
        the window's next opening (a schedule of its own, apart from the start's); setting
        the same opening again changes nothing."""
        ...

    def set_pick(self, campaign_id: str, pick_at_ms: int) -> None:
        """Create (or move) the one-time schedule that picks an A/B campaign's winner at the
        end of its test (campaigns/picks.py)."""
        ...


class ReportAggregatesStore(Protocol):
    """A campaign's report aggregates (domain/campaigns/report.py): per-minute outcomes and
    duplicates prevented, per-domain provider events, unknowns settled, lifecycle marks.
    Read in one Query, whatever the size."""

    def aggregates(self, campaign_id: str) -> ReportAggregates: ...

    def add_counts(self, campaign_id: str, *, at_ms: int, counts: Mapping[str, int], writer: str) -> None:
        """Add a consumer's `counts` (duplicate sends `prevented`, a group's `held` emails:
        report_data.group_count) to the minute of `at_ms`, on `writer`'s item
        (report_data.prevented_writer): one write, whatever the counts."""
        ...


@dataclass(frozen=True)
class StoredObject:
    """An object as a HEAD of it says: its size and the ETag (and version) that pin it."""

    size: int
    etag: str
    version_id: str | None = None


class ObjectLines(Protocol):
    """Text lines of a stored object (S3), read whole or by byte range."""

    def head(self, bucket: str, key: str) -> StoredObject:
        """Raises RecipientFileError when it cannot be read."""
        ...

    def lines_in_range(self, bucket: str, key: str, start: int, end: int, *, pinned: StoredObject) -> Iterator[str]:
        """The lines that start at a byte in [start, end) (the last one read to its end), of
        the object as `pinned` says it is; RecipientFileError if it changed since."""
        ...
