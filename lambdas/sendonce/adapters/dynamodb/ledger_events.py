"""Provider events on the ledger's items, and the per-campaign counters the brakes read.

Writes go to the same ledger item as DynamoDBLedger's, keyed by ledger_keys.py,
and touch only attributes the consumer never writes, except in two conditional moves:

    provider_events      list of {k: kind, t: its own time (else its arrival), epoch ms,
                         m?: the provider's message id (a `sent` only), d?: the recipient's
                         domain (for the report's outcomes by domain: not on a `sent`),
                         x?: detail}; written before 2026-12-07: {at, event, provider, id,
                         detail?, message_id?, occurred_at?, domain?}
    provider_event_ids   string set: the events applied, by `event_order.id_digest` (before
                         2026-12-07 by their ids); the dedup condition reads both
    last_event, last_event_order
                         the most advanced event recorded (domain/deliverability/event_order.py)
                         and its order key, which holds its own time (`event_order.time_of`);
                         moved only forward. Items written before 2026-12-07 also hold
                         last_event_at, that time in ISO 8601, no longer written.
    provider_sent_id     the provider's message id from its first 'sent' event
    unknown -> sent      resolve_unknown (condition: state = unknown)
    proven_not_sent_at, proven_not_sent_by
                         an audit found it absent from a complete provider listing
                         (prove_not_sent, condition: state = unknown, no provider_sent_id)
    unknown -> pending   reopen_unknown (condition: state = unknown, no provider_sent_id,
                         proven_not_sent_at, unless the operator accepts a possible duplicate)

The entries are short (one-letter names, no repeat of what the item holds: its provider,
the event ids in the set) so that a delivered recipient's item stays under 1 KB through
its `sent` and `delivered`, and each annotation costs one write unit, not two (issue 35;
tests/integration/test_ledger_item_size.py).

Counters live in the campaigns table, never on the campaign item (read by every batch):

    pk = campaign#<id>#sent#<k>, sk = deliverability#sent#<k>   sent   (one ADD per 'sent' event)
    pk = campaign#<id>, sk = deliverability#feedback   complaints, hard_bounces
    pk = campaign#<id>, sk = deliverability#sent       sent, counted by earlier versions

'sent' takes a write per recipient: it is spread over SENT_SHARDS items, each its own
partition-key value, k from a hash of the recipient id, and summed where it is read.

An event is recorded with one conditional write that also moves `last_event` when the event
is ahead of it; when only that second condition fails (an older event arriving late), the
same write is made again without touching `last_event`. Either way it is recorded and
counted once, whatever the order of arrival.

A complaint or hard bounce is annotated and counted in one transaction, so a retried
event can neither count twice nor be lost between the two writes. 'sent' is counted with
a plain ADD after its annotation (it is the hot path: a transaction per send on one item
would conflict); a crash between the two can only undercount sends, which makes the
brakes stricter, never looser.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import time
from collections.abc import Iterable, Iterator
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb.ledger_keys import LedgerKeys, ShardsOf
from sendonce.domain.deliverability import event_order
from sendonce.domain.deliverability.ports import (
    Annotation,
    AnnotationStatus,
    CampaignFeedback,
    EventKind,
    FeedbackCounter,
    ProviderEvent,
    ReopenReport,
    UnknownDelivery,
)
from sendonce.domain.models import DeliveryKey, DeliveryState
from sendonce.domain.sending import delivery_tables
from sendonce.domain.sending.delivery_tables import Event

_ser = TypeSerializer()
_de = TypeDeserializer()

SENT_COUNTER_SK = "deliverability#sent"
# One item takes at most 1,000 write units/s, so one 'sent' counter capped a campaign at
# 1,000 recipients/s. 16 shards: 16,000/s, above the 10,000/s a campaign is designed for,
# each shard taking 1/16 = 0.0625 write units per recipient (the goal is <= 0.1); reading
# them is one BatchGetItem of 16 small items (16 read units), done only by the brakes.
SENT_SHARDS = 16
SENT_READ_ATTEMPTS = 5


def sent_shard(recipient_id: str) -> int:
    return int.from_bytes(hashlib.sha256(recipient_id.encode()).digest()[:4], "big") % SENT_SHARDS


FEEDBACK_COUNTER_SK = "deliverability#feedback"

_APPEND_EVENT = "provider_events = list_append(if_not_exists(provider_events, :empty), :entry)"
_APPEND_HISTORY = "history = list_append(if_not_exists(history, :empty), :hentry)"
_NOT_APPLIED = (
    "attribute_exists(#state) AND NOT contains(provider_event_ids, :eid) AND NOT contains(provider_event_ids, :edig)"
)
# Ahead of the recorded last event; an item recorded before order keys existed compares by rank.
_AHEAD = (
    "(last_event_order < :order OR (attribute_not_exists(last_event_order)"
    " AND (attribute_not_exists(last_event) OR last_event IN ({kinds}))))"
)


# Only an unknown an audit proved absent at the provider is reopened (tests/model/mutants.py
# removes this guard: an unknown the provider had is sent a second time).
_PROVEN_ABSENT = " AND attribute_exists(proven_not_sent_at)"


class _ConditionFailedError(Exception):
    def __init__(self, item: dict[str, Any] | None):
        super().__init__("condition failed")
        self.item = item


def _only_source(event: Event) -> str:
    """The one state the delivery protocol lets `event` start from."""
    (source,) = delivery_tables.sources(event)
    return source


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _ms(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)
    except ValueError:
        return None


def _state(item: dict[str, Any] | None) -> DeliveryState | None:
    if not item or "state" not in item:
        return None
    return DeliveryState(item["state"]["S"])


def _s(item: dict[str, Any], name: str) -> str | None:
    return item.get(name, {}).get("S")


class DynamoDBLedgerEvents:
    def __init__(self, *, client: Any, ledger_table: str, campaigns_table: str, shards_of: ShardsOf):
        self._client = client
        self._ledger = ledger_table
        self._campaigns = campaigns_table
        self._keys = LedgerKeys(shards_of)

    def _key(self, key: DeliveryKey) -> dict[str, Any]:
        return self._keys.key(key)

    @staticmethod
    def _counter_key(campaign_id: str, sk: str) -> dict[str, Any]:
        return {"pk": {"S": f"campaign#{campaign_id}"}, "sk": {"S": sk}}

    def _annotation_update(self, event: ProviderEvent, *, advance: bool) -> dict[str, Any]:
        """The conditional write recording `event` once; with `advance`, also as the
        delivery's last event, on condition that it is ahead of the one recorded."""
        now = _now_iso()
        at_ms = event_order.occurred_ms(event)
        entry: dict[str, Any] = {"k": event.kind.value, "t": at_ms if at_ms is not None else _ms(now)}
        if event.kind is EventKind.SENT:
            if event.message_id:
                entry["m"] = event.message_id
        elif event.addresses and "@" in event.addresses[0]:
            # The mailbox provider, for the report's outcomes by domain; the address itself
            # is never stored.
            entry["d"] = event.addresses[0].rsplit("@", 1)[1].lower()[:253]
        if event.detail:
            entry["x"] = event.detail[:200]
        digest = event_order.id_digest(event.event_id)
        sets = [_APPEND_EVENT]
        condition = _NOT_APPLIED
        values: dict[str, Any] = {
            ":entry": {"L": [_ser.serialize(entry)]},
            ":empty": {"L": []},
            ":eid": {"S": event.event_id},
            ":edig": {"S": digest},
            ":eids": {"SS": [digest]},
        }
        if advance:
            sets += ["last_event = :kind", "last_event_order = :order"]
            kinds = event_order.kinds_not_above(event.kind)
            condition += " AND " + _AHEAD.format(kinds=", ".join(f":k{i}" for i in range(len(kinds))))
            values.update({f":k{i}": {"S": kind.value} for i, kind in enumerate(kinds)})
            values[":kind"] = {"S": event.kind.value}
            values[":order"] = {"S": event_order.order_key(event)}
        if event.kind is EventKind.SENT and event.message_id:
            sets.append("provider_sent_id = if_not_exists(provider_sent_id, :mid)")
            values[":mid"] = {"S": event.message_id}
        return {
            "TableName": self._ledger,
            "Key": self._key(event.key),
            "UpdateExpression": "SET " + ", ".join(sets) + " ADD provider_event_ids :eids",
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#state": "state"},
            "ExpressionAttributeValues": values,
        }

    def _not_applied(self, key: DeliveryKey, old: dict[str, Any] | None) -> Annotation:
        if old is None:
            # Not every DynamoDB (or moto) returns the old item with the failure: read it.
            old = self._read(key)
        if not old or "state" not in old:
            return Annotation(AnnotationStatus.NO_DELIVERY)
        return Annotation(AnnotationStatus.DUPLICATE, state=_state(old), provider=_s(old, "provider"))

    def _read(self, key: DeliveryKey) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self._client.get_item(
            TableName=self._ledger, Key=self._key(key), ConsistentRead=True
        ).get("Item")
        return item

    def annotate(self, event: ProviderEvent, *, counter: FeedbackCounter | None = None) -> Annotation:
        key = event.key
        if key is None:
            return Annotation(AnnotationStatus.NO_DELIVERY)
        try:
            return self._write(event, key, counter, advance=True)
        except _ConditionFailedError as failed:
            old = failed.item if failed.item is not None else self._read(key)
        applied = old.get("provider_event_ids", {}).get("SS", []) if old else []
        if not old or "state" not in old or {event.event_id, event_order.id_digest(event.event_id)} & set(applied):
            return self._not_applied(key, old)
        # Not recorded yet, only behind the last event (it arrived late): record it alone.
        try:
            return self._write(event, key, counter, advance=False)
        except _ConditionFailedError as failed:
            return self._not_applied(key, failed.item)

    def _write(
        self, event: ProviderEvent, key: DeliveryKey, counter: FeedbackCounter | None, *, advance: bool
    ) -> Annotation:
        """One attempt; raises _ConditionFailedError (with the old item when the store returns it)."""
        update = self._annotation_update(event, advance=advance)
        if counter is None:
            try:
                response = self._client.update_item(
                    **update, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                raise _ConditionFailedError(exc.response.get("Item")) from None
            item = response["Attributes"]
            return Annotation(AnnotationStatus.APPLIED, state=_state(item), provider=_s(item, "provider"))
        try:
            self._client.transact_write_items(
                TransactItems=[
                    {"Update": {**update, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
                    {
                        "Update": {
                            "TableName": self._campaigns,
                            "Key": self._counter_key(key.campaign_id, FEEDBACK_COUNTER_SK),
                            "UpdateExpression": "SET updated_at = :at ADD #counter :one",
                            "ExpressionAttributeNames": {"#counter": FeedbackCounter(counter).value},
                            "ExpressionAttributeValues": {":one": {"N": "1"}, ":at": {"S": _now_iso()}},
                        }
                    },
                ]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = exc.response.get("CancellationReasons", [])
            if not reasons or reasons[0].get("Code") != "ConditionalCheckFailed":
                raise  # a conflict or throttle: the provider's retry applies it
            raise _ConditionFailedError(reasons[0].get("Item")) from None
        return Annotation(AnnotationStatus.APPLIED)

    @staticmethod
    def _sent_key(campaign_id: str, shard: int) -> dict[str, Any]:
        return {"pk": {"S": f"campaign#{campaign_id}#sent#{shard}"}, "sk": {"S": f"{SENT_COUNTER_SK}#{shard}"}}

    def count_sent(self, campaign_id: str, recipient_id: str) -> None:
        self._client.update_item(
            TableName=self._campaigns,
            Key=self._sent_key(campaign_id, sent_shard(recipient_id)),
            UpdateExpression="ADD sent :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )

    def feedback(self, campaign_id: str) -> CampaignFeedback:
        # The feedback counter (and an earlier version's single 'sent' counter) in the
        # campaign's partition, then the 'sent' shards in one BatchGetItem.
        items = list(
            self._client.get_paginator("query")
            .paginate(
                TableName=self._campaigns,
                KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                ExpressionAttributeValues={
                    ":pk": {"S": f"campaign#{campaign_id}"},
                    ":prefix": {"S": "deliverability#"},
                },
                ConsistentRead=True,
            )
            .search("Items[]")
        )
        request: dict[str, Any] = {
            self._campaigns: {
                "Keys": [self._sent_key(campaign_id, k) for k in range(SENT_SHARDS)],
                "ConsistentRead": True,
            }
        }
        for attempt in range(SENT_READ_ATTEMPTS):
            if attempt:
                time.sleep(random.random() * 0.05 * 2**attempt)
            response = self._client.batch_get_item(RequestItems=request)
            items.extend(response.get("Responses", {}).get(self._campaigns, []))
            request = response.get("UnprocessedKeys") or {}
            if not request:
                break
        else:
            # A partial sum would overstate the complaint and bounce rates the brakes act on.
            raise RuntimeError(f"campaign {campaign_id!r}: 'sent' counter shards left unprocessed")
        totals = {"sent": 0, "complaints": 0, "hard_bounces": 0}
        for item in items:
            for name in totals:
                if name in item:
                    totals[name] += int(item[name]["N"])
        return CampaignFeedback(**totals)

    def resolve_unknown(self, key: DeliveryKey, *, provider_message_id: str, detail: str) -> bool:
        now = _now_iso()
        try:
            self._client.update_item(
                TableName=self._ledger,
                Key=self._key(key),
                UpdateExpression=(
                    "SET #state = :sent, provider_message_id = :mid, updated_at = :at, "
                    + _APPEND_HISTORY
                    + " REMOVE reason, error_class, lease_until_ms"
                ),
                ConditionExpression="#state = :unknown",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":sent": {"S": delivery_tables.transition(Event.PROVIDER_SENT).target.value},
                    ":unknown": {"S": _only_source(Event.PROVIDER_SENT)},
                    ":mid": {"S": provider_message_id},
                    ":at": {"S": now},
                    ":empty": {"L": []},
                    ":hentry": {
                        "L": [
                            _ser.serialize(
                                {"at": now, "event": "sent", "detail": f"{detail} ({provider_message_id})"[:500]}
                            )
                        ]
                    },
                },
            )
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise

    def unknowns(self, campaign_id: str) -> Iterator[UnknownDelivery]:
        for item in self._keys.query_campaign(self._client, self._ledger, campaign_id, **_UNKNOWNS):
            yield _unknown(item)

    def unknowns_page(
        self, campaign_id: str, cursor: str | None, limit: int
    ) -> tuple[list[UnknownDelivery], str | None]:
        items, following = self._keys.query_page(self._client, self._ledger, campaign_id, cursor, limit, **_UNKNOWNS)
        return [_unknown(item) for item in items], following

    def prove_not_sent(self, key: DeliveryKey, *, audit: str) -> bool:
        now = _now_iso()
        try:
            self._client.update_item(
                TableName=self._ledger,
                Key=self._key(key),
                UpdateExpression="SET proven_not_sent_at = :at, proven_not_sent_by = :audit, " + _APPEND_HISTORY,
                ConditionExpression="#state = :unknown AND attribute_not_exists(provider_sent_id)",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":unknown": {"S": _only_source(Event.PROVE_NOT_SENT)},
                    ":audit": {"S": audit[:200]},
                    ":at": {"S": now},
                    ":empty": {"L": []},
                    ":hentry": {
                        "L": [
                            _ser.serialize(
                                {
                                    "at": now,
                                    "event": Event.PROVE_NOT_SENT.value,
                                    "detail": f"absent from the provider's complete listing ({audit})"[:500],
                                }
                            )
                        ]
                    },
                },
            )
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise

    def reopen_unknown(
        self, campaign_id: str, recipient_ids: Iterable[str], *, by: str, accept_possible_duplicates: bool = False
    ) -> ReopenReport:
        report = ReopenReport()
        proof = "" if accept_possible_duplicates else _PROVEN_ABSENT
        for recipient_id in recipient_ids:
            key = DeliveryKey(campaign_id=campaign_id, recipient_id=recipient_id)
            now = _now_iso()
            reason = (
                f"unknown outcome reopened by {by}; may be sent a second time"
                if accept_possible_duplicates
                else f"unknown outcome proven not sent, reopened by {by}"
            )
            try:
                self._client.update_item(
                    TableName=self._ledger,
                    Key=self._key(key),
                    UpdateExpression=(
                        "SET #state = :pending, reason = :reason, updated_at = :at, reopened_by = :by, reopened_at = :at, "
                        + _APPEND_HISTORY
                        + " REMOVE maybe_sent_at_ms, maybe_sent_by, group_key, lease_until_ms, error_class,"
                        " proven_not_sent_at, proven_not_sent_by"
                    ),
                    ConditionExpression="#state = :unknown AND attribute_not_exists(provider_sent_id)" + proof,
                    ExpressionAttributeNames={"#state": "state"},
                    ExpressionAttributeValues={
                        ":pending": {"S": delivery_tables.transition(Event.REOPEN_UNKNOWN).target.value},
                        ":unknown": {"S": _only_source(Event.REOPEN_UNKNOWN)},
                        ":reason": {"S": reason[:500]},
                        ":by": {"S": by[:200]},
                        ":at": {"S": now},
                        ":empty": {"L": []},
                        ":hentry": {
                            "L": [
                                _ser.serialize(
                                    {"at": now, "event": "reopened", "owner": by[:200], "detail": reason[:500]}
                                )
                            ]
                        },
                    },
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                report.reopened.append(recipient_id)
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                old = exc.response.get("Item") or self._client.get_item(
                    TableName=self._ledger, Key=self._key(key), ConsistentRead=True
                ).get("Item")
                evidence = _s(old or {}, "provider_sent_id")
                if _state(old) is DeliveryState.UNKNOWN and evidence:
                    self.resolve_unknown(
                        key, provider_message_id=evidence, detail="confirmed by an earlier provider 'sent' event"
                    )
                    report.confirmed_sent.append(recipient_id)
                else:
                    report.skipped.append(recipient_id)
        return report


# A campaign's unknown deliveries: its ledger items in state unknown, with what decides them.
_UNKNOWNS: dict[str, Any] = {
    "FilterExpression": "#state = :unknown",
    "ProjectionExpression": "recipient_id, provider, updated_at, reason, email_fp, provider_sent_id, proven_not_sent_at",
    "ExpressionAttributeNames": {"#state": "state"},
    "ExpressionAttributeValues": {":unknown": {"S": DeliveryState.UNKNOWN.value}},
    "ConsistentRead": True,
}


def _unknown(item: dict[str, Any]) -> UnknownDelivery:
    return UnknownDelivery(
        recipient_id=item["recipient_id"]["S"],
        provider=_s(item, "provider"),
        since_ms=_ms(_s(item, "updated_at")),
        reason=_s(item, "reason"),
        email_fingerprint=_s(item, "email_fp"),
        confirmed_message_id=_s(item, "provider_sent_id"),
        proven_not_sent="proven_not_sent_at" in item,
    )
