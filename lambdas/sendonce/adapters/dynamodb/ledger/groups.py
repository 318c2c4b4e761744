"""A send group's writes (the `SendGroupClaims` role): its members claimed, completed or
released together, each in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb.ledger import items
from sendonce.adapters.dynamodb.ledger.conditions import claim_update
from sendonce.adapters.dynamodb.ledger.items import _APPEND, _LIFT, _NAMES, _history, _now_iso, _record, _values
from sendonce.adapters.dynamodb.ledger.reads import LedgerReads
from sendonce.domain.errors import LeaseLostError
from sendonce.domain.models import DeliveryKey, DeliveryRecord, DeliveryState, Receipt, SendGroup
from sendonce.domain.sending import delivery_tables
from sendonce.domain.sending.delivery_tables import Event
from sendonce.domain.sending.ports import GroupClaim


class LedgerGroups(LedgerReads):
    def _transact(self, updates: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """One transaction; None on success, else the per-item cancellation reasons."""
        try:
            self._client.transact_write_items(
                TransactItems=[{"Update": {"TableName": self._table, **u}} for u in updates]
            )
            return None
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = exc.response.get("CancellationReasons") or []
            if not any(r.get("Code") == "ConditionalCheckFailed" for r in reasons):
                raise
            return reasons

    def _member_key(self, group: SendGroup, recipient_id: str) -> dict[str, Any]:
        return self._key(DeliveryKey(campaign_id=group.campaign_id, recipient_id=recipient_id))

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
        updates = []
        for recipient in group.recipients:
            params = claim_update(
                owner=owner,
                lease_until_ms=lease_until_ms,
                now_ms=now_ms,
                batch_id=group.group_id,
                provider=provider,
                payload_hash=payload_hashes[recipient.recipient_id],
                email=recipient.email,
                keyed=True,
                group_key=group.idempotency_key,
                detail=f"group {group.group_id}",
                mailbox_group=self._mailbox_group(recipient.email),
                variant=(variants or {}).get(recipient.recipient_id),
            )
            updates.append(
                {
                    "Key": self._member_key(group, recipient.recipient_id),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    **params,
                }
            )
        reasons = self._transact(updates)
        if reasons is None:
            return GroupClaim(claimed=True)
        final: dict[str, DeliveryRecord] = {}
        held_until = None
        for reason in reasons:
            if reason.get("Code") != "ConditionalCheckFailed" or not reason.get("Item"):
                continue
            record = _record(reason["Item"])
            if record.state in delivery_tables.FINAL:
                final[record.recipient_id] = record
            elif record.lease_until_ms and record.lease_until_ms >= now_ms:
                held_until = max(held_until or 0, record.lease_until_ms)
        return GroupClaim(claimed=False, final=final, held_until_ms=held_until)

    def _fenced_member(
        self,
        group: SendGroup,
        recipient_id: str,
        *,
        owner: str,
        event: Event,
        update: str,
        values: dict[str, Any],
        extra: str = "",
    ) -> dict[str, Any]:
        states = {f":s{i}": {"S": s} for i, s in enumerate(delivery_tables.sources(event))}
        return {
            "Key": self._member_key(group, recipient_id),
            "UpdateExpression": update,
            "ConditionExpression": f"#owner = :me AND #state IN ({', '.join(states)}){extra}",
            "ExpressionAttributeNames": _NAMES,
            "ExpressionAttributeValues": {**values, **states, **_values(me=owner)},
        }

    def complete_group(self, group: SendGroup, *, owner: str, outcomes: dict[str, Receipt | str]) -> None:
        updates = []
        for recipient in group.recipients:
            outcome = outcomes[recipient.recipient_id]
            if isinstance(outcome, Receipt):
                values = _values(state="sent", mid=outcome.provider_message_id, iso=_now_iso())
                values.update(_history("sent", owner, outcome.provider_message_id))
                update = "SET #state = :state, provider_message_id = :mid, updated_at = :iso, " + _APPEND
                update += " REMOVE lease_until_ms, reason, error_class"
                event = Event.MARK_SENT
            else:
                values = _values(state="failed", reason=outcome[:500], ec="permanent", iso=_now_iso())
                values.update(_history("failed", owner, f"permanent: {outcome}"))
                update = "SET #state = :state, reason = :reason, error_class = :ec, updated_at = :iso, " + _APPEND
                update += " REMOVE lease_until_ms"
                event = Event.SETTLE_FAILED
            updates.append(
                self._fenced_member(
                    group, recipient.recipient_id, owner=owner, event=event, update=update, values=values
                )
            )
        if self._transact(updates) is not None:
            raise LeaseLostError(f"group {group.group_id} is no longer owned by {owner}")

    def release_group(
        self,
        group: SendGroup,
        *,
        owner: str,
        state: DeliveryState,
        reason: str,
        error_class: str,
        refused: bool = False,
    ) -> None:
        """Every member back to `state` together. `refused`: the provider refused the
        request, so members whose mark this owner set lose it (and the group), which lets a
        later attempt form a new group for them or send them one by one."""
        event = delivery_tables.settle_event(state, maybe_sent=not refused)
        keep: set[str] = set()
        while True:
            updates = []
            for recipient in group.recipients:
                values = _values(state=state.value, reason=reason[:500], ec=error_class, iso=_now_iso())
                values.update(_history(state.value, owner, f"{error_class}: {reason}"))
                update = "SET #state = :state, reason = :reason, error_class = :ec, updated_at = :iso, " + _APPEND
                lift = refused and recipient.recipient_id not in keep
                updates.append(
                    self._fenced_member(
                        group,
                        recipient.recipient_id,
                        owner=owner,
                        event=event,
                        values=values,
                        update=update + " REMOVE lease_until_ms" + (", " + _LIFT if lift else ""),
                        extra=items._LIFT_GUARD if lift else "",
                    )
                )
            reasons = self._transact(updates)
            if reasons is None:
                return
            # A member whose mark another owner set fails only the lift: keep its mark and retry.
            failed = [
                r.recipient_id
                for r, why in zip(group.recipients, reasons, strict=False)
                if why.get("Code") == "ConditionalCheckFailed"
            ]
            newly = {rid for rid in failed if rid not in keep}
            if not refused or not newly:
                raise LeaseLostError(f"group {group.group_id} is no longer owned by {owner}")
            keep |= newly
