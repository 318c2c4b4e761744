"""What a provider can do, as data: the only thing the domain knows of a provider.

A provider's folder (`sendonce.adapters.providers.<name>`) states its capabilities once;
the delivery protocol, batch mode and the operator input read them here, never a
provider's name or wire format.
"""

from __future__ import annotations

from dataclasses import dataclass

from sendonce.domain.models import MAX_RECIPIENTS_PER_BATCH


@dataclass(frozen=True, kw_only=True)
class ProviderCapabilities:
    # The provider honours an idempotency key: a send whose outcome is unknown may be
    # repeated under the same key within `idempotency_window_s`. False: such a send is never repeated.
    idempotent: bool
    idempotency_window_s: float | None = None
    # Most emails one request may carry; 1 when the provider has no batch endpoint.
    max_batch: int = 1
    # Requests per second assumed until the provider states its limit, when `rate_headers`.
    default_rate: float
    rate_headers: bool = False
    # The answers that leave a send's outcome unknown (it may have been accepted), in words:
    # each one becomes an AmbiguousProviderError in the provider's adapter.
    ambiguous_outcomes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.idempotent and not self.idempotency_window_s:
            raise ValueError("an idempotent provider states how long it keeps a key (idempotency_window_s)")
        if self.max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if self.default_rate <= 0:
            raise ValueError("default_rate must be > 0 requests/s")

    @property
    def sends_batches(self) -> bool:
        """Batch mode: one request per SQS message (up to 100 recipients) under one idempotency
        key, repeated byte for byte after a crash, so both a key and room for a whole message."""
        return self.idempotent and self.max_batch >= MAX_RECIPIENTS_PER_BATCH

    def refusals(self) -> tuple[str, ...]:
        """What a campaign on this provider may not ask for (operator input shows these)."""
        return () if self.sends_batches else ("delivery_mode: batch",)
