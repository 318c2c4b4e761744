"""The ledger's keys, for every adapter that reads or writes ledger items.

The table's key schema is what it always was (partition key attribute `campaign_id`, sort
key `recipient_id`); what changed is the partition-key *value*: `<campaign_id>#<k>` for a
campaign spread over k shards, the plain id for a one-shard (pre-shard) campaign
(`sendonce.domain.sending.shards`). An item's `campaign_id` attribute therefore holds the
partition-key value; `campaign_of` gives the campaign back, so no item carries a second
copy of its campaign id (bytes on every item are write units on every write).
"""

from __future__ import annotations

import heapq
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sendonce.domain.errors import CampaignNotFoundError
from sendonce.domain.models import Campaign, DeliveryKey
from sendonce.domain.sending.shards import LEGACY_LEDGER_SHARDS, campaign_of, partition_key, partition_keys

PARTITION_ATTR = "campaign_id"
SORT_ATTR = "recipient_id"
# Queries of one campaign's shards in flight at once (boto3 clients are thread-safe; the
# default connection pool holds 10 connections per client).
READ_WORKERS = 8
# Queries one page of `query_page` may make (one per shard, most of them small).
PAGE_QUERIES = 64

ShardsOf = Callable[[str], int]


def one_shard(_campaign_id: str) -> int:
    """Every campaign as one shard: for tables that hold pre-shard campaigns only (tests)."""
    return LEGACY_LEDGER_SHARDS


class CampaignShards:
    """`shards_of(campaign_id)`: a campaign's shard count, read from its campaign item once.
    The count never changes after creation, so the cache is exact. A campaign that does not
    exist has no ledger items under any sharded key: it is answered as one shard (the plain
    id finds a pre-shard record if one exists) and not cached."""

    def __init__(self, get_campaign: Callable[[str], Campaign], *, most: int = 10_000):
        self._get = get_campaign
        self._known: dict[str, int] = {}
        self._lock = threading.Lock()
        self._most = most

    def __call__(self, campaign_id: str) -> int:
        shards = self._known.get(campaign_id)
        if shards is not None:
            return shards
        try:
            campaign = self._get(campaign_id)
        except CampaignNotFoundError:
            return LEGACY_LEDGER_SHARDS
        self.learn(campaign)
        return campaign.ledger_shards

    def learn(self, campaign: Campaign) -> None:
        """Remember a campaign's shard count from a read made for another reason."""
        with self._lock:
            if campaign.campaign_id not in self._known and len(self._known) >= self._most:
                self._known.clear()
            self._known[campaign.campaign_id] = campaign.ledger_shards


class LedgerKeys:
    def __init__(self, shards_of: ShardsOf):
        self.shards_of = shards_of

    def key(self, key: DeliveryKey) -> dict[str, Any]:
        """The DynamoDB key of one delivery's item: the one place it is computed."""
        shards = self.shards_of(key.campaign_id)
        return {
            PARTITION_ATTR: {"S": partition_key(key.campaign_id, key.recipient_id, shards)},
            SORT_ATTR: {"S": key.recipient_id},
        }

    def partitions(self, campaign_id: str) -> list[str]:
        return partition_keys(campaign_id, self.shards_of(campaign_id))

    def query_campaign(self, client: Any, table: str, campaign_id: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of the campaign that `params` (a Query's other parameters, using
        `:c` for the partition-key value) selects, in recipient-id order as one Query of a
        one-shard campaign returns them. Shards are queried in parallel."""
        partitions = self.partitions(campaign_id)
        if len(partitions) == 1:
            yield from _query(client, table, partitions[0], params)
            return
        with ThreadPoolExecutor(max_workers=min(READ_WORKERS, len(partitions))) as pool:
            shards = list(pool.map(lambda p: list(_query(client, table, p, params)), partitions))
        yield from heapq.merge(*shards, key=lambda item: item[SORT_ATTR]["S"])

    def query_page(
        self, client: Any, table: str, campaign_id: str, cursor: str | None, limit: int, **params: Any
    ) -> tuple[list[dict[str, Any]], str | None]:
        """At most `limit` of the campaign's items that `params` select (a Query's other
        parameters, `:c` for the partition-key value), shard after shard from `cursor`
        (None: the first), in at most PAGE_QUERIES Queries; and the next page's cursor
        (None: no more). The cursor is the shard's index and the last key read in it, as JSON."""
        partitions = self.partitions(campaign_id)
        shard, last = 0, None
        if cursor is not None:
            try:
                position = json.loads(cursor)
                shard, last = int(position["shard"]), position["last"]
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"not a ledger cursor: {cursor[:80]!r}") from exc
        items: list[dict[str, Any]] = []
        for _ in range(PAGE_QUERIES):
            values = {**params.get("ExpressionAttributeValues", {}), ":c": {"S": partitions[shard]}}
            request: dict[str, Any] = {
                **params,
                "TableName": table,
                "KeyConditionExpression": f"{PARTITION_ATTR} = :c",
                "ExpressionAttributeValues": values,
                "Limit": limit - len(items),
            }
            if last is not None:
                request["ExclusiveStartKey"] = {PARTITION_ATTR: {"S": partitions[shard]}, SORT_ATTR: {"S": last}}
            response = client.query(**request)
            items += response["Items"]
            if response.get("LastEvaluatedKey"):
                last = response["LastEvaluatedKey"][SORT_ATTR]["S"]
            elif shard + 1 < len(partitions):
                shard, last = shard + 1, None
            else:
                return items, None
            if len(items) >= limit:
                break
        return items, json.dumps({"shard": shard, "last": last})


def _query(client: Any, table: str, partition: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    values = {**params.get("ExpressionAttributeValues", {}), ":c": {"S": partition}}
    request = {**params, "ExpressionAttributeValues": values}
    for page in client.get_paginator("query").paginate(
        TableName=table, KeyConditionExpression=f"{PARTITION_ATTR} = :c", **request
    ):
        yield from page["Items"]


def campaign_id_of(item: dict[str, Any]) -> str:
    return campaign_of(item[PARTITION_ATTR]["S"])
