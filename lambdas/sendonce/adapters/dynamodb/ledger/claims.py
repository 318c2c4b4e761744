"""One delivery's writes (the `DeliveryClaims` role): the claim, and every later write
conditional on the owner that claimed and on the source states `delivery_tables.TRANSITIONS`
allows for it; the closing transitions of deliveries nobody holds.
"""

from __future__ import annotations

from collections.abc import Iterable

from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb.ledger import items
from sendonce.adapters.dynamodb.ledger.conditions import claim_update
from sendonce.adapters.dynamodb.ledger.items import _APPEND, _LIFT, _NAMES, _history, _now_iso, _record, _used, _values
from sendonce.adapters.dynamodb.ledger.reads import LedgerReads
from sendonce.domain.errors import LeaseLostError
from sendonce.domain.models import DeliveryKey, DeliveryRecord, DeliveryRequest, DeliveryState, Receipt
from sendonce.domain.sending import delivery_tables
from sendonce.domain.sending.delivery_tables import Event, Verdict, classify
from sendonce.domain.sending.ports import ClaimResult, ClaimStatus


class LedgerClaims(LedgerReads):
    def claim(self, request: DeliveryRequest, *, payload_hash: str, lease_until_ms: int, now_ms: int) -> ClaimResult:
        params = claim_update(
            owner=request.owner,
            lease_until_ms=lease_until_ms,
            now_ms=now_ms,
            batch_id=request.batch_id,
            provider=request.provider,
            payload_hash=payload_hash,
            email=request.email,
            keyed=request.provider_idempotent,
            group_key=None,
            mailbox_group=self._mailbox_group(request.email),
            variant=request.variant,
        )
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(request.key),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **params,
            )
            return ClaimResult(ClaimStatus.CLAIMED)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
        record = _record(old) if old else self.get(request.key)
        verdict = classify(
            record, payload_hash=payload_hash, provider_idempotent=request.provider_idempotent, now_ms=now_ms
        )
        if verdict is Verdict.STALE and record is not None:
            closed = self.close_as_read(
                record,
                Event.CLOSE_STALE,
                reason="an earlier attempt may have been accepted"
                " by the provider and cannot be repeated safely; not repeated",
                now_ms=now_ms,
            )
            if closed is None:
                return ClaimResult(ClaimStatus.HELD, record)
            return ClaimResult(ClaimStatus.FINAL, closed, closed_as_unknown=True)
        if verdict is Verdict.FINAL:
            return ClaimResult(ClaimStatus.FINAL, record)
        if verdict is Verdict.CONFLICT:
            return ClaimResult(ClaimStatus.CONFLICT, record)
        # HELD, GROUPED (sent, if at all, under another key), or CLAIM when the record
        # changed between the write and the read: the message comes back and decides again.
        return ClaimResult(ClaimStatus.HELD, record)

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
        """Apply a closing transition to a delivery nobody holds, provided it is still as it
        was read (state, owner and maybe-sent mark): a live consumer's claim in between wins.
        Returns the new record, or None when it changed."""
        transition = delivery_tables.transition(event)
        key = key or record.key
        values = _values(to=transition.target.value, iso=_now_iso(), reason=reason[:500], ec=event.value, now=now_ms)
        values.update(_history(transition.target.value, record.owner if record else None, reason))
        names = {"#state": "state"}
        update = "SET #state = :to, reason = :reason, error_class = :ec, updated_at = :iso, " + _APPEND
        if record is None:
            if delivery_tables.ABSENT not in transition.sources:
                raise ValueError(f"{event} does not start from an absent record")
            condition = "attribute_not_exists(#state)"
            update += ", batch_id = :batch"
            values.update(_values(batch=batch_id or "-"))
        else:
            if record.state not in transition.sources:
                raise ValueError(f"{event} does not start from {record.state}")
            condition = "#state = :seen"
            values.update(_values(seen=record.state.value))
            if record.owner:
                condition += " AND #owner = :prev"
                names["#owner"] = "owner"
                values.update(_values(prev=record.owner))
            if record.state in delivery_tables.HELD:
                condition += " AND (attribute_not_exists(lease_until_ms) OR lease_until_ms < :now)"
            if record.maybe_sent_at_ms is None:
                condition += " AND attribute_not_exists(maybe_sent_at_ms)"
            else:
                condition += " AND maybe_sent_at_ms = :ms"
                values.update(_values(ms=record.maybe_sent_at_ms))
            update += " REMOVE lease_until_ms"
        try:
            response = self._client.update_item(
                TableName=self._table,
                Key=self._key(key),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=_used(values, update, condition),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return None
        return _record(response["Attributes"])

    def _fenced_update(
        self, key: DeliveryKey, *, owner: str, event: Event, update: str, values: dict, extra: str = ""
    ) -> None:
        states = {f":s{i}": {"S": s} for i, s in enumerate(delivery_tables.sources(event))}
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(key),
                UpdateExpression=update,
                ConditionExpression=f"#owner = :me AND #state IN ({', '.join(states)}){extra}",
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={**values, **states, **_values(me=owner)},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise LeaseLostError(f"{key.campaign_id}/{key.recipient_id} is no longer owned by {owner}") from exc
            raise

    def mark_in_flight(self, key: DeliveryKey, *, owner: str, now_ms: int) -> None:
        values = _values(in_flight="in_flight", now=now_ms, iso=_now_iso())
        values.update(_history("in_flight", owner))
        self._fenced_update(
            key,
            owner=owner,
            event=Event.MARK_IN_FLIGHT,
            update="SET #state = :in_flight, maybe_sent_at_ms = if_not_exists(maybe_sent_at_ms, :now),"
            " maybe_sent_by = if_not_exists(maybe_sent_by, :me), updated_at = :iso, " + _APPEND,
            values=values,
        )

    def mark_sent(self, key: DeliveryKey, *, owner: str, receipt: Receipt) -> None:
        values = _values(sent="sent", mid=receipt.provider_message_id, iso=_now_iso())
        values.update(_history("sent", owner, receipt.provider_message_id))
        self._fenced_update(
            key,
            owner=owner,
            event=Event.MARK_SENT,
            update="SET #state = :sent, provider_message_id = :mid, updated_at = :iso, "
            + _APPEND
            + " REMOVE lease_until_ms, reason, error_class",
            values=values,
        )

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
        event = delivery_tables.settle_event(state, maybe_sent=maybe_sent)
        values = _values(state=state.value, reason=reason[:500], ec=error_class, iso=_now_iso())
        values.update(_history(state.value, owner, f"{error_class}: {reason}"))
        update = "SET #state = :state, reason = :reason, error_class = :ec, updated_at = :iso, " + _APPEND
        if maybe_sent:
            update += ", maybe_sent_at_ms = if_not_exists(maybe_sent_at_ms, :now), maybe_sent_by = if_not_exists(maybe_sent_by, :me)"
            values.update(_values(now=now_ms))
        if state is DeliveryState.SUPPRESSED:
            # Suppressed since an earlier owner's attempt that may have been accepted: saying
            # "suppressed" would say it was never sent. Unknown, with the reason.
            try:
                self._fenced_update(
                    key,
                    owner=owner,
                    event=event,
                    values=values,
                    update=update + " REMOVE lease_until_ms",
                    extra=" AND (attribute_not_exists(maybe_sent_at_ms) OR maybe_sent_by = :me)",
                )
                return
            except LeaseLostError:
                state, event, reason = (
                    DeliveryState.UNKNOWN,
                    Event.SETTLE_UNKNOWN,
                    (f"{reason}; an earlier attempt may have been accepted by the provider"),
                )
                values.update(_values(state=state.value, reason=reason[:500]))
                values.update(_history(state.value, owner, f"{error_class}: {reason}"))
        if refused:
            # The provider refused every request of this claim. If this owner's claim set the
            # mark, nothing can have been accepted: lift it. Else an earlier owner's request
            # may have been accepted; the mark (and its window) stays.
            try:
                self._fenced_update(
                    key,
                    owner=owner,
                    event=event,
                    values=values,
                    update=update + " REMOVE lease_until_ms, " + _LIFT,
                    extra=items._LIFT_GUARD,
                )
                return
            except LeaseLostError:
                pass
        self._fenced_update(key, owner=owner, event=event, update=update + " REMOVE lease_until_ms", values=values)

    def close_unclaimed(
        self, campaign_id: str, recipient_ids: Iterable[str], *, state: DeliveryState, reason: str, batch_id: str
    ) -> int:
        event = {
            DeliveryState.DEAD_LETTERED: Event.CLOSE_DEAD_LETTERED,
            DeliveryState.SUPPRESSED: Event.CLOSE_SUPPRESSED,
        }[state]
        states = {f":s{i}": {"S": s} for i, s in enumerate(delivery_tables.sources(event))}
        condition = f"#state IN ({', '.join(states)})"
        if delivery_tables.allows_absent(event):
            condition = f"attribute_not_exists(#state) OR {condition}"
        moved = 0
        for recipient_id in recipient_ids:
            values = _values(state=state.value, reason=reason[:500], iso=_now_iso(), batch=batch_id)
            values.update(_history(state.value, None, reason))
            try:
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(DeliveryKey(campaign_id=campaign_id, recipient_id=recipient_id)),
                    UpdateExpression="SET #state = :state, reason = :reason, updated_at = :iso,"
                    " batch_id = if_not_exists(batch_id, :batch), " + _APPEND,
                    ConditionExpression=condition,
                    ExpressionAttributeNames={"#state": "state"},
                    ExpressionAttributeValues={**values, **states},
                )
                moved += 1
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
        return moved
