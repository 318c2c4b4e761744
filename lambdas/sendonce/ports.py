"""What the domain needs from the outside world, named after what it does.

Adapters in `sendonce.adapters` implement these around boto3, the Resend SDK and
Powertools; unit tests implement them in memory. Domain code imports only this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from sendonce.models import (
    BatchMessage,
    Campaign,
    CampaignState,
    DeliveryKey,
    DeliveryRecord,
    DeliveryRequest,
    DeliveryState,
    OutboundEmail,
    Receipt,
)


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


class ClaimStatus(StrEnum):
    CLAIMED = "claimed"  # this owner holds the delivery until its lease ends
    FINAL = "final"  # already ended (sent, failed, unknown, ...): nothing to do
    HELD = "held"  # another owner holds a live lease
    CONFLICT = "conflict"  # claimed before with a different payload


@dataclass(frozen=True)
class ClaimResult:
    status: ClaimStatus
    record: DeliveryRecord | None = None
    # True when this claim found a stale holder that may have sent and closed it as unknown.
    closed_as_unknown: bool = False


class Ledger(Protocol):
    """One record per (campaign, recipient). Every write after a claim is fenced by owner."""

    def claim(self, request: DeliveryRequest, *, payload_hash: str, lease_until_ms: int, now_ms: int) -> ClaimResult: ...

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
        now_ms: int,
    ) -> None:
        """End a held delivery as failed / unknown, or release it back to pending."""
        ...

    def close_unclaimed(
        self, campaign_id: str, recipient_ids: Iterable[str], *, state: DeliveryState, reason: str, batch_id: str
    ) -> int:
        """Move deliveries that nobody holds and that have not ended (absent or pending) to
        `state` (dead_lettered, cancelled, suppressed). Returns how many moved."""
        ...

    def get(self, key: DeliveryKey) -> DeliveryRecord | None: ...

    def records(self, campaign_id: str) -> Iterator[DeliveryRecord]: ...


class CampaignStore(Protocol):
    def create(self, campaign: Campaign) -> Campaign: ...

    def get(self, campaign_id: str) -> Campaign: ...

    def transition(
        self,
        campaign_id: str,
        *,
        to: CampaignState,
        allowed_from: Iterable[CampaignState],
        by: str,
        reason: str | None = None,
    ) -> Campaign:
        """Conditional state change; raises IllegalTransitionError when the current state is not allowed."""
        ...

    def add_batch(self, batch: BatchMessage) -> BatchStatus:
        """Record a published batch (adding its size to the campaign's total when new)."""
        ...

    def mark_batch_enqueued(self, campaign_id: str, batch_id: str) -> None: ...

    def batches(self, campaign_id: str) -> Iterator[tuple[BatchMessage, bool]]:
        """Every batch of the campaign with whether it reached the queue."""
        ...


class Queue(Protocol):
    def publish(self, bodies: list[str]) -> None:
        """Send message bodies, 10 per request; raises if any could not be sent."""
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


class DeliveryGuard(Protocol):
    """Runs a provider call at most once per delivery (the ledger behind it decides)."""

    def send_once(self, request: DeliveryRequest, send: Callable[[], Receipt]) -> GuardResult: ...
