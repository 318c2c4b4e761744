"""What sending needs from the outside world: the provider, the shared rate, the delivery
ledger (by role: claims and settles, reads, send groups), the queue and the guards that run a
provider call at most once. Adapters in `sendonce.adapters` implement them; tests/fakes.py
holds the in-memory ones, checked by the same contract tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from sendonce.domain.models import (
    DeliveryKey,
    DeliveryRecord,
    DeliveryRequest,
    DeliveryState,
    OutboundEmail,
    Receipt,
    SendGroup,
    TestSendRecord,
)
from sendonce.domain.sending.delivery_tables import Event
from sendonce.domain.sending.shares import Claimant


class EmailProvider(Protocol):
    name: str
    # True when the provider honours an idempotency key: a send whose outcome is unknown
    # may then be repeated with the same key. False (SES) means such a send is never repeated.
    idempotent: bool

    def send(self, email: OutboundEmail) -> Receipt:
        """Send one email; raise a ProviderError subclass that says what a failure means."""
        ...


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


class DeliveryClaims(Protocol):
    """The ledger's claims and settles: one record per (campaign, recipient), every write
    after a claim fenced by owner, each move allowed by the protocol's table
    (domain/sending/delivery_tables.py)."""

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
        maybe-sent mark, it is lifted (domain/sending/delivery_tables.py)."""
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


class DeliveryReads(Protocol):
    """The ledger's reads: one delivery, some of a campaign's, or all of them page by page."""

    def get(self, key: DeliveryKey) -> DeliveryRecord | None: ...

    def get_many(self, campaign_id: str, recipient_ids: list[str]) -> dict[str, DeliveryRecord]: ...

    def records(self, campaign_id: str) -> Iterator[DeliveryRecord]: ...

    def records_page(self, campaign_id: str, cursor: str | None, limit: int) -> tuple[list[DeliveryRecord], str | None]:
        """At most `limit` of the campaign's records from `cursor` (None: the start), shard
        by shard, and the cursor of the next page (None: there is none). The cursor is
        opaque: a shard and the last key read in it."""
        ...


class SendGroupClaims(Protocol):
    """Batch mode: a send group is claimed, completed or released in one transaction."""

    def claim_group(
        self,
        group: SendGroup,
        payload_hashes: dict[str, str],
        *,
        owner: str,
        provider: str,
        lease_until_ms: int,
        now_ms: int,
        variants: Mapping[str, str] | None = None,
    ) -> GroupClaim:
        """`variants`: an A/B campaign's variant of each member, recorded by its first claim."""
        ...

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


class Ledger(DeliveryClaims, DeliveryReads, SendGroupClaims, Protocol):
    """The whole delivery ledger (the DynamoDB adapter, the in-memory fake): what wiring
    builds. A service takes the roles it uses."""


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
        variants: Mapping[str, str] | None = None,
    ) -> GroupResult: ...


class DeliveryGuard(Protocol):
    """Runs a provider call at most once per delivery (the ledger behind it decides)."""

    def send_once(self, request: DeliveryRequest, send: Callable[[], Receipt]) -> GuardResult: ...

    def payload_hash(self, email: str, variables: Mapping[str, Any], variant: str | None = None) -> str:
        """The content hash a claim stores; a later claim with another hash is a conflict."""
        ...


class TestSendLog(Protocol):
    """Where test sends are recorded: beside the campaign, never in the ledger."""

    def record(self, entry: TestSendRecord) -> None: ...

    def recent(self, campaign_id: str, *, limit: int) -> tuple[list[TestSendRecord], int]:
        """The newest `limit` test sends of a campaign, newest first, and how many there are."""
        ...
