"""The claim rules of the delivery ledger, as one pure function.

The DynamoDB ledger states the same rules as a condition expression (it must, to be
atomic); the in-memory ledger used by unit tests calls this function. docs/ledger.md
explains them.
"""

from __future__ import annotations

from sendonce.models import FINAL_STATES, HELD_STATES, DeliveryRecord, DeliveryState
from sendonce.ports import ClaimStatus

# Resend keeps an idempotency key for 24 hours. A send that may have happened more than
# this long ago can no longer be repeated safely, even with the same key.
IDEMPOTENCY_WINDOW_MS = 23 * 3600 * 1000

STALE = "stale"  # a holder that may have sent is gone and the send cannot be repeated
GROUPED = "grouped"  # owned by a batch-mode send group other than the caller's


def classify(
    record: DeliveryRecord | None,
    *,
    payload_hash: str,
    provider_idempotent: bool,
    now_ms: int,
    group_key: str | None = None,
) -> ClaimStatus | str:
    """What a claim on `record` may do: CLAIMED (take it), FINAL, HELD, CONFLICT, STALE or
    GROUPED. `group_key` is the caller's send group in batch mode (None: one recipient)."""
    if record is None:
        return ClaimStatus.CLAIMED
    if record.payload_hash and record.payload_hash != payload_hash:
        return ClaimStatus.CONFLICT
    if record.state in FINAL_STATES:
        return ClaimStatus.FINAL
    if record.group_key and record.group_key != group_key and record.maybe_sent_at_ms is not None:
        # Another group's request may have carried this delivery: only a replay of that
        # request (same key, same members) may send it.
        return GROUPED
    cutoff = now_ms - IDEMPOTENCY_WINDOW_MS
    if record.state in (DeliveryState.PENDING, DeliveryState.DEAD_LETTERED):
        if record.maybe_sent_at_ms is None:
            return ClaimStatus.CLAIMED
        if provider_idempotent and record.maybe_sent_at_ms > cutoff:
            return ClaimStatus.CLAIMED
        return STALE
    if record.state in HELD_STATES:
        if record.lease_until_ms is not None and record.lease_until_ms >= now_ms:
            return ClaimStatus.HELD
        if provider_idempotent:
            return ClaimStatus.CLAIMED if (record.claimed_at_ms or 0) > cutoff else STALE
        return ClaimStatus.CLAIMED if record.state is DeliveryState.CLAIMED else STALE
    raise ValueError(f"unexpected delivery state {record.state}")
