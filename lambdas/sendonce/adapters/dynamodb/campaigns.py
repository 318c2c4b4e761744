"""Campaigns and their published batches in one DynamoDB table (pk, sk).

    pk = campaign#<id>, sk = campaign        the campaign (state, content, counts)
    pk = campaign#<id>, sk = batch#<batch>   one published batch: its body and whether it reached SQS
    pk = campaign#<id>, sk = group#<group>   batch mode: one send group's frozen membership

There is no index by state: `list` scans the table (docs/api.md says what that costs).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from sendonce.domain.errors import CampaignNotFoundError, IllegalTransitionError
from sendonce.domain.models import BatchMessage, Campaign, CampaignState, SendGroup
from sendonce.domain.ports import BatchStatus
from sendonce.domain.sending.shards import LEGACY_LEDGER_SHARDS

_ser = TypeSerializer()
_de = TypeDeserializer()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _pk(campaign_id: str) -> dict[str, Any]:
    return {"S": f"campaign#{campaign_id}"}


def _campaign(item: dict[str, Any]) -> Campaign:
    data = {k: _de.deserialize(v) for k, v in item.items() if k not in ("pk", "sk")}
    data.pop("total", None)  # stored by earlier versions; status counts recipients from the ledger
    for name in ("open_batches", "version", "publishing_until_ms", "ledger_shards"):
        if name in data:
            data[name] = int(data[name])
    # Written before shards existed: its ledger records are under the plain campaign id.
    data.setdefault("ledger_shards", LEGACY_LEDGER_SHARDS)
    return Campaign.model_validate(data)


class DynamoDBCampaignStore:
    def __init__(
        self,
        *,
        client: Any,
        table_name: str,
        scan_page_size: int | None = None,
        on_read: Callable[[Campaign], None] | None = None,
    ):
        self._client = client
        self._table = table_name
        # Told of every campaign read (wiring passes the ledger's shard-count cache, so the
        # consumer's read of the campaign per message spares the ledger a read of its own).
        self._on_read = on_read
        # Items read per Scan request (default: DynamoDB's 1 MB pages); tests set it small.
        self._scan_page_size = scan_page_size

    def _key(self, campaign_id: str, sk: str = "campaign") -> dict[str, Any]:
        return {"pk": _pk(campaign_id), "sk": {"S": sk}}

    def create(self, campaign: Campaign) -> Campaign:
        now = _now()
        campaign = campaign.model_copy(update={"created_at": now, "updated_at": now, "state": CampaignState.DRAFT})
        item = {k: _ser.serialize(v) for k, v in campaign.model_dump(mode="json", exclude_none=True).items()}
        item.update(self._key(campaign.campaign_id))
        try:
            self._client.put_item(TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)")
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise IllegalTransitionError(f"campaign {campaign.campaign_id!r} already exists") from exc
            raise
        return campaign

    def get(self, campaign_id: str) -> Campaign:
        response = self._client.get_item(TableName=self._table, Key=self._key(campaign_id), ConsistentRead=True)
        if "Item" not in response:
            raise CampaignNotFoundError(f"campaign {campaign_id!r} does not exist")
        campaign = _campaign(response["Item"])
        if self._on_read is not None:
            self._on_read(campaign)
        return campaign

    def transition(
        self,
        campaign_id: str,
        *,
        to: CampaignState,
        allowed_from: Iterable[CampaignState],
        by: str,
        reason: str | None = None,
        publishing_until_ms: int | None = None,
        unless_publishing_at_ms: int | None = None,
        stays: bool = False,
        open_batches: int | None = None,
    ) -> Campaign:
        allowed = list(allowed_from)
        states = {f":from{i}": {"S": s.value} for i, s in enumerate(allowed)}
        values = {":now": {"S": _now()}, ":one": {"N": "1"}, **states}
        update = "SET updated_at = :now"
        if not stays:
            update += ", #state = :to, state_changed_by = :by"
            values.update({":to": {"S": to.value}, ":by": {"S": by}})
        condition = f"attribute_exists(pk) AND #state IN ({', '.join(states)})"
        if publishing_until_ms is not None:
            update += ", publishing_until_ms = :lease"
            values[":lease"] = {"N": str(publishing_until_ms)}
        if open_batches is not None:
            update += ", open_batches = :open"
            values[":open"] = {"N": str(open_batches)}
        if unless_publishing_at_ms is not None:
            condition += " AND (attribute_not_exists(publishing_until_ms) OR publishing_until_ms < :at)"
            values[":at"] = {"N": str(unless_publishing_at_ms)}
        if stays:
            update += " ADD version :one"
        elif reason:
            update += ", state_reason = :reason"
            values[":reason"] = {"S": reason[:500]}
            update += " ADD version :one"
        else:
            update += " REMOVE state_reason ADD version :one"
        try:
            response = self._client.update_item(
                TableName=self._table,
                Key=self._key(campaign_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
            if not old:
                raise CampaignNotFoundError(f"campaign {campaign_id!r} does not exist") from exc
            current = _de.deserialize(old["state"])
            if current in {s.value for s in allowed}:
                raise IllegalTransitionError(
                    f"campaign {campaign_id!r} is being published; it cannot move to {to.value} now"
                ) from exc
            raise IllegalTransitionError(
                f"campaign {campaign_id!r} is {current}; cannot move to {to.value} "
                f"(only from {', '.join(s.value for s in allowed)})"
            ) from exc
        return _campaign(response["Attributes"])

    def end_publish(self, campaign_id: str) -> None:
        self._client.update_item(
            TableName=self._table,
            Key=self._key(campaign_id),
            UpdateExpression="REMOVE publishing_until_ms",
            ConditionExpression="attribute_exists(pk)",
        )

    def batch_settled(self, campaign_id: str) -> int:
        """One batch's message was acknowledged with every recipient ended; returns the
        batches still open (a hint: at zero or below, check the ledger)."""
        response = self._client.update_item(
            TableName=self._table,
            Key=self._key(campaign_id),
            UpdateExpression="ADD open_batches :minus",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":minus": {"N": "-1"}},
            ReturnValues="UPDATED_NEW",
        )
        return int(response["Attributes"]["open_batches"]["N"])

    def reset_open_batches(self, campaign_id: str, count: int) -> None:
        self._client.update_item(
            TableName=self._table,
            Key=self._key(campaign_id),
            UpdateExpression="SET open_batches = :n",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":n": {"N": str(count)}},
        )

    def add_batch(self, batch: BatchMessage) -> BatchStatus:
        item = {
            **self._key(batch.campaign_id, f"batch#{batch.batch_id}"),
            "body": {"S": batch.to_body()},
            "recipients": {"N": str(len(batch.recipients))},
            "enqueued": {"BOOL": False},
            "created_at": {"S": _now()},
        }
        try:
            self._client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": item,
                            "ConditionExpression": "attribute_not_exists(pk)",
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        }
                    },
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(batch.campaign_id),
                            "UpdateExpression": "ADD open_batches :one",
                            "ConditionExpression": "attribute_exists(pk)",
                            "ExpressionAttributeValues": {":one": {"N": "1"}},
                        }
                    },
                ]
            )
            return BatchStatus.NEW
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            cancellations = exc.response.get("CancellationReasons", [])
            reasons = [r.get("Code") for r in cancellations]
            if reasons and reasons[0] == "ConditionalCheckFailed":
                old = cancellations[0].get("Item") or {}
                return BatchStatus.ENQUEUED if old.get("enqueued", {}).get("BOOL") else BatchStatus.RECORDED
            if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                raise CampaignNotFoundError(f"campaign {batch.campaign_id!r} does not exist") from exc
            raise

    def mark_batch_enqueued(self, campaign_id: str, batch_id: str) -> None:
        self._client.update_item(
            TableName=self._table,
            Key=self._key(campaign_id, f"batch#{batch_id}"),
            UpdateExpression="SET enqueued = :t",
            ExpressionAttributeValues={":t": {"BOOL": True}},
        )

    def batches(self, campaign_id: str) -> Iterator[tuple[BatchMessage, bool]]:
        paginator = self._client.get_paginator("query")
        for page in paginator.paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :b)",
            ExpressionAttributeValues={":pk": _pk(campaign_id), ":b": {"S": "batch#"}},
            ConsistentRead=True,
        ):
            for item in page["Items"]:
                yield BatchMessage.model_validate(json.loads(item["body"]["S"])), bool(item["enqueued"]["BOOL"])

    def record_group(self, group: SendGroup) -> SendGroup:
        item = {
            **self._key(group.campaign_id, f"group#{group.group_id}"),
            "body": {"S": group.model_dump_json()},
            "created_at": {"S": _now()},
        }
        try:
            self._client.put_item(TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)")
            return group
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
        existing = self.get_group(group.campaign_id, group.group_id)
        assert existing is not None
        return existing

    def get_group(self, campaign_id: str, group_id: str) -> SendGroup | None:
        response = self._client.get_item(
            TableName=self._table, Key=self._key(campaign_id, f"group#{group_id}"), ConsistentRead=True
        )
        item = response.get("Item")
        return SendGroup.model_validate_json(item["body"]["S"]) if item else None

    def groups_of_batch(self, campaign_id: str, batch_id: str) -> list[SendGroup]:
        response = self._client.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :g)",
            ExpressionAttributeValues={":pk": _pk(campaign_id), ":g": {"S": f"group#{batch_id}-g"}},
            ConsistentRead=True,
        )
        groups = [SendGroup.model_validate_json(item["body"]["S"]) for item in response["Items"]]
        return sorted(groups, key=lambda g: int(g.group_id.rsplit("-g", 1)[1]))

    def list(self, state: CampaignState | None = None) -> Iterator[Campaign]:
        """A Scan of the campaigns table, filtered to the campaign items (sk = campaign) and
        `state`, page by page. The table has no index by state: each call reads every item of
        the table (campaigns, their batches and send groups) and pays for all of them, which
        is fine for an operator's listing; a GSI on state is the upgrade path. Items are
        sorted by id here, since a scan's order is the hash order of its keys."""
        values: dict[str, Any] = {":campaign": {"S": "campaign"}}
        names: dict[str, str] = {}
        condition = "sk = :campaign"
        if state is not None:
            condition += " AND #state = :state"
            values[":state"] = {"S": CampaignState(state).value}
            names["#state"] = "state"
        request: dict[str, Any] = {
            "TableName": self._table,
            "FilterExpression": condition,
            "ExpressionAttributeValues": values,
        }
        if names:
            request["ExpressionAttributeNames"] = names
        if self._scan_page_size:
            request["PaginationConfig"] = {"PageSize": self._scan_page_size}
        campaigns = [
            _campaign(item) for page in self._client.get_paginator("scan").paginate(**request) for item in page["Items"]
        ]
        return iter(sorted(campaigns, key=lambda c: c.campaign_id))
