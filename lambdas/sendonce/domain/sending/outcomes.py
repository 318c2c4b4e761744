"""What a provider error means for the delivery that was being sent."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sendonce.domain.errors import (
    AmbiguousProviderError,
    HaltProviderError,
    LeaseLostError,
    PermanentProviderError,
    RetryableProviderError,
    SuppressedError,
)
from sendonce.domain.models import DeliveryState


@dataclass(frozen=True)
class Settlement:
    state: DeliveryState
    reason: str
    error_class: str
    maybe_sent: bool = False
    # The provider refused every request of the claim: nothing can have been accepted by it.
    refused: bool = False


def settlement_for(error: BaseException, *, provider_idempotent: bool, last_receive: bool = False) -> Settlement | None:
    """The ledger write for a send that raised `error`; None when there is nothing to write.
    On the message's last receive a delivery released for another attempt is dead-lettered
    instead (the message goes to the DLQ unless this attempt ends it)."""
    settlement = _settlement(error, provider_idempotent=provider_idempotent)
    if settlement is not None and last_receive and settlement.state is DeliveryState.PENDING:
        return replace(settlement, state=DeliveryState.DEAD_LETTERED)
    return settlement


def _settlement(error: BaseException, *, provider_idempotent: bool) -> Settlement | None:
    if isinstance(error, LeaseLostError):
        return None  # another owner holds the delivery; it is theirs to settle
    if isinstance(error, SuppressedError):
        return Settlement(DeliveryState.SUPPRESSED, error.reason, "suppressed", refused=True)
    if isinstance(error, PermanentProviderError):
        return Settlement(DeliveryState.FAILED, error.reason, error.error_class, refused=True)
    if isinstance(error, RetryableProviderError):
        return Settlement(DeliveryState.PENDING, error.reason, error.error_class, refused=error.proves_not_accepted)
    if isinstance(error, HaltProviderError):
        return Settlement(DeliveryState.PENDING, error.reason, error.error_class, refused=True)
    reason = (
        error.reason if isinstance(error, AmbiguousProviderError) else f"unexpected {type(error).__name__}: {error}"
    )
    # Anything else may have happened after the provider accepted the email. With an
    # idempotency key the send may be repeated; without one it must not be.
    repeatable = error.repeatable if isinstance(error, AmbiguousProviderError) else True
    if provider_idempotent and repeatable:
        return Settlement(DeliveryState.PENDING, reason, "ambiguous", maybe_sent=True)
    return Settlement(DeliveryState.UNKNOWN, reason, "ambiguous", maybe_sent=True)
