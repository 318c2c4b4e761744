"""What the domain needs from the outside world, named after what it does.

Adapters in `sendonce.adapters` implement these around boto3, the Resend SDK and
Powertools; unit tests implement them in memory. Two parts: sending (provider, rate,
ledger, campaign store, queue, guards) and deliverability (suppression list, provider
events recorded against the ledger, webhook signatures). Addresses cross the
deliverability ports only to be hashed: what is stored and listed is the email
fingerprint (`sendonce.domain.models.email_fingerprint`).

Over 500 lines on purpose: every port of the domain in the one place an adapter's author
reads whole (each a Protocol of a few documented methods); splitting it would scatter the
contracts the adapters and the fakes (tests/fakes.py) implement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from sendonce.domain.campaigns.report_data import ReportAggregates, ReportIncrements
from sendonce.domain.models import (
    BatchMessage,
    Campaign,
    CampaignState,
    Content,
    DeliveryKey,
    DeliveryRecord,
    DeliveryRequest,
    DeliveryState,
    OutboundEmail,
    Receipt,
    SendGroup,
    TestSendRecord,
)
from sendonce.domain.sending.protocol import Event
from sendonce.domain.sending.shares import Claimant

if TYPE_CHECKING:
    from sendonce.domain.jobs.models import Job


class EmailProvider(Protocol):
    name: str
    # True when the provider honours an idempotency key: a send whose outcome is unknown
    # may then be repeated with the same key. False (SES) means such a send is never repeated.
    idempotent: bool

    def send(self, email: OutboundEmail) -> Receipt:
        """Send one email; raise a ProviderError subclass that says what a failure means."""
        ...


class BatchStatus(StrEnum):
    NEW = "new"  # recorded now
    RECORDED = "recorded"  # recorded before, never confirmed on the queue
    ENQUEUED = "enqueued"  # recorded and on the queue before


class BatchEmailProvider(EmailProvider, Protocol):
    max_batch: int

    def send_batch(self, emails: list[OutboundEmail], *, idempotency_key: str) -> list[Receipt | str]:
        """One request for all emails; per email a receipt, or the reason it was refused.
        Raises a ProviderError when the request as a whole failed."""
        ...


class RateLimiter(Protocol):
    def acquire(
        self,
        provider: str,
        *,
        deadline: float | None = None,
        claimant: Claimant | None = None,
        dwell_ms: int | None = None,
    ) -> bool:
        """Wait until one more request to `provider` is within the shared rate (and, for a
        `claimant`, within its campaign's share of it: sending/shares.py); False if
        `deadline` (epoch seconds) would pass first. `dwell_ms`: how long the message being
        sent waited in the queue, kept for the operator's view."""
        ...

    def throttled(self, provider: str) -> None:
        """The provider answered "too fast": slow every consumer down."""
        ...

    def observed_limit(self, provider: str, limit_per_s: float) -> None:
        """The provider stated its limit (requests per second): pace every consumer by it."""
        ...

    def exhausted(self, provider: str, *, reset_s: float) -> None:
        """The provider said its window is spent until `reset_s` from now: send nothing before."""
        ...


class ClaimStatus(StrEnum):
    CLAIMED = "claimed"  # this owner holds the delivery until its lease ends
    FINAL = "final"  # already ended (sent, failed, unknown, ...): nothing to do
    HELD = "held"  # another owner holds a live lease
    CONFLICT = "conflict"  # claimed before with a different payload


@dataclass(frozen=True)
class GroupClaim:
    claimed: bool
    # When not claimed: members already ended, and the latest live lease of another owner.
    final: dict[str, DeliveryRecord] = field(default_factory=dict)
    held_until_ms: int | None = None


@dataclass(frozen=True)
class ClaimResult:
    status: ClaimStatus
    record: DeliveryRecord | None = None
    # True when this claim found a stale holder that may have sent and closed it as unknown.
    closed_as_unknown: bool = False


class Ledger(Protocol):
    """One record per (campaign, recipient). Every write after a claim is fenced by owner."""

    def claim(
        self, request: DeliveryRequest, *, payload_hash: str, lease_until_ms: int, now_ms: int
    ) -> ClaimResult: ...

    def mark_in_flight(self, key: DeliveryKey, *, owner: str, now_ms: int) -> None:
        """Record that the provider is about to be called (raises LeaseLostError)."""
        ...

    def mark_sent(self, key: DeliveryKey, *, owner: str, receipt: Receipt) -> None: ...

    def settle(
        self,
        key: DeliveryKey,
        *,
        owner: str,
        state: DeliveryState,
        reason: str,
        error_class: str,
        maybe_sent: bool = False,
        refused: bool = False,
        now_ms: int,
    ) -> None:
        """End a held delivery as failed / unknown, or release it back to pending.
        `refused`: the provider refused every request of this claim; if this owner set the
        maybe-sent mark, it is lifted (domain/sending/protocol.py)."""
        ...

    def close_unclaimed(
        self, campaign_id: str, recipient_ids: Iterable[str], *, state: DeliveryState, reason: str, batch_id: str
    ) -> int:
        """Move deliveries that nobody holds and that have not ended to `state`
        (dead_lettered or suppressed), from the states the protocol allows. Returns how many moved."""
        ...

    def close_as_read(
        self,
        record: DeliveryRecord | None,
        event: Event,
        *,
        reason: str,
        now_ms: int,
        key: DeliveryKey | None = None,
        batch_id: str | None = None,
    ) -> DeliveryRecord | None:
        """Apply a closing transition (stale, cancelled) if the delivery is still as read;
        the new record, or None when it changed in between."""
        ...

    def get(self, key: DeliveryKey) -> DeliveryRecord | None: ...

    def get_many(self, campaign_id: str, recipient_ids: list[str]) -> dict[str, DeliveryRecord]: ...

    def records(self, campaign_id: str) -> Iterator[DeliveryRecord]: ...

    def records_page(self, campaign_id: str, cursor: str | None, limit: int) -> tuple[list[DeliveryRecord], str | None]:
        """At most `limit` of the campaign's records from `cursor` (None: the start), shard
        by shard, and the cursor of the next page (None: there is none). The cursor is
        opaque: a shard and the last key read in it."""
        ...

    # Batch mode: a send group is claimed, completed or released in one transaction.
    def claim_group(
        self,
        group: SendGroup,
        payload_hashes: dict[str, str],
        *,
        owner: str,
        provider: str,
        lease_until_ms: int,
        now_ms: int,
    ) -> GroupClaim: ...

    def complete_group(self, group: SendGroup, *, owner: str, outcomes: dict[str, Receipt | str]) -> None:
        """Each member sent (receipt) or failed (reason); raises LeaseLostError if not the owner."""
        ...

    def release_group(
        self,
        group: SendGroup,
        *,
        owner: str,
        state: DeliveryState,
        reason: str,
        error_class: str,
        refused: bool = False,
    ) -> None: ...


class CampaignStore(Protocol):
    def create(self, campaign: Campaign) -> Campaign: ...

    def get(self, campaign_id: str) -> Campaign:
        """The campaign's state and settings, without its content (a small read)."""
        ...

    def content(self, campaign_id: str) -> Content:
        """The campaign's content, written once at creation and never changed."""
        ...

    def transition(
        self,
        campaign_id: str,
        *,
        to: CampaignState,
        allowed_from: Iterable[CampaignState],
        by: str,
        reason: str | None = None,
        publishing_until_ms: int | None = None,
        holder: str | None = None,
        unless_publishing_at_ms: int | None = None,
        stays: bool = False,
        open_batches: int | None = None,
        send_at_ms: int | None = None,
        clear_send_at: bool = False,
        if_send_at_ms: int | None = None,
        if_reason: str | None = None,
        mark: str | None = None,
    ) -> Campaign:
        """Conditional state change (`stays`: the state is kept, and so are who set it and why); raises IllegalTransitionError when the current state is
        not allowed (or, with `unless_publishing_at_ms`, while a publish lease is live then).
        `publishing_until_ms` sets the shared publish lease (what completion waits for) and,
        with `holder`, that publisher's own lease to the same instant.
        With `mark` (the event's name), the change also leaves a mark for the campaign's
        report (report_data.Mark: when, by whom, why), one small item of its own.
        Callers go through lifecycle.apply (domain/campaigns/lifecycle.py), which reads the transition table."""
        ...

    def end_publish(self, campaign_id: str, holder: str, *, now_ms: int) -> None:
        """End `holder`'s publish lease. The shared lease goes with the last live holder's
        (another publisher's lease still running at `now_ms` keeps it), and only if nothing
        changed the campaign since that was read (a publisher renewing meanwhile keeps it)."""
        ...

    def add_batch(self, batch: BatchMessage) -> BatchStatus:
        """Record a published batch (one more open batch when new)."""
        ...

    def batch_settled(self, campaign_id: str) -> int:
        """A batch's message was acknowledged with every recipient ended; the open batches left (a hint)."""
        ...

    def reset_open_batches(self, campaign_id: str, count: int) -> None: ...

    def mark_batch_enqueued(self, campaign_id: str, batch_id: str) -> None: ...

    def record_group(self, group: SendGroup) -> SendGroup:
        """Freeze a send group's membership; if one with this id exists, return that one."""
        ...

    def get_group(self, campaign_id: str, group_id: str) -> SendGroup | None: ...

    def groups_of_batch(self, campaign_id: str, batch_id: str) -> list[SendGroup]:
        """The send groups recorded for one batch, oldest first."""
        ...

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

    def list(self, state: CampaignState | None = None) -> Iterator[Campaign]:
        """Every campaign (optionally only those in `state`), by id. An operator's read: the
        DynamoDB store scans the campaigns table (never the ledger) once per call."""
        ...


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


class CampaignCounters(Protocol):
    """Per-campaign counters kept from the tables' streams (domain/campaigns/counters.py):
    one item per (campaign, stream shard) with the counts and the last sequence number
    applied, beside a campaign's `recorded` item (batches written; absent for a campaign
    created before counters, or by a service that does not count)."""

    def applied_through(self, campaign_id: str, stream: str) -> int | None:
        """The last sequence number applied from `stream` (None: nothing yet); a consistent read."""
        ...

    def advance(
        self,
        campaign_id: str,
        stream: str,
        *,
        expected: int | None,
        through: int,
        delta: Counts,
        report: ReportIncrements | None = None,
    ) -> bool:
        """Add `delta` (and `report` to the campaign's report aggregates, in the same atomic
        write) and set the position to `through`, if the position is still `expected`;
        False (nothing written) when another writer moved it."""
        ...

    def mark_published(self, campaign_id: str, batch_id: str, recipient_ids: Iterable[str]) -> int:
        """Mark each recipient published by `batch_id` unless another batch did first;
        how many are this batch's (the same answer however often it is asked)."""
        ...

    def totals(self, campaign_id: str) -> CounterTotals | None:
        """The campaign's counters summed; None when the campaign is not counted."""
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


class TestSendLog(Protocol):
    """Where test sends are recorded: beside the campaign, never in the ledger."""

    def record(self, entry: TestSendRecord) -> None: ...

    def recent(self, campaign_id: str, *, limit: int) -> tuple[list[TestSendRecord], int]:
        """The newest `limit` test sends of a campaign, newest first, and how many there are."""
        ...


class Queue(Protocol):
    def publish(self, campaign_id: str, bodies: list[str]) -> None:
        """Send one campaign's batch bodies, 10 per request; raises if any could not be sent.
        Each message is tagged with its campaign, so that a queue shared by many campaigns
        can give each its turn (SQS fair queues: the campaign is the message group)."""
        ...

    def dead_letter(self, body: str, *, reason: str) -> None:
        """Keep a message that can never be processed in the DLQ, with its reason."""
        ...

    def return_later(self, source_arn: str, receipt_handle: str, *, seconds: int) -> None:
        """Make a received message visible again only after `seconds`."""
        ...


@dataclass(frozen=True)
class GuardResult:
    kind: str  # "sent" | "replayed" | "held" | "conflict" | "lease_lost"
    state: DeliveryState | None = None
    provider_message_id: str | None = None
    reason: str | None = None
    closed_as_unknown: bool = False
    lease_until_ms: int | None = None  # for "held": when the other owner's lease ends


@dataclass(frozen=True)
class GroupResult:
    kind: str  # "sent" | "replayed" | "held" | "lease_lost"
    # "sent": recipient_id -> {"id": ...} or {"failed": reason}; "replayed": recipient_id -> state
    outcomes: dict[str, dict[str, str]] = field(default_factory=dict)


class GroupGuard(Protocol):
    """Runs one batch-mode provider request at most once per send group."""

    def send_group_once(
        self,
        group: SendGroup,
        *,
        owner: str,
        provider: str,
        payload_hashes: dict[str, str],
        send: Callable[[], list[Receipt | str]],
        last_receive: bool = False,
    ) -> GroupResult: ...


class DeliveryGuard(Protocol):
    """Runs a provider call at most once per delivery (the ledger behind it decides)."""

    def send_once(self, request: DeliveryRequest, send: Callable[[], Receipt]) -> GuardResult: ...

    def payload_hash(self, email: str, variables: Mapping[str, Any]) -> str:
        """The content hash a claim stores; a later claim with another hash is a conflict."""
        ...


# --- deliverability -------------------------------------------------------------------


class SuppressionReason(StrEnum):
    UNSUBSCRIBED = "unsubscribed"
    BOUNCED = "bounced"  # hard bounces only: a soft bounce never suppresses
    COMPLAINED = "complained"
    MANUAL = "manual"


@dataclass(frozen=True)
class Suppression:
    fingerprint: str
    reason: SuppressionReason
    source: str
    campaign_id: str | None = None
    created_at: str | None = None


@dataclass(frozen=True)
class ImportReport:
    added: int = 0
    already_suppressed: int = 0
    # 1-based positions of entries that are not addresses: never the entries themselves,
    # so that a report cannot carry an address into logs.
    invalid_lines: tuple[int, ...] = ()


class Suppressions(Protocol):
    """Addresses that are never sent to, keyed by fingerprint. The first reason recorded
    for an address is kept: adding it again changes nothing and returns False."""

    def is_suppressed(self, email: str) -> Suppression | None: ...

    def suppressed_among(self, emails: Iterable[str]) -> dict[str, Suppression]:
        """The suppressed ones among `emails`, by fingerprint: one consistent read of them all
        (the consumer asks once per message, before its sends)."""
        ...

    def get(self, fingerprint: str) -> Suppression | None: ...

    def add(self, email: str, reason: SuppressionReason, source: str, campaign_id: str | None = None) -> bool: ...

    def add_fingerprint(
        self, fingerprint: str, reason: SuppressionReason, source: str, campaign_id: str | None = None
    ) -> bool:
        """For callers that only ever saw the fingerprint (a one-click unsubscribe token)."""
        ...

    def remove(self, email: str) -> bool: ...

    def list(self) -> Iterator[Suppression]: ...

    def import_(self, emails: Iterable[str], *, reason: SuppressionReason, source: str) -> ImportReport:
        """Add many valid addresses (the caller validated them); already suppressed ones are kept as they are."""
        ...


class EventKind(StrEnum):
    SENT = "sent"  # the provider accepted the email (SES Send, Resend email.sent)
    DELIVERED = "delivered"
    DELIVERY_DELAYED = "delivery_delayed"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    REJECTED = "rejected"  # SES Reject (virus), never attempted
    FAILED = "failed"  # SES Rendering Failure, Resend email.failed
    PROVIDER_SUPPRESSED = "provider_suppressed"  # the provider's own list stopped it
    UNSUBSCRIBED = "unsubscribed"  # our one-click link


@dataclass(frozen=True)
class ProviderEvent:
    """One provider event about one delivery, normalised from SES or Resend."""

    event_id: str  # stable across redeliveries of the same event: the dedup key
    provider: str
    kind: EventKind
    campaign_id: str | None
    recipient_id: str | None
    message_id: str | None = None
    # The addresses the event is about: used to suppress them, never stored or logged.
    addresses: tuple[str, ...] = ()
    occurred_at: str | None = None
    hard: bool = False  # a permanent bounce
    detail: str | None = None  # short, address-free (bounce type and status, feedback type)
    suppression_reason: SuppressionReason | None = None

    @property
    def key(self) -> DeliveryKey | None:
        if not self.campaign_id or not self.recipient_id:
            return None
        return DeliveryKey(campaign_id=self.campaign_id, recipient_id=self.recipient_id)


class AnnotationStatus(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"  # this event id was applied before: nothing changed
    NO_DELIVERY = "no_delivery"  # no ledger record for the event's tags


@dataclass(frozen=True)
class Annotation:
    status: AnnotationStatus
    # The delivery's state after the write (applied) or as found (duplicate); None when
    # the adapter did not read it back (a counted event written in a transaction).
    state: DeliveryState | None = None
    provider: str | None = None


class FeedbackCounter(StrEnum):
    COMPLAINTS = "complaints"
    HARD_BOUNCES = "hard_bounces"


@dataclass(frozen=True)
class CampaignFeedback:
    """Per-campaign counts the brakes compare (see docs/deliverability.md)."""

    sent: int = 0
    complaints: int = 0
    hard_bounces: int = 0


@dataclass(frozen=True)
class UnknownDelivery:
    recipient_id: str
    provider: str | None
    since_ms: int | None  # when the delivery became unknown
    reason: str | None
    email_fingerprint: str | None
    # A provider 'sent' event arrived for it (while a consumer still held it): it was sent.
    confirmed_message_id: str | None = None
    # An audit found it absent from a complete listing of the provider's sent emails that
    # covers its whole window (protocol event prove_not_sent): it may be sent again.
    proven_not_sent: bool = False


@dataclass
class ReopenReport:
    reopened: list[str] = field(default_factory=list)
    confirmed_sent: list[str] = field(default_factory=list)  # resolved to sent instead: evidence arrived
    skipped: list[str] = field(default_factory=list)  # not unknown (any more)


class LedgerEvents(Protocol):
    """Provider events written onto ledger records (annotations, never a change of state,
    except unknown -> sent on the provider's word, and an operator's reopen), plus the
    per-campaign counters the brakes read."""

    def annotate(self, event: ProviderEvent, *, counter: FeedbackCounter | None = None) -> Annotation:
        """Record the event on its delivery once (deduplicated on event_id); with `counter`,
        add one to that campaign counter in the same atomic write."""
        ...

    def count_sent(self, campaign_id: str, recipient_id: str) -> None: ...

    def feedback(self, campaign_id: str) -> CampaignFeedback: ...

    def resolve_unknown(self, key: DeliveryKey, *, provider_message_id: str, detail: str) -> bool:
        """unknown -> sent, conditional on the state still being unknown."""
        ...

    def unknowns(self, campaign_id: str) -> Iterator[UnknownDelivery]: ...

    def unknowns_page(
        self, campaign_id: str, cursor: str | None, limit: int
    ) -> tuple[list[UnknownDelivery], str | None]:
        """Up to `limit` unknown deliveries from `cursor` (opaque; None: the start), shard by
        shard, and the next page's cursor (None: no more)."""
        ...

    def prove_not_sent(self, key: DeliveryKey, *, audit: str) -> bool:
        """Record that an audit proved the unknown delivery absent at the provider
        (unknown -> unknown); conditional on unknown and on no provider 'sent' evidence."""
        ...

    def reopen_unknown(
        self, campaign_id: str, recipient_ids: Iterable[str], *, by: str, accept_possible_duplicates: bool = False
    ) -> ReopenReport:
        """unknown -> pending (and forget that an attempt may have been accepted), so that
        resume sends it again; conditional on unknown, on no provider 'sent' evidence and on
        an audit's proof that the provider never had it (unless the operator accepts a
        possible second email)."""
        ...


class WebhookVerifier(Protocol):
    def verify(self, body: str, headers: Mapping[str, str]) -> dict[str, Any]:
        """The parsed payload of a correctly signed, fresh webhook; raises WebhookSignatureError."""
        ...


class ReportAggregatesStore(Protocol):
    """A campaign's report aggregates (domain/campaigns/report.py): per-minute outcomes and
    duplicates prevented, per-domain provider events, unknowns settled, lifecycle marks.
    Read in one Query, whatever the size."""

    def aggregates(self, campaign_id: str) -> ReportAggregates: ...

    def add_prevented(self, campaign_id: str, *, at_ms: int, count: int, writer: str) -> None:
        """Add `count` duplicate sends prevented to the minute of `at_ms`, on `writer`'s item
        (report.prevented_writer): one write, whatever the count."""
        ...


class JobStore(Protocol):
    """Jobs (domain/jobs): each moved on only by a write conditional on its version."""

    def create(self, job: Job) -> Job:
        """Record a new job; when one with its id exists, that one is returned unchanged."""
        ...

    def get(self, job_id: str) -> Job:
        """Raises JobNotFoundError."""
        ...

    def advance(self, old: Job, new: Job) -> bool:
        """Replace `old` with `new` if it is still at `old.version`; False if it moved."""
        ...


class JobQueue(Protocol):
    def submit(self, job_id: str) -> None:
        """Ask a worker for the job's next step."""
        ...

    def submit_parts(self, job_id: str, parts: Iterable[int]) -> None:
        """Ask workers for these parts of a job in parts, one message each."""
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
