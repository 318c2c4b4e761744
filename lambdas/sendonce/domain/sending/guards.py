"""A provider call at most once per delivery (and per send group in batch mode), with the
ledger as the claim: the DeliveryGuard and GroupGuard ports (sending/ports.py).

The ledger is the real claim, so the guard is the claim's life around one call and no more
(docs/ledger.md):

- claim the delivery (a conditional write keyed on (campaign_id, recipient_id), lease = the
  Lambda's remaining time); a delivery already ended answers with its outcome ("replayed"),
  a live holder with "held", a claim of other content with "conflict";
- call the provider;
- on success record the receipt (`mark_sent`), fenced by owner: a stale owner cannot
  overwrite a record another consumer took over ("lease_lost");
- on failure record what the failure means (`settlement_for`: failed, unknown, or released
  to pending), fenced by owner, and raise the failure to the caller. Nothing is deleted.

This is the lifecycle Powertools' idempotency utility drives (save_inprogress, save_success,
delete_record) — the guard used it until issue 34, through an override of its persistence
layer's public methods and a call to a private one. The same answers come from the ledger
alone, with no dependency's internals: `payload_hash` is the hash Powertools stored for the
same configuration (md5 of the sorted JSON of [email, variables]), so that claims recorded
before the change still match their content (tests/unit/test_guards.py checks it against
Powertools' own hashing).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sendonce.domain.errors import LeaseLostError, SendonceError
from sendonce.domain.models import FINAL_STATES, HELD_STATES, DeliveryRequest, Receipt, SendGroup
from sendonce.domain.sending.outcomes import settlement_for
from sendonce.domain.sending.ports import ClaimStatus, GroupResult, GuardResult, Ledger

logger = logging.getLogger(__name__)

# Used only when no Lambda context was registered (a bug the handler guards against):
# the claim is then held for this long before another consumer may take it over.
FALLBACK_LEASE_MS = 15 * 60 * 1000
# A claim answered by a record that changed before it could be read (claimable again, or an
# expired lease) is tried again, at most this many times in all.
CLAIM_ATTEMPTS = 3


class MissingDeliveryKeyError(SendonceError, ValueError):
    """A delivery without its campaign, recipient or owner: never run unguarded."""


class InconsistentClaimError(SendonceError):
    """The ledger kept answering a claim with a record that was claimable by the time it was
    read: the message returns and is tried again."""


class LambdaContext(Protocol):
    def get_remaining_time_in_millis(self) -> int: ...


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def payload_hash(email: str, variables: Mapping[str, Any], variant: str | None = None) -> str:
    """The content hash a claim stores; a later claim with another hash is a conflict. An A/B
    campaign's variant is part of it (a recipient claimed for one variant is never sent another);
    without one the hash is the one claims have always stored."""
    data: list[Any] = [email, dict(variables)] if variant is None else [email, dict(variables), variant]
    return hashlib.md5(json.dumps(data, sort_keys=True, default=str).encode(), usedforsecurity=False).hexdigest()


class _Lease:
    def __init__(self, clock_ms: Callable[[], int]):
        self.clock_ms = clock_ms
        self._context: LambdaContext | None = None

    def register_lambda_context(self, context: LambdaContext) -> None:
        self._context = context

    def remaining_ms(self) -> int:
        if self._context is None:
            logger.warning("no Lambda context registered; claiming with the fallback lease")
            return FALLBACK_LEASE_MS
        return int(self._context.get_remaining_time_in_millis())


class LedgerDeliveryGuard:
    """The DeliveryGuard port: one provider call per delivery, claimed in the ledger."""

    def __init__(self, ledger: Ledger, clock_ms: Callable[[], int] = _wall_clock_ms):
        self._ledger = ledger
        self._lease = _Lease(clock_ms)

    def register_lambda_context(self, context: LambdaContext) -> None:
        self._lease.register_lambda_context(context)

    def payload_hash(self, email: str, variables: Mapping[str, Any], variant: str | None = None) -> str:
        return payload_hash(email, variables, variant)

    def send_once(self, request: DeliveryRequest, send: Callable[[], Receipt]) -> GuardResult:
        missing = [name for name in ("campaign_id", "recipient_id", "owner") if not getattr(request, name)]
        if missing:
            raise MissingDeliveryKeyError(f"delivery payload lacks {', '.join(missing)}")
        content = payload_hash(request.email, request.variables, request.variant)
        for _ in range(CLAIM_ATTEMPTS):
            now_ms = self._lease.clock_ms()
            result = self._ledger.claim(
                request,
                payload_hash=content,
                lease_until_ms=now_ms + self._lease.remaining_ms(),
                now_ms=now_ms,
            )
            if result.status is ClaimStatus.CLAIMED:
                return self._call(request, send)
            if result.status is ClaimStatus.CONFLICT:
                return GuardResult(kind="conflict")
            record = result.record
            if record is None:  # not answered with the claim: read it, and check its content
                record = self._ledger.get(request.key)
                if record is not None and (record.payload_hash or "") != content:
                    return GuardResult(kind="conflict")
            if record is not None and record.state in FINAL_STATES:
                return GuardResult(
                    kind="replayed",
                    state=record.state,
                    provider_message_id=record.provider_message_id,
                    reason=record.reason,
                    closed_as_unknown=result.closed_as_unknown,
                )
            if record is not None and record.state in HELD_STATES:
                if record.lease_until_ms is None or record.lease_until_ms >= self._lease.clock_ms():
                    return GuardResult(kind="held", lease_until_ms=record.lease_until_ms)
            # Claimable again by the time it was read (or its lease just ended): claim again.
        raise InconsistentClaimError(f"{request.key.idempotency_key}: the ledger kept changing under the claim")

    def _call(self, request: DeliveryRequest, send: Callable[[], Receipt]) -> GuardResult:
        try:
            receipt = send()
        except Exception as failure:
            self._settle(request, failure)
            raise
        try:
            self._ledger.mark_sent(request.key, owner=request.owner, receipt=receipt)
        except LeaseLostError:
            return GuardResult(kind="lease_lost")
        return GuardResult(kind="sent", provider_message_id=receipt.provider_message_id)

    def _settle(self, request: DeliveryRequest, failure: Exception) -> None:
        settlement = settlement_for(
            failure, provider_idempotent=request.provider_idempotent, last_receive=request.last_receive
        )
        if settlement is None:
            return
        try:
            self._ledger.settle(
                request.key,
                owner=request.owner,
                state=settlement.state,
                reason=settlement.reason,
                error_class=settlement.error_class,
                maybe_sent=settlement.maybe_sent,
                refused=settlement.refused,
                now_ms=self._lease.clock_ms(),
            )
        except LeaseLostError:
            logger.warning("lease lost before the outcome could be recorded; the new owner settles it")


class LedgerGroupGuard:
    """The GroupGuard port: one batch request per send group, claimed in the ledger as a whole."""

    def __init__(self, ledger: Ledger, clock_ms: Callable[[], int] = _wall_clock_ms):
        self._ledger = ledger
        self._lease = _Lease(clock_ms)

    def register_lambda_context(self, context: LambdaContext) -> None:
        self._lease.register_lambda_context(context)

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
    ) -> GroupResult:
        keys = (("campaign_id", group.campaign_id), ("group_id", group.group_id), ("owner", owner))
        missing = [name for name, value in keys if not value]
        if missing:
            raise MissingDeliveryKeyError(f"group payload lacks {', '.join(missing)}")
        now_ms = self._lease.clock_ms()
        claim = self._ledger.claim_group(
            group,
            payload_hashes,
            owner=owner,
            provider=provider,
            lease_until_ms=now_ms + self._lease.remaining_ms(),
            now_ms=now_ms,
            variants=variants,
        )
        if not claim.claimed:
            if len(claim.final) == len(group.recipients):
                return GroupResult(kind="replayed", outcomes={rid: r.state.value for rid, r in claim.final.items()})  # type: ignore[misc]
            # Held by a live owner, or members in states this group cannot take: the message
            # returns and the next attempt reads the ledger again.
            return GroupResult(kind="held")
        try:
            results = send()
        except Exception as failure:
            self._release(group, owner, failure, last_receive=last_receive)
            raise
        members = [r.recipient_id for r in group.recipients]
        outcomes = dict(zip(members, results, strict=True))
        try:
            self._ledger.complete_group(group, owner=owner, outcomes=outcomes)
        except LeaseLostError:
            return GroupResult(kind="lease_lost")
        return GroupResult(
            kind="sent",
            outcomes={
                rid: ({"id": r.provider_message_id} if isinstance(r, Receipt) else {"failed": r})
                for rid, r in outcomes.items()
            },
        )

    def _release(self, group: SendGroup, owner: str, failure: Exception, *, last_receive: bool) -> None:
        settlement = settlement_for(failure, provider_idempotent=True, last_receive=last_receive)
        if settlement is None:
            return
        try:
            self._ledger.release_group(
                group,
                owner=owner,
                state=settlement.state,
                reason=settlement.reason,
                error_class=settlement.error_class,
                refused=settlement.refused,
            )
        except LeaseLostError:
            logger.warning("group lease lost before the outcome could be recorded")
