"""A campaign's batch records, their queue markers and batch mode's send groups, over the
campaign's batch shards (batch_records.py), and the open-batch count kept on its state item."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from boto3.dynamodb.types import TypeSerializer
from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb import batch_records as bk
from sendonce.adapters.dynamodb.campaigns.items import CampaignItems, _now
from sendonce.adapters.dynamodb.counters import recorded_key
from sendonce.domain.campaigns.ports import BatchStatus
from sendonce.domain.errors import CampaignNotFoundError
from sendonce.domain.models import BatchMessage, SendGroup

logger = logging.getLogger(__name__)
_ser = TypeSerializer()


class CampaignBatches(CampaignItems):
    """Batch and send-group items, over CampaignItems' state item."""

    def batch_settled(self, campaign_id: str) -> int:
        """One batch's message was acknowledged with every recipient ended; returns the
        batches still open (a hint: at zero or below, check the ledger)."""
        response = self._update_campaign(
            Key=self._key(campaign_id),
            UpdateExpression="ADD open_batches :minus",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":minus": {"N": "-1"}},
            ReturnValues="UPDATED_NEW",
        )
        return int(response["Attributes"]["open_batches"]["N"])

    def reset_open_batches(self, campaign_id: str, count: int) -> None:
        self._update_campaign(
            Key=self._key(campaign_id),
            UpdateExpression="SET open_batches = :n",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":n": {"N": str(count)}},
        )

    def _batch_shards(self, campaign_id: str) -> int:
        """The campaign's batch shard count: fixed at its creation, so cached once read. A
        campaign that does not exist is answered as one shard and not cached."""
        shards = self._known_batch_shards.get(campaign_id)
        if shards is not None:
            return shards
        response = self._client.get_item(
            TableName=self._table,
            Key=self._key(campaign_id),
            ProjectionExpression="pk, #shards",
            ExpressionAttributeNames={"#shards": bk.BATCH_SHARDS_ATTR},
            ConsistentRead=True,
        )
        if "Item" not in response:
            return bk.LEGACY_BATCH_SHARDS
        return self._learn_batch_shards(campaign_id, response["Item"])

    def partitions(self, campaign_id: str) -> list[str]:
        """Every partition-key value holding the campaign's items here: its own (state,
        content, a pre-shard campaign's batches) and its batch shards (tools and benchmarks
        that read a campaign's items whole)."""
        shards = bk.batch_partitions(campaign_id, self._batch_shards(campaign_id))
        return list(dict.fromkeys([bk.campaign_partition(campaign_id), *shards]))

    def _learn_batch_shards(self, campaign_id: str, item: dict[str, Any]) -> int:
        shards = int(item[bk.BATCH_SHARDS_ATTR]["N"]) if bk.BATCH_SHARDS_ATTR in item else bk.LEGACY_BATCH_SHARDS
        if campaign_id not in self._known_batch_shards and len(self._known_batch_shards) >= 10_000:
            self._known_batch_shards.clear()
        self._known_batch_shards[campaign_id] = shards
        return shards

    def _batch_key(self, campaign_id: str, batch_id: str, prefix: str, name: str | None = None) -> dict[str, Any]:
        """The key of a batch's record (name None: the batch id), marker or group `name`."""
        partition = bk.batch_partition(campaign_id, batch_id, self._batch_shards(campaign_id))
        return {"pk": {"S": partition}, "sk": {"S": prefix + (name or batch_id)}}

    def add_batch(self, batch: BatchMessage) -> BatchStatus:
        """The batch's record, written once (whether it reached SQS is a marker of its own),
        with the open-batch count and the counters' `recorded` count in one transaction."""
        item = {
            **self._batch_key(batch.campaign_id, batch.batch_id, bk.RECORD_PREFIX),
            "body": {"S": batch.to_body()},
            "recipients": {"N": str(len(batch.recipients))},
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
                    {
                        # The counters' watermark: a campaign is complete by its counters only
                        # once they have counted every batch recorded here.
                        "Update": {
                            "TableName": self._table,
                            "Key": recorded_key(batch.campaign_id),
                            "UpdateExpression": "ADD batches :one",
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
                # A record written before the markers carries `enqueued` itself.
                if old.get("enqueued", {}).get("BOOL") or self._enqueued(batch.campaign_id, batch.batch_id):
                    return BatchStatus.ENQUEUED
                return BatchStatus.RECORDED
            if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                raise CampaignNotFoundError(f"campaign {batch.campaign_id!r} does not exist") from exc
            raise

    def _enqueued(self, campaign_id: str, batch_id: str) -> bool:
        response = self._client.get_item(
            TableName=self._table,
            Key=self._batch_key(campaign_id, batch_id, bk.ENQUEUED_PREFIX),
            ProjectionExpression="pk",
            ConsistentRead=True,
        )
        return "Item" in response

    def mark_batch_enqueued(self, campaign_id: str, batch_id: str) -> None:
        """A small marker beside the record (1 write unit), never a rewrite of its body."""
        self._client.put_item(TableName=self._table, Item=self._batch_key(campaign_id, batch_id, bk.ENQUEUED_PREFIX))

    def batches(self, campaign_id: str) -> Iterator[tuple[BatchMessage, bool]]:
        """Every batch with whether it reached SQS: shard by shard (in batch-id order within
        a shard), a few shards read ahead in parallel."""
        partitions = bk.batch_partitions(campaign_id, self._batch_shards(campaign_id))
        return bk.read_batches(self._client, self._table, partitions)

    def batches_page(self, campaign_id: str, cursor: str | None, limit: int) -> tuple[list[BatchMessage], str | None]:
        """Up to `limit` batch records after `cursor`, shard after shard; the cursor (opaque
        to callers) names the shard and the last key read there."""
        partitions = bk.batch_partitions(campaign_id, self._batch_shards(campaign_id))
        return bk.page_batches(self._client, self._table, partitions, cursor, limit)

    def batches_page_marked(
        self, campaign_id: str, cursor: str | None, limit: int
    ) -> tuple[list[tuple[BatchMessage, bool]], str | None]:
        """`batches_page` with whether each batch reached SQS (one BatchGetItem of markers)."""
        partitions = bk.batch_partitions(campaign_id, self._batch_shards(campaign_id))
        return bk.page_batches_marked(self._client, self._table, partitions, cursor, limit)

    def record_group(self, group: SendGroup) -> SendGroup:
        item = {
            **self._group_key(group.campaign_id, group.group_id),
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

    def _group_key(self, campaign_id: str, group_id: str) -> dict[str, Any]:
        return self._batch_key(campaign_id, bk.batch_of_group(group_id), bk.GROUP_PREFIX, group_id)

    def get_group(self, campaign_id: str, group_id: str) -> SendGroup | None:
        response = self._client.get_item(
            TableName=self._table, Key=self._group_key(campaign_id, group_id), ConsistentRead=True
        )
        item = response.get("Item")
        return SendGroup.model_validate_json(item["body"]["S"]) if item else None

    def groups_of_batch(self, campaign_id: str, batch_id: str) -> list[SendGroup]:
        partition = bk.batch_partition(campaign_id, batch_id, self._batch_shards(campaign_id))
        response = self._client.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :g)",
            ExpressionAttributeValues={":pk": {"S": partition}, ":g": {"S": f"{bk.GROUP_PREFIX}{batch_id}-g"}},
            ConsistentRead=True,
        )
        groups = [SendGroup.model_validate_json(item["body"]["S"]) for item in response["Items"]]
        return sorted(groups, key=lambda g: int(g.group_id.rsplit("-g", 1)[1]))
