"""Provider events on the ledger's items, and the per-campaign counters the brakes read.

Writes go to the same ledger item as DynamoDBLedger's, keyed by ledger_keys.py,
and touch only attributes the consumer never writes, except in two conditional moves:

    provider_events      list of {at, event, provider, id, detail?, message_id?}
    provider_event_ids   string set: the ids applied; the dedup condition reads it
    last_event, last_event_at
    provider_sent_id     the provider's message id from its first 'sent' event
    unknown -> sent      resolve_unknown (condition: state = unknown)
    unknown -> pending   reopen_unknown (condition: state = unknown, no provider_sent_id)

Counters live in the campaigns table, in the campaign's partition but not on the campaign
item (which carries the templates and is read by every batch):

    pk = campaign#<id>, sk = deliverability#sent       sent        (one ADD per 'sent' event)
    pk = campaign#<id>, sk = deliverability#feedback   complaints, hard_bounces

A complaint or hard bounce is annotated and counted in one transaction, so a retried
event can neither count twice nor be lost between the two writes. 'sent' is counted with
a plain ADD after its annotation (it is the hot path: a transaction per send on one item
would conflict); a crash between the two can only undercount sends, which makes the
brakes stricter, never looser.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb.ledger_keys import LedgerKeys, ShardsOf
from sendonce.domain.models import DeliveryKey, DeliveryState
from sendonce.domain.ports import (
    Annotation,
    AnnotationStatus,
    CampaignFeedback,
    EventKind,
    FeedbackCounter,
    ProviderEvent,
    ReopenReport,
    UnknownDelivery,
)
from sendonce.domain.sending import protocol
from sendonce.domain.sending.protocol import Event

_ser = TypeSerializer()
_de = TypeDeserializer()

SENT_COUNTER_SK = "deliverability#sent"
FEEDBACK_COUNTER_SK = "deliverability#feedback"

_APPEND_EVENT = "provider_events = list_append(if_not_exists(provider_events, :empty), :entry)"
_APPEND_HISTORY = "history = list_append(if_not_exists(history, :empty), :hentry)"
_NOT_APPLIED = "attribute_exists(#state) AND NOT contains(provider_event_ids, :eid)"


def _only_source(event: Event) -> str:
    """The one state the delivery protocol lets `event` start from."""
    (source,) = protocol.sources(event)
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

    def _annotation_update(self, event: ProviderEvent) -> dict[str, Any]:
        now = _now_iso()
        entry: dict[str, Any] = {"at": now, "event": event.kind.value, "provider": event.provider, "id": event.event_id}
        if event.detail:
            entry["detail"] = event.detail[:200]
        if event.message_id:
            entry["message_id"] = event.message_id
        if event.occurred_at:
            entry["occurred_at"] = event.occurred_at
        sets = [_APPEND_EVENT, "last_event = :kind", "last_event_at = :at"]
        values = {
            ":entry": {"L": [_ser.serialize(entry)]},
            ":empty": {"L": []},
            ":kind": {"S": event.kind.value},
            ":at": {"S": now},
            ":eid": {"S": event.event_id},
            ":eids": {"SS": [event.event_id]},
        }
        if event.kind is EventKind.SENT and event.message_id:
            sets.append("provider_sent_id = if_not_exists(provider_sent_id, :mid)")
            values[":mid"] = {"S": event.message_id}
        return {
            "TableName": self._ledger,
            "Key": self._key(event.key),
            "UpdateExpression": "SET " + ", ".join(sets) + " ADD provider_event_ids :eids",
            "ConditionExpression": _NOT_APPLIED,
            "ExpressionAttributeNames": {"#state": "state"},
            "ExpressionAttributeValues": values,
        }

    def _not_applied(self, key: DeliveryKey, old: dict[str, Any] | None) -> Annotation:
        if old is None:
            # Not every DynamoDB (or moto) returns the old item with the failure: read it.
            old = self._client.get_item(TableName=self._ledger, Key=self._key(key), ConsistentRead=True).get("Item")
        if not old or "state" not in old:
            return Annotation(AnnotationStatus.NO_DELIVERY)
        return Annotation(AnnotationStatus.DUPLICATE, state=_state(old), provider=_s(old, "provider"))

    def annotate(self, event: ProviderEvent, *, counter: FeedbackCounter | None = None) -> Annotation:
        key = event.key
        if key is None:
            return Annotation(AnnotationStatus.NO_DELIVERY)
        update = self._annotation_update(event)
        if counter is None:
            try:
                response = self._client.update_item(
                    **update, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                return self._not_applied(key, exc.response.get("Item"))
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
            return self._not_applied(key, reasons[0].get("Item"))
        return Annotation(AnnotationStatus.APPLIED)

    def count_sent(self, campaign_id: str) -> None:
        self._client.update_item(
            TableName=self._campaigns,
            Key=self._counter_key(campaign_id, SENT_COUNTER_SK),
            UpdateExpression="ADD sent :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )

    def feedback(self, campaign_id: str) -> CampaignFeedback:
        response = self._client.query(
            TableName=self._campaigns,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": {"S": f"campaign#{campaign_id}"}, ":prefix": {"S": "deliverability#"}},
            ConsistentRead=True,
        )
        totals = {"sent": 0, "complaints": 0, "hard_bounces": 0}
        for item in response["Items"]:
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
                    ":sent": {"S": protocol.transition(Event.PROVIDER_SENT).target.value},
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
        for item in self._keys.query_campaign(
            self._client,
            self._ledger,
            campaign_id,
            FilterExpression="#state = :unknown",
            ProjectionExpression="recipient_id, provider, updated_at, reason, email_fp, provider_sent_id",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={":unknown": {"S": DeliveryState.UNKNOWN.value}},
            ConsistentRead=True,
        ):
            yield UnknownDelivery(
                recipient_id=item["recipient_id"]["S"],
                provider=_s(item, "provider"),
                since_ms=_ms(_s(item, "updated_at")),
                reason=_s(item, "reason"),
                email_fingerprint=_s(item, "email_fp"),
                confirmed_message_id=_s(item, "provider_sent_id"),
            )

    def reopen_unknown(self, campaign_id: str, recipient_ids: Iterable[str], *, by: str) -> ReopenReport:
        report = ReopenReport()
        for recipient_id in recipient_ids:
            key = DeliveryKey(campaign_id=campaign_id, recipient_id=recipient_id)
            now = _now_iso()
            reason = f"unknown outcome reopened by {by}; may be sent a second time"
            try:
                self._client.update_item(
                    TableName=self._ledger,
                    Key=self._key(key),
                    UpdateExpression=(
                        "SET #state = :pending, reason = :reason, updated_at = :at, reopened_by = :by, reopened_at = :at, "
                        + _APPEND_HISTORY
                        + " REMOVE maybe_sent_at_ms, maybe_sent_by, group_key, lease_until_ms, error_class"
                    ),
                    ConditionExpression="#state = :unknown AND attribute_not_exists(provider_sent_id)",
                    ExpressionAttributeNames={"#state": "state"},
                    ExpressionAttributeValues={
                        ":pending": {"S": protocol.transition(Event.REOPEN_UNKNOWN).target.value},
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
