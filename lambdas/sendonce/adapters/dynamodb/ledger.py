"""The delivery ledger on DynamoDB: one item per (campaign_id, recipient_id), its partition-key
value spread over the campaign's shards (ledger_keys.py).

The claim condition is derived from `sendonce.domain.sending.protocol.CLAIM_RULES`, so a claim
is one atomic conditional write; a failed claim returns the old item
(ReturnValuesOnConditionCheckFailure=ALL_OLD), which the same rules classify without
another read. Every later write is conditional on the owner that claimed and on the
source states `protocol.TRANSITIONS` allows for it.

Over 500 lines on purpose: one port's one adapter, every conditional write of the protocol
side by side, where a reviewer and the row-by-row equivalence test
(tests/integration/test_ledger_protocol.py) compare them with the transition table. Its keys
(ledger_keys.py) and its reads for events (ledger_events.py) are modules of their own.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
from collections.abc import Iterable, Iterator
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb.ledger_keys import LedgerKeys, ShardsOf, campaign_id_of
from sendonce.domain.errors import LeaseLostError
from sendonce.domain.models import (
    DeliveryKey,
    DeliveryRecord,
    DeliveryRequest,
    DeliveryState,
    Receipt,
    SendGroup,
    email_fingerprint,
)
from sendonce.domain.ports import ClaimResult, ClaimStatus, GroupClaim
from sendonce.domain.sending import protocol
from sendonce.domain.sending.protocol import IDEMPOTENCY_WINDOW_MS, Event, Verdict, classify

logger = logging.getLogger(__name__)

_ser = TypeSerializer()
_de = TypeDeserializer()

_NAMES = {"#state": "state", "#owner": "owner"}


# --- the claim condition, derived from protocol.CLAIM_RULES ------------------
# Each fact of a rule becomes a condition fragment that is exactly as true of an item as
# `protocol.facts` is of its record (a comparison with a missing attribute is
# false in DynamoDB, so each fragment states the missing case explicitly). "The first
# matching rule says claim" is then: OR over the claim rules of (it matches AND no earlier
# rule that could match does). tests/integration/test_ledger_protocol.py runs every
# combination of facts through both this condition and `classify` on moto.

_STATE_VALUES = {state: f":st_{state.value}" for state in DeliveryState}


def _wrapped(expr: str) -> bool:
    if not expr.startswith("("):
        return False
    depth = 0
    for i, char in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i == len(expr) - 1
    return False


def _group(expr: str) -> str:
    """Parenthesised only when compound (DynamoDB refuses redundant parentheses)."""
    return f"({expr})" if (" OR " in expr or " AND " in expr) and not _wrapped(expr) else expr


def _all(parts: list[str]) -> str:
    return " AND ".join(_group(p) for p in parts)


def _states_fragment(states: frozenset | None) -> str | None:
    if states is None:
        return None
    parts = []
    if protocol.ABSENT in states:
        parts.append("attribute_not_exists(#state)")
    present = sorted(s.value for s in states if s is not None)
    if present:
        parts.append(f"#state IN ({', '.join(':st_' + v for v in present)})")
    return " OR ".join(parts)


def _fact_fragments(rule: protocol.ClaimRule, group_key: str | None) -> list[str]:
    parts = []
    if (states := _states_fragment(rule.states)) is not None:
        parts.append(states)
    if rule.same_payload is True:
        parts.append("attribute_not_exists(payload_hash) OR payload_hash = :ph")
    elif rule.same_payload is False:
        parts.append("attribute_exists(payload_hash) AND payload_hash <> :ph")
    if rule.lease is protocol.Lease.LIVE:
        parts.append("lease_until_ms >= :now")
    elif rule.lease is protocol.Lease.EXPIRED:
        parts.append("attribute_not_exists(lease_until_ms) OR lease_until_ms < :now")
    if rule.maybe_sent is protocol.MaybeSent.NO:
        parts.append("attribute_not_exists(maybe_sent_at_ms)")
    elif rule.maybe_sent is protocol.MaybeSent.FRESH:
        parts.append("maybe_sent_at_ms > :cutoff")
    elif rule.maybe_sent is protocol.MaybeSent.OLD:
        parts.append("maybe_sent_at_ms <= :cutoff")
    if rule.group is not None:
        other_key = (
            "(attribute_not_exists(group_key) OR group_key <> :g)" if group_key else "attribute_exists(group_key)"
        )
        other = f"attribute_exists(maybe_sent_at_ms) AND {other_key}"
        parts.append(other if rule.group is protocol.Group.OTHER else f"NOT ({other})")
    return parts


def _may_overlap(a: protocol.ClaimRule, b: protocol.ClaimRule) -> bool:
    return a.states is None or b.states is None or bool(a.states & b.states)


def claim_condition(*, keyed: bool, group_key: str | None) -> str:
    """The condition under which the first matching claim rule says claim. It depends on the
    rules, the provider's kind and whether the caller is a group (the key itself is a
    placeholder), so it is built once per combination, not on every claim."""
    return _claim_condition(protocol.CLAIM_RULES, keyed, bool(group_key))


@functools.lru_cache(maxsize=16)
def _claim_condition(rules_table: tuple, keyed: bool, grouped: bool) -> str:
    group_key = ":g" if grouped else None
    rules = [r for r in rules_table if r.keyed is None or r.keyed == keyed]
    alternatives = []
    for i, rule in enumerate(rules):
        if rule.verdict is not protocol.Verdict.CLAIM:
            continue
        parts = _fact_fragments(rule, group_key)
        for earlier in rules[:i]:
            if _may_overlap(earlier, rule):
                inner = _all(_fact_fragments(earlier, group_key))
                parts.append(f"NOT {inner}" if _wrapped(inner) else f"NOT ({inner})")
        alternatives.append(_all(parts))
    return " OR ".join(_group(a) for a in alternatives)


def _claim_values(condition: str) -> dict[str, Any]:
    """The state placeholders a derived condition uses."""
    return {name: {"S": state.value} for state, name in _STATE_VALUES.items() if name in condition}


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _values(**values: Any) -> dict[str, Any]:
    return {f":{name}": _ser.serialize(value) for name, value in values.items()}


def _record(item: dict[str, Any]) -> DeliveryRecord:
    data = {k: _de.deserialize(v) for k, v in item.items()}
    return DeliveryRecord(
        campaign_id=campaign_id_of(item),
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
        maybe_sent_at_ms=_int(data.get("maybe_sent_at_ms")),
        maybe_sent_by=data.get("maybe_sent_by"),
        group_key=data.get("group_key"),
        updated_at=data.get("updated_at"),
        history=[{k: (int(v) if k.endswith("_ms") else v) for k, v in h.items()} for h in data.get("history", [])],
    )


def _used(values: dict[str, Any], *expressions: str) -> dict[str, Any]:
    """Only the placeholders the expressions name (DynamoDB refuses unused ones)."""
    text = " ".join(expressions)
    return {name: value for name, value in values.items() if re.search(re.escape(name) + r"\b", text)}


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


_LIFT = "maybe_sent_at_ms, maybe_sent_by, group_key"
# Only the owner whose attempt set the mark may lift it (a refusal seen by a later owner
# says nothing of an earlier owner's request).
_LIFT_GUARD = " AND maybe_sent_by = :me"
# The mark keeps the *first* possibly accepted attempt: the key's 24 h count from there.
_FIRST_MARK = "if_not_exists(maybe_sent_at_ms, :now)"


class DynamoDBLedger:
    def __init__(self, *, client: Any, table_name: str, shards_of: ShardsOf):
        self._client = client
        self._table = table_name
        self._keys = LedgerKeys(shards_of)

    def _key(self, key: DeliveryKey) -> dict[str, Any]:
        return self._keys.key(key)

    def _claim_update(
        self,
        *,
        owner: str,
        lease_until_ms: int,
        now_ms: int,
        batch_id: str,
        provider: str,
        payload_hash: str,
        email: str,
        keyed: bool,
        group_key: str | None,
        detail: str | None = None,
    ) -> dict[str, Any]:
        """The UpdateItem parameters of a claim (one delivery, or one member of a group)."""
        condition = claim_condition(keyed=keyed, group_key=group_key)
        values = _values(
            claimed="claimed",
            now=now_ms,
            owner=owner,
            lease=lease_until_ms,
            batch=batch_id,
            provider=provider,
            ph=payload_hash,
            fp=email_fingerprint(email),
            iso=_now_iso(),
            one=1,
            cutoff=now_ms - IDEMPOTENCY_WINDOW_MS,
        )
        values.update(_claim_values(condition))
        values.update(_history("claimed", owner, detail))
        update = (
            "SET #state = :claimed, #owner = :owner, lease_until_ms = :lease,"
            " batch_id = :batch, provider = :provider, payload_hash = if_not_exists(payload_hash, :ph),"
            " email_fp = if_not_exists(email_fp, :fp), updated_at = :iso, " + _APPEND
        )
        if keyed:
            # From the claim on, the provider may accept this delivery's request.
            update += f", maybe_sent_at_ms = {_FIRST_MARK}, maybe_sent_by = if_not_exists(maybe_sent_by, :owner)"
        if group_key:
            update += ", group_key = :g"
            values.update(_values(g=group_key))
        update += " ADD attempts :one"
        return {
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": _NAMES,
            "ExpressionAttributeValues": _used(values, update, condition),
        }

    def claim(self, request: DeliveryRequest, *, payload_hash: str, lease_until_ms: int, now_ms: int) -> ClaimResult:
        params = self._claim_update(
            owner=request.owner,
            lease_until_ms=lease_until_ms,
            now_ms=now_ms,
            batch_id=request.batch_id,
            provider=request.provider,
            payload_hash=payload_hash,
            email=request.email,
            keyed=request.provider_idempotent,
            group_key=None,
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
        transition = protocol.transition(event)
        key = key or record.key
        values = _values(to=transition.target.value, iso=_now_iso(), reason=reason[:500], ec=event.value, now=now_ms)
        values.update(_history(transition.target.value, record.owner if record else None, reason))
        names = {"#state": "state"}
        update = "SET #state = :to, reason = :reason, error_class = :ec, updated_at = :iso, " + _APPEND
        if record is None:
            if protocol.ABSENT not in transition.sources:
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
            if record.state in protocol.HELD:
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
        states = {f":s{i}": {"S": s} for i, s in enumerate(protocol.sources(event))}
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
        event = protocol.settle_event(state, maybe_sent=maybe_sent)
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
                    extra=_LIFT_GUARD,
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
        states = {f":s{i}": {"S": s} for i, s in enumerate(protocol.sources(event))}
        condition = f"#state IN ({', '.join(states)})"
        if protocol.allows_absent(event):
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

    def get(self, key: DeliveryKey) -> DeliveryRecord | None:
        response = self._client.get_item(TableName=self._table, Key=self._key(key), ConsistentRead=True)
        item = response.get("Item")
        return _record(item) if item else None

    def records(self, campaign_id: str) -> Iterator[DeliveryRecord]:
        for item in self._keys.query_campaign(self._client, self._table, campaign_id, ConsistentRead=True):
            yield _record(item)

    def records_page(self, campaign_id: str, cursor: str | None, limit: int) -> tuple[list[DeliveryRecord], str | None]:
        items, following = self._keys.query_page(
            self._client, self._table, campaign_id, cursor, limit, ConsistentRead=True
        )
        return [_record(item) for item in items], following

    def get_many(self, campaign_id: str, recipient_ids: list[str]) -> dict[str, DeliveryRecord]:
        found: dict[str, DeliveryRecord] = {}
        for start in range(0, len(recipient_ids), 100):
            keys = [
                self._key(DeliveryKey(campaign_id=campaign_id, recipient_id=r))
                for r in recipient_ids[start : start + 100]
            ]
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
    ) -> GroupClaim:
        updates = []
        for recipient in group.recipients:
            params = self._claim_update(
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
            if record.state in protocol.FINAL:
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
        states = {f":s{i}": {"S": s} for i, s in enumerate(protocol.sources(event))}
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
        event = protocol.settle_event(state, maybe_sent=not refused)
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
                        extra=_LIFT_GUARD if lift else "",
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
