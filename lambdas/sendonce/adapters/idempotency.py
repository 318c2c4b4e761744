"""Powertools idempotency, with the delivery ledger as its persistence layer.

Powertools drives each provider call: `save_inprogress` before it, `save_success` after
it, `delete_record` when it raises, and a stored response when the delivery already
ended. Stock persistence layers have weaknesses this ledger must not inherit (see
docs/ledger.md), so this layer overrides Powertools' public persistence methods — the
documented bring-your-own-store surface, which receives the raw payload — and maps them
onto the ledger's claim / mark_sent / settle, all fenced by owner:

- save_inprogress -> conditional claim keyed on (campaign_id, recipient_id), lease = the
  Lambda's remaining time; a conflict hands Powertools the existing record, so Powertools
  itself answers "already completed" (stored response) or "already in progress".
- save_success -> mark_sent, conditional on still being the owner (a stale owner cannot
  overwrite a record another consumer took over).
- delete_record -> never deletes: records the outcome (failed, unknown, or released to
  pending) so the history is kept, again fenced by owner.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyKeyError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer, DataRecord

from sendonce.domain.errors import LeaseLostError
from sendonce.domain.models import (
    FINAL_STATES,
    HELD_STATES,
    DeliveryKey,
    DeliveryRecord,
    DeliveryRequest,
    Receipt,
    SendGroup,
)
from sendonce.domain.ports import ClaimStatus, GroupResult, GuardResult, Ledger
from sendonce.domain.sending.outcomes import settlement_for

logger = logging.getLogger(__name__)

# Used only when no Lambda context was registered (a bug the handler guards against):
# the claim is then held for this long before another consumer may take it over.
FALLBACK_LEASE_MS = 15 * 60 * 1000


class LedgerPersistenceLayer(BasePersistenceLayer):
    def __init__(self, ledger: Ledger, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        super().__init__()
        self._ledger = ledger
        self._clock_ms = clock_ms

    @staticmethod
    def _request(data: dict[str, Any]) -> DeliveryRequest:
        missing = [name for name in ("campaign_id", "recipient_id", "owner") if not data.get(name)]
        if missing:
            # Stock Powertools runs the function with no idempotency at all when the key is
            # missing (unless configured otherwise): here that is always an error.
            raise IdempotencyKeyError(f"delivery payload lacks {', '.join(missing)}")
        return DeliveryRequest.model_validate(data)

    def save_inprogress(self, data: dict[str, Any], remaining_time_in_millis: int | None = None) -> None:
        request = self._request(data)
        now_ms = self._clock_ms()
        if remaining_time_in_millis is None:
            logger.warning("no Lambda context registered; claiming with the fallback lease")
            remaining_time_in_millis = FALLBACK_LEASE_MS
        result = self._ledger.claim(
            request,
            payload_hash=self._get_hashed_payload(data),
            lease_until_ms=now_ms + remaining_time_in_millis,
            now_ms=now_ms,
        )
        if result.status is ClaimStatus.CLAIMED:
            return
        if result.status is ClaimStatus.CONFLICT:
            raise IdempotencyValidationError("Payload does not match stored record for this event key")
        raise IdempotencyItemAlreadyExistsError(
            old_data_record=self._data_record(result.record, result.closed_as_unknown)
        )

    def save_success(self, data: dict[str, Any], result: dict) -> None:
        request = self._request(data)
        self._ledger.mark_sent(
            request.key, owner=request.owner, receipt=Receipt(provider_message_id=result["provider_message_id"])
        )

    def delete_record(self, data: dict[str, Any], exception: Exception) -> None:
        request = self._request(data)
        settlement = settlement_for(
            exception, provider_idempotent=request.provider_idempotent, last_receive=request.last_receive
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
                now_ms=self._clock_ms(),
            )
        except LeaseLostError:
            logger.warning("lease lost before the outcome could be recorded; the new owner settles it")

    def get_record(self, data: dict[str, Any]) -> DataRecord | None:
        request = self._request(data)
        record = self._ledger.get(request.key)
        if record is None:
            raise IdempotencyItemNotFoundError
        data_record = self._data_record(record)
        self._validate_payload(data_payload=data, stored_data_record=data_record)
        return data_record

    @staticmethod
    def _data_record(record: DeliveryRecord | None, closed_as_unknown: bool = False) -> DataRecord | None:
        if record is None:
            return None
        key = DeliveryKey(campaign_id=record.campaign_id, recipient_id=record.recipient_id).idempotency_key
        if record.state in HELD_STATES:
            return DataRecord(
                idempotency_key=key,
                status="INPROGRESS",
                in_progress_expiry_timestamp=record.lease_until_ms,
                payload_hash=record.payload_hash or "",
            )
        if record.state in FINAL_STATES:
            response = {
                "state": record.state.value,
                "provider_message_id": record.provider_message_id,
                "reason": record.reason,
                "closed_as_unknown": closed_as_unknown,
            }
            return DataRecord(
                idempotency_key=key,
                status="COMPLETED",
                response_data=json.dumps(response),
                payload_hash=record.payload_hash or "",
            )
        # Pending or dead-lettered records are claimable; reaching here means the record
        # changed between the claim and now. Powertools retries on this state.
        return DataRecord(idempotency_key=key, status="EXPIRED", expiry_timestamp=1)

    # Powertools' private per-record hooks are unused: the public methods above carry the
    # raw payload (owner, provider) that the ledger's fenced writes need.
    def _get_record(self, idempotency_key) -> DataRecord:  # pragma: no cover
        raise NotImplementedError("LedgerPersistenceLayer works through save_inprogress/save_success/delete_record")

    def _put_record(self, data_record: DataRecord) -> None:  # pragma: no cover
        raise NotImplementedError("LedgerPersistenceLayer works through save_inprogress/save_success/delete_record")

    def _update_record(self, data_record: DataRecord) -> None:  # pragma: no cover
        raise NotImplementedError("LedgerPersistenceLayer works through save_inprogress/save_success/delete_record")

    def _delete_record(self, data_record: DataRecord) -> None:  # pragma: no cover
        raise NotImplementedError("LedgerPersistenceLayer works through save_inprogress/save_success/delete_record")


def _replayed(response: dict, data_record: DataRecord) -> dict:
    return {**response, "replayed": True}


class PowertoolsDeliveryGuard:
    """The DeliveryGuard port: Powertools' idempotent_function over the ledger."""

    def __init__(self, ledger: Ledger, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self._ledger = ledger
        self._persistence = LedgerPersistenceLayer(ledger, clock_ms)
        self.config = IdempotencyConfig(
            event_key_jmespath="[campaign_id, recipient_id]",
            payload_validation_jmespath="[email, variables]",
            raise_on_no_idempotency_key=True,
            use_local_cache=False,
            response_hook=_replayed,
        )
        # Configured now (Powertools would on first use) so payload_hash works before any send.
        self._persistence.configure(self.config, key_prefix="sendonce")
        self._send_once = idempotent_function(
            data_keyword_argument="delivery",
            persistence_store=self._persistence,
            config=self.config,
            key_prefix="sendonce",
        )(_call_provider)

    def register_lambda_context(self, context: Any) -> None:
        self.config.register_lambda_context(context)

    def payload_hash(self, email: str, variables: dict) -> str:
        """The hash a claim stores for a delivery's content (the same in both modes)."""
        return self._persistence._get_hashed_payload({"email": email, "variables": variables})

    def send_once(self, request: DeliveryRequest, send: Callable[[], Receipt]) -> GuardResult:
        try:
            response = self._send_once(delivery=request.model_dump(mode="json"), send=send)
        except IdempotencyAlreadyInProgressError:
            # Rare: read when the holder's lease ends, so the message returns no sooner.
            record = self._ledger.get(request.key)
            return GuardResult(kind="held", lease_until_ms=record.lease_until_ms if record else None)
        except IdempotencyValidationError:
            return GuardResult(kind="conflict")
        except IdempotencyPersistenceLayerError as exc:
            if isinstance(exc.__cause__, LeaseLostError):
                return GuardResult(kind="lease_lost")
            raise
        if response.get("replayed"):
            return GuardResult(
                kind="replayed",
                state=response.get("state"),
                provider_message_id=response.get("provider_message_id"),
                reason=response.get("reason"),
                closed_as_unknown=bool(response.get("closed_as_unknown")),
            )
        return GuardResult(kind="sent", provider_message_id=response["provider_message_id"])


def _call_provider(*, delivery: dict, send: Callable[[], Receipt]) -> dict:
    receipt = send()
    return {"state": "sent", "provider_message_id": receipt.provider_message_id}


class GroupPersistenceLayer(LedgerPersistenceLayer):
    """Batch mode: the same lifecycle for one provider request carrying a send group.
    The payload is {campaign_id, group_id, owner, provider, group (members), payload_hashes}."""

    @staticmethod
    def _group(data: dict[str, Any]) -> SendGroup:
        missing = [name for name in ("campaign_id", "group_id", "owner") if not data.get(name)]
        if missing:
            raise IdempotencyKeyError(f"group payload lacks {', '.join(missing)}")
        return SendGroup.model_validate(data["group"])

    def save_inprogress(self, data: dict[str, Any], remaining_time_in_millis: int | None = None) -> None:
        group = self._group(data)
        now_ms = self._clock_ms()
        if remaining_time_in_millis is None:
            remaining_time_in_millis = FALLBACK_LEASE_MS
        claim = self._ledger.claim_group(
            group,
            data["payload_hashes"],
            owner=data["owner"],
            provider=data["provider"],
            lease_until_ms=now_ms + remaining_time_in_millis,
            now_ms=now_ms,
        )
        if claim.claimed:
            return
        key = group.idempotency_key
        if len(claim.final) == len(group.recipients):
            response = {"final": {rid: r.state.value for rid, r in claim.final.items()}}
            raise IdempotencyItemAlreadyExistsError(
                old_data_record=DataRecord(idempotency_key=key, status="COMPLETED", response_data=json.dumps(response))
            )
        # Held by a live owner, or members in states this group cannot take (reported as
        # in progress; the message returns and the next attempt re-reads the ledger).
        raise IdempotencyItemAlreadyExistsError(
            old_data_record=DataRecord(
                idempotency_key=key,
                status="INPROGRESS",
                in_progress_expiry_timestamp=claim.held_until_ms or self._clock_ms() + FALLBACK_LEASE_MS,
            )
        )

    def save_success(self, data: dict[str, Any], result: dict) -> None:
        group = self._group(data)
        outcomes = {
            rid: (Receipt(provider_message_id=value["id"]) if "id" in value else value["failed"])
            for rid, value in result["outcomes"].items()
        }
        self._ledger.complete_group(group, owner=data["owner"], outcomes=outcomes)

    def delete_record(self, data: dict[str, Any], exception: Exception) -> None:
        group = self._group(data)
        settlement = settlement_for(exception, provider_idempotent=True, last_receive=bool(data.get("last_receive")))
        if settlement is None:
            return
        try:
            self._ledger.release_group(
                group,
                owner=data["owner"],
                state=settlement.state,
                reason=settlement.reason,
                error_class=settlement.error_class,
                refused=settlement.refused,
            )
        except LeaseLostError:
            logger.warning("group lease lost before the outcome could be recorded")

    def get_record(self, data: dict[str, Any]) -> DataRecord | None:
        raise IdempotencyItemNotFoundError  # a failed group claim always returns its reason


class PowertoolsGroupGuard:
    """Powertools' idempotent_function around one batch request, keyed on (campaign, group)."""

    def __init__(self, ledger: Ledger, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self._persistence = GroupPersistenceLayer(ledger, clock_ms)
        self.config = IdempotencyConfig(
            event_key_jmespath="[campaign_id, group_id]",
            raise_on_no_idempotency_key=True,
            use_local_cache=False,
            response_hook=_replayed,
        )
        self._send_once = idempotent_function(
            data_keyword_argument="group_send",
            persistence_store=self._persistence,
            config=self.config,
            key_prefix="sendonce-group",
        )(_call_group)

    def register_lambda_context(self, context: Any) -> None:
        self.config.register_lambda_context(context)

    def send_group_once(
        self,
        group: SendGroup,
        *,
        owner: str,
        provider: str,
        payload_hashes: dict[str, str],
        send: Callable[[], list[Receipt | str]],
        last_receive: bool = False,
    ) -> GroupResult:
        payload = {
            "campaign_id": group.campaign_id,
            "group_id": group.group_id,
            "owner": owner,
            "provider": provider,
            "payload_hashes": payload_hashes,
            "group": group.model_dump(mode="json"),
            "last_receive": last_receive,
        }
        try:
            response = self._send_once(
                group_send=payload, send=send, members=[r.recipient_id for r in group.recipients]
            )
        except IdempotencyAlreadyInProgressError:
            return GroupResult(kind="held")
        except IdempotencyPersistenceLayerError as exc:
            if isinstance(exc.__cause__, LeaseLostError):
                return GroupResult(kind="lease_lost")
            raise
        if response.get("replayed"):
            return GroupResult(kind="replayed", outcomes=response.get("final", {}))
        return GroupResult(kind="sent", outcomes=response["outcomes"])


def _call_group(*, group_send: dict, send: Callable[[], list[Receipt | str]], members: list[str]) -> dict:
    results = send()
    return {
        "outcomes": {
            rid: ({"id": r.provider_message_id} if isinstance(r, Receipt) else {"failed": r})
            for rid, r in zip(members, results, strict=True)
        }
    }
