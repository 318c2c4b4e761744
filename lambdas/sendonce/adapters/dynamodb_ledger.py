"""The delivery ledger on DynamoDB: one item per (campaign_id, recipient_id).

The claim rules of `sendonce.ledger_rules.classify` are stated here as condition
expressions so that a claim is one atomic conditional write; a failed claim returns the
old item (ReturnValuesOnConditionCheckFailure=ALL_OLD), which the same rules classify
without another read. Every later write is conditional on the owner that claimed.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from sendonce.errors import LeaseLostError
from sendonce.ledger_rules import GROUPED, IDEMPOTENCY_WINDOW_MS, STALE, classify
from sendonce.models import (
    FINAL_STATES,
    DeliveryKey,
    DeliveryRecord,
    DeliveryRequest,
    DeliveryState,
    Receipt,
    SendGroup,
    email_fingerprint,
)
from sendonce.ports import ClaimResult, ClaimStatus, GroupClaim

logger = logging.getLogger(__name__)

_ser = TypeSerializer()
_de = TypeDeserializer()

_NAMES = {"#state": "state", "#owner": "owner"}

# Claimable: absent; pending/dead-lettered (and, if the provider may have accepted an
# earlier attempt, only under a live idempotency window); or held with an expired lease,
# when the provider can repeat the send safely.
_CLAIMABLE_IDEMPOTENT = (
    "(attribute_not_exists(#state)"
    " OR (#state IN (:pending, :dead) AND (attribute_not_exists(maybe_sent_at_ms) OR maybe_sent_at_ms > :cutoff))"
    " OR (#state IN (:claimed, :in_flight) AND lease_until_ms < :now AND claimed_at_ms > :cutoff))"
)
# Without an idempotency key, a holder that reached in_flight may have sent: never retake it.
_CLAIMABLE_NON_IDEMPOTENT = (
    "(attribute_not_exists(#state)"
    " OR (#state IN (:pending, :dead) AND attribute_not_exists(maybe_sent_at_ms))"
    " OR (#state = :claimed AND lease_until_ms < :now))"
)
_SAME_PAYLOAD = "(attribute_not_exists(payload_hash) OR payload_hash = :ph)"
# A delivery a batch-mode group may have sent belongs to that group's request alone.
_NOT_GROUPED = "(attribute_not_exists(group_key) OR attribute_not_exists(maybe_sent_at_ms))"
_GROUP_CLAIMABLE = (
    "(attribute_not_exists(#state) OR #state IN (:pending, :dead)"
    " OR (#state IN (:claimed, :in_flight) AND lease_until_ms < :now))"
    " AND (attribute_not_exists(group_key) OR group_key = :g OR attribute_not_exists(maybe_sent_at_ms))"
    " AND (attribute_not_exists(maybe_sent_at_ms) OR maybe_sent_at_ms > :cutoff)"
)


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _values(**values: Any) -> dict[str, Any]:
    return {f":{name}": _ser.serialize(value) for name, value in values.items()}


def _record(item: dict[str, Any]) -> DeliveryRecord:
    data = {k: _de.deserialize(v) for k, v in item.items()}
    return DeliveryRecord(
        campaign_id=data["campaign_id"],
        recipient_id=data["recipient_id"],
        state=DeliveryState(data.get("state", "pending")),
        owner=data.get("owner"),
        lease_until_ms=_int(data.get("lease_until_ms")),
        attempts=_int(data.get("attempts")) or 0,
        batch_id=data.get("batch_id"),
        payload_hash=data.get("payload_hash"),
        provider=data.get("provider"),
        provider_message_id=data.get("provider_message_id"),
        reason=data.get("reason"),
        error_class=data.get("error_class"),
        email_fingerprint=data.get("email_fp"),
        claimed_at_ms=_int(data.get("claimed_at_ms")),
        maybe_sent_at_ms=_int(data.get("maybe_sent_at_ms")),
        group_key=data.get("group_key"),
        updated_at=data.get("updated_at"),
        history=[{k: (int(v) if k.endswith("_ms") else v) for k, v in h.items()} for h in data.get("history", [])],
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _history(event: str, owner: str | None = None, detail: str | None = None) -> dict[str, Any]:
    entry = {"at": _now_iso(), "event": event}
    if owner:
        entry["owner"] = owner
    if detail:
        entry["detail"] = detail[:500]
    return {":entry": {"L": [_ser.serialize(entry)]}, ":empty": {"L": []}}


_APPEND = "history = list_append(if_not_exists(history, :empty), :entry)"


class DynamoDBLedger:
    def __init__(self, *, client: Any, table_name: str):
        self._client = client
        self._table = table_name

    def _key(self, key: DeliveryKey) -> dict[str, Any]:
        return {"campaign_id": {"S": key.campaign_id}, "recipient_id": {"S": key.recipient_id}}

    def claim(self, request: DeliveryRequest, *, payload_hash: str, lease_until_ms: int, now_ms: int) -> ClaimResult:
        claimable = _CLAIMABLE_IDEMPOTENT if request.provider_idempotent else _CLAIMABLE_NON_IDEMPOTENT
        values = _values(
            claimed="claimed",
            pending="pending",
            dead="dead_lettered",
            in_flight="in_flight",
            now=now_ms,
            owner=request.owner,
            lease=lease_until_ms,
            batch=request.batch_id,
            provider=request.provider,
            ph=payload_hash,
            fp=email_fingerprint(request.email),
            iso=_now_iso(),
            one=1,
        )
        if request.provider_idempotent:
            values.update(_values(cutoff=now_ms - IDEMPOTENCY_WINDOW_MS))
        else:
            del values[":in_flight"]
        values.update(_history("claimed", request.owner))
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(request.key),
                UpdateExpression=(
                    "SET #state = :claimed, #owner = :owner, lease_until_ms = :lease, claimed_at_ms = :now,"
                    " batch_id = :batch, provider = :provider, payload_hash = if_not_exists(payload_hash, :ph),"
                    " email_fp = if_not_exists(email_fp, :fp), updated_at = :iso, " + _APPEND + " ADD attempts :one"
                ),
                ConditionExpression=f"{claimable} AND {_SAME_PAYLOAD} AND {_NOT_GROUPED}",
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return ClaimResult(ClaimStatus.CLAIMED)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
        record = _record(old) if old else self.get(request.key)
        verdict = classify(record, payload_hash=payload_hash, provider_idempotent=request.provider_idempotent, now_ms=now_ms)
        if verdict == STALE:
            return self._close_stale(record)
        if verdict == GROUPED:
            return ClaimResult(ClaimStatus.HELD, record)
        if verdict is ClaimStatus.CLAIMED:
            # The record changed between the write and now (e.g. a lease ran out): the
            # caller's retry will claim it.
            return ClaimResult(ClaimStatus.HELD, record)
        return ClaimResult(verdict, record)

    def _close_stale(self, record: DeliveryRecord) -> ClaimResult:
        """A holder that may have sent is gone and the send cannot be repeated: unknown."""
        reason = "previous attempt may have been accepted by the provider; not repeated"
        values = _values(unknown="unknown", seen=record.state.value, iso=_now_iso(), reason=reason)
        values.update(_history("unknown", record.owner, reason))
        names = {"#state": "state"}
        condition = "#state = :seen"
        if record.owner:
            condition += " AND #owner = :prev"
            names["#owner"] = "owner"
            values.update(_values(prev=record.owner))
        try:
            response = self._client.update_item(
                TableName=self._table,
                Key=self._key(record.key),
                UpdateExpression="SET #state = :unknown, reason = :reason, error_class = :ec, updated_at = :iso, " + _APPEND,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={**values, **_values(ec="stale")},
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return ClaimResult(ClaimStatus.HELD, record)
        return ClaimResult(ClaimStatus.FINAL, _record(response["Attributes"]), closed_as_unknown=True)

    def _fenced_update(self, key: DeliveryKey, *, owner: str, allowed: Iterable[str], update: str, values: dict) -> None:
        allowed = list(allowed)
        states = {f":s{i}": {"S": s} for i, s in enumerate(allowed)}
        try:
            self._client.update_item(
                TableName=self._table,
                Key=self._key(key),
                UpdateExpression=update,
                ConditionExpression=f"#owner = :me AND #state IN ({', '.join(states)})",
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
            allowed=["claimed"],
            update="SET #state = :in_flight, maybe_sent_at_ms = :now, updated_at = :iso, " + _APPEND,
            values=values,
        )

    def mark_sent(self, key: DeliveryKey, *, owner: str, receipt: Receipt) -> None:
        values = _values(sent="sent", mid=receipt.provider_message_id, iso=_now_iso())
        values.update(_history("sent", owner, receipt.provider_message_id))
        # 'unknown' is allowed too: a consumer that found this owner's in-flight claim
        # stale closed it as unknown; the owner's receipt resolves it.
        self._fenced_update(
            key,
            owner=owner,
            allowed=["claimed", "in_flight", "unknown"],
            update="SET #state = :sent, provider_message_id = :mid, updated_at = :iso, " + _APPEND
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
        clear_maybe_sent: bool = False,
        now_ms: int,
    ) -> None:
        values = _values(state=state.value, reason=reason[:500], ec=error_class, iso=_now_iso())
        values.update(_history(state.value, owner, f"{error_class}: {reason}"))
        update = "SET #state = :state, reason = :reason, error_class = :ec, updated_at = :iso, " + _APPEND
        remove = ["lease_until_ms"]
        if maybe_sent:
            update += ", maybe_sent_at_ms = if_not_exists(maybe_sent_at_ms, :now)"
            values.update(_values(now=now_ms))
        elif clear_maybe_sent:
            remove.append("maybe_sent_at_ms")
        update += " REMOVE " + ", ".join(remove)
        self._fenced_update(key, owner=owner, allowed=["claimed", "in_flight"], update=update, values=values)

    def close_unclaimed(
        self, campaign_id: str, recipient_ids: Iterable[str], *, state: DeliveryState, reason: str, batch_id: str
    ) -> int:
        moved = 0
        for recipient_id in recipient_ids:
            values = _values(state=state.value, reason=reason[:500], pending="pending", dead="dead_lettered",
                             iso=_now_iso(), batch=batch_id)
            values.update(_history(state.value, None, reason))
            try:
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(DeliveryKey(campaign_id=campaign_id, recipient_id=recipient_id)),
                    UpdateExpression="SET #state = :state, reason = :reason, updated_at = :iso,"
                    " batch_id = if_not_exists(batch_id, :batch), " + _APPEND,
                    ConditionExpression="attribute_not_exists(#state) OR #state IN (:pending, :dead)",
                    ExpressionAttributeNames={"#state": "state"},
                    ExpressionAttributeValues=values,
                )
                moved += 1
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
        return moved

    def get(self, key: DeliveryKey) -> DeliveryRecord | None:
        response = self._client.get_item(TableName=self._table, Key=self._key(key), ConsistentRead=True)
        item = response.get("Item")
        return _record(item) if item else None

    def records(self, campaign_id: str) -> Iterator[DeliveryRecord]:
        paginator = self._client.get_paginator("query")
        for page in paginator.paginate(
            TableName=self._table,
            KeyConditionExpression="campaign_id = :c",
            ExpressionAttributeValues={":c": {"S": campaign_id}},
            ConsistentRead=True,
        ):
            for item in page["Items"]:
                yield _record(item)

    def get_many(self, campaign_id: str, recipient_ids: list[str]) -> dict[str, DeliveryRecord]:
        found: dict[str, DeliveryRecord] = {}
        for start in range(0, len(recipient_ids), 100):
            keys = [self._key(DeliveryKey(campaign_id=campaign_id, recipient_id=r)) for r in recipient_ids[start : start + 100]]
            request = {self._table: {"Keys": keys, "ConsistentRead": True}}
            while request:
                response = self._client.batch_get_item(RequestItems=request)
                for item in response["Responses"].get(self._table, []):
                    record = _record(item)
                    found[record.recipient_id] = record
                request = response.get("UnprocessedKeys") or None
        return found

    def _transact(self, updates: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """One transaction; None on success, else the per-item cancellation reasons."""
        try:
            self._client.transact_write_items(TransactItems=[{"Update": {"TableName": self._table, **u}} for u in updates])
            return None
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = exc.response.get("CancellationReasons") or []
            if not any(r.get("Code") == "ConditionalCheckFailed" for r in reasons):
                raise
            return reasons

    def claim_group(
        self, group: SendGroup, payload_hashes: dict[str, str], *, owner: str, provider: str, lease_until_ms: int, now_ms: int
    ) -> GroupClaim:
        updates = []
        for recipient in group.recipients:
            values = _values(
                claimed="claimed", pending="pending", dead="dead_lettered", in_flight="in_flight", now=now_ms,
                owner=owner, lease=lease_until_ms, batch=group.group_id, provider=provider, g=group.idempotency_key,
                ph=payload_hashes[recipient.recipient_id], fp=email_fingerprint(recipient.email), iso=_now_iso(), one=1,
                cutoff=now_ms - IDEMPOTENCY_WINDOW_MS,
            )
            values.update(_history("claimed", owner, f"group {group.group_id}"))
            updates.append(
                {
                    "Key": self._key(DeliveryKey(campaign_id=group.campaign_id, recipient_id=recipient.recipient_id)),
                    # Claiming a group means its request may go out: maybe_sent is set now.
                    "UpdateExpression": (
                        "SET #state = :claimed, #owner = :owner, lease_until_ms = :lease, claimed_at_ms = :now,"
                        " batch_id = :batch, provider = :provider, group_key = :g,"
                        " maybe_sent_at_ms = if_not_exists(maybe_sent_at_ms, :now),"
                        " payload_hash = if_not_exists(payload_hash, :ph), email_fp = if_not_exists(email_fp, :fp),"
                        " updated_at = :iso, " + _APPEND + " ADD attempts :one"
                    ),
                    "ConditionExpression": f"{_GROUP_CLAIMABLE} AND {_SAME_PAYLOAD}",
                    "ExpressionAttributeNames": _NAMES,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
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
            if record.state in FINAL_STATES:
                final[record.recipient_id] = record
            elif record.lease_until_ms and record.lease_until_ms >= now_ms:
                held_until = max(held_until or 0, record.lease_until_ms)
        return GroupClaim(claimed=False, final=final, held_until_ms=held_until)

    def complete_group(self, group: SendGroup, *, owner: str, outcomes: dict[str, Receipt | str]) -> None:
        updates = []
        for recipient in group.recipients:
            outcome = outcomes[recipient.recipient_id]
            if isinstance(outcome, Receipt):
                values = _values(state="sent", mid=outcome.provider_message_id, iso=_now_iso(), me=owner, held="claimed")
                values.update(_history("sent", owner, outcome.provider_message_id))
                update = "SET #state = :state, provider_message_id = :mid, updated_at = :iso, " + _APPEND
                update += " REMOVE lease_until_ms, reason, error_class"
            else:
                values = _values(state="failed", reason=outcome[:500], ec="permanent", iso=_now_iso(), me=owner, held="claimed")
                values.update(_history("failed", owner, f"permanent: {outcome}"))
                update = "SET #state = :state, reason = :reason, error_class = :ec, updated_at = :iso, " + _APPEND
                update += " REMOVE lease_until_ms"
            updates.append(
                {
                    "Key": self._key(DeliveryKey(campaign_id=group.campaign_id, recipient_id=recipient.recipient_id)),
                    "UpdateExpression": update,
                    "ConditionExpression": "#owner = :me AND #state = :held",
                    "ExpressionAttributeNames": _NAMES,
                    "ExpressionAttributeValues": values,
                }
            )
        if self._transact(updates) is not None:
            raise LeaseLostError(f"group {group.group_id} is no longer owned by {owner}")

    def release_group(self, group: SendGroup, *, owner: str, state: DeliveryState, reason: str, error_class: str) -> None:
        updates = []
        for recipient in group.recipients:
            values = _values(state=state.value, reason=reason[:500], ec=error_class, iso=_now_iso(), me=owner, held="claimed")
            values.update(_history(state.value, owner, f"{error_class}: {reason}"))
            updates.append(
                {
                    "Key": self._key(DeliveryKey(campaign_id=group.campaign_id, recipient_id=recipient.recipient_id)),
                    "UpdateExpression": "SET #state = :state, reason = :reason, error_class = :ec, updated_at = :iso, "
                    + _APPEND + " REMOVE lease_until_ms",
                    "ConditionExpression": "#owner = :me AND #state = :held",
                    "ExpressionAttributeNames": _NAMES,
                    "ExpressionAttributeValues": values,
                }
            )
        if self._transact(updates) is not None:
            raise LeaseLostError(f"group {group.group_id} is no longer owned by {owner}")
