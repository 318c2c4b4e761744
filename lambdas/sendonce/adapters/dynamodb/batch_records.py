"""Where a campaign's batch records, their enqueued markers and its send groups live, and
the reads of a campaign's batch records over its shards.

    pk = campaign#<id>#b<k>, sk = batch#<batch>            a published batch's body, written once
    pk = campaign#<id>#b<k>, sk = batch-enqueued#<batch>   that batch reached SQS (a ~60 B marker)
    pk = campaign#<id>#b<k>, sk = group#<batch>-g<n>       batch mode: a send group of that batch

`k` is `shards.shard_of(batch id, batch_shards)` (BLAKE2b, the same in every process and
release); a group goes with its batch, so `groups_of_batch` is one Query. `batch_shards`
is fixed when the campaign is created (`batch_shards_for`) and stored on its state item
(attribute BATCH_SHARDS_ATTR): a campaign item without it was written before batch shards
existed, and its records stay at the plain `campaign#<id>` (one shard) where they were
written; a campaign of one shard keeps them there too.
docs/scale.md ("3. The campaigns table") says why the count is what it is.

The marker's sort key starts with `batch` but not `batch#`: the counters' stream filter
(`sk` begins with `batch#`, sendonce_cdk/aggregator.py) passes batch records only, and
`begins_with(sk, "batch")` reads a shard's records and markers in one Query.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sendonce.adapters.dynamodb.batch_get import batch_get_items
from sendonce.contract import BATCH_RECORD_SK_PREFIX
from sendonce.domain.models import BatchMessage
from sendonce.domain.sending.shards import shard_of

BATCH_SHARDS_ATTR = "batch_shards"
# A campaign item without `batch_shards`: its batch records are under `campaign#<id>`.
LEGACY_BATCH_SHARDS = 1
# A 100-recipient batch costs its shard ~31 write units (2 x its ~10 KB in add_batch's
# transaction, 1 for the marker, ~10 for its send group): 0.31 per recipient of the batch.
# Under 0.1 per recipient on the hottest shard needs the hottest to hold <= 1/3 of the
# batches: 32 shards meet that from 10 batches (1,000 recipients) up (docs/scale.md).
DEFAULT_BATCH_SHARDS = 32


def batch_shards_for(ledger_shards: int) -> int:
    """A new campaign's batch shard count, stored on its item (so a later rule moves no
    record): DEFAULT_BATCH_SHARDS, or fewer when the campaign asked for fewer ledger
    shards (a small campaign that chose cheap whole-campaign reads over write spread)."""
    return max(1, min(DEFAULT_BATCH_SHARDS, ledger_shards))


RECORD_PREFIX = BATCH_RECORD_SK_PREFIX
ENQUEUED_PREFIX = "batch-enqueued#"
GROUP_PREFIX = "group#"
# What a shard's records and markers have in common (and nothing else under a campaign's keys).
RECORDS_AND_MARKERS = "batch"

_CURSOR = re.compile(r"^(\d+):(.*)$", re.DOTALL)


def campaign_partition(campaign_id: str) -> str:
    return f"campaign#{campaign_id}"


def batch_partition(campaign_id: str, batch_id: str, shards: int) -> str:
    """The partition-key value of a batch's record, marker and groups."""
    if shards == LEGACY_BATCH_SHARDS:
        return campaign_partition(campaign_id)
    return f"campaign#{campaign_id}#b{shard_of(batch_id, shards)}"


def batch_partitions(campaign_id: str, shards: int) -> list[str]:
    """Every partition-key value a campaign's batch records can have, shard 0 first."""
    if shards == LEGACY_BATCH_SHARDS:
        return [campaign_partition(campaign_id)]
    return [f"campaign#{campaign_id}#b{k}" for k in range(shards)]


def campaign_of_partition(partition: str) -> str:
    """The campaign id of a campaigns-table partition-key value `campaign#<id>[#...]`
    (campaign ids cannot hold `#`)."""
    return partition.removeprefix("campaign#").split("#", 1)[0]


def batch_of_group(group_id: str) -> str:
    """A send group's batch: group ids are `<batch>-g<n>` (domain/sending/groups.py)."""
    return group_id.rsplit("-g", 1)[0]


def encode_cursor(shard: int, last_sort_key: str | None) -> str:
    return f"{shard}:{last_sort_key or ''}"


def decode_cursor(cursor: str | None) -> tuple[int, str | None]:
    """(shard index, the last sort key read in it or None). A cursor saved by the release
    before shards is a bare sort key of the campaign's one (plain) partition."""
    if cursor is None:
        return 0, None
    match = _CURSOR.match(cursor)
    if match is None:
        return 0, cursor
    return int(match.group(1)), match.group(2) or None


# --- reads -------------------------------------------------------------------------------

# Shards of one campaign read at once (boto3 clients are thread-safe; 10 pooled connections).
READ_WORKERS = 8


def read_batches(client: Any, table: str, partitions: list[str]) -> Iterator[tuple[BatchMessage, bool]]:
    """Every batch record of `partitions` with whether it reached SQS, partition after
    partition; up to READ_WORKERS partitions are read ahead in parallel (so at most that many
    shards' records are held at once, whatever the campaign's size)."""
    if len(partitions) == 1:
        yield from _shard_batches(client, table, partitions[0])
        return
    with ThreadPoolExecutor(max_workers=READ_WORKERS) as pool:
        ahead: deque[Future[list[tuple[BatchMessage, bool]]]] = deque()
        for partition in partitions:
            ahead.append(pool.submit(lambda p: list(_shard_batches(client, table, p)), partition))
            if len(ahead) >= READ_WORKERS:
                yield from ahead.popleft().result()
        while ahead:
            yield from ahead.popleft().result()


def _shard_batches(client: Any, table: str, partition: str) -> Iterator[tuple[BatchMessage, bool]]:
    """One partition's batch records and markers from one Query (records sort first)."""
    records: list[dict[str, Any]] = []
    enqueued: set[str] = set()
    for page in client.get_paginator("query").paginate(
        TableName=table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :b)",
        ExpressionAttributeValues={":pk": {"S": partition}, ":b": {"S": RECORDS_AND_MARKERS}},
        ConsistentRead=True,
    ):
        for item in page["Items"]:
            sk = item["sk"]["S"]
            if sk.startswith(RECORD_PREFIX):
                records.append(item)
            elif sk.startswith(ENQUEUED_PREFIX):
                enqueued.add(sk.removeprefix(ENQUEUED_PREFIX))
    for item in records:
        batch = BatchMessage.model_validate(json.loads(item["body"]["S"]))
        # A record written before the markers carries `enqueued` itself.
        yield batch, batch.batch_id in enqueued or bool(item.get("enqueued", {}).get("BOOL"))


def page_batches(
    client: Any, table: str, partitions: list[str], cursor: str | None, limit: int
) -> tuple[list[BatchMessage], str | None]:
    """Up to `limit` batch records after `cursor`, partition after partition, and the cursor
    after them (None: no more)."""
    items, cursor = _page_items(client, table, partitions, cursor, limit)
    return [BatchMessage.model_validate(json.loads(i["body"]["S"])) for i in items], cursor


def page_batches_marked(
    client: Any, table: str, partitions: list[str], cursor: str | None, limit: int
) -> tuple[list[tuple[BatchMessage, bool]], str | None]:
    """`page_batches` with whether each batch reached SQS: its marker, read with one
    consistent BatchGetItem per 100 batches (or, for a record written before the markers,
    its own `enqueued`)."""
    items, cursor = _page_items(client, table, partitions, cursor, limit)
    keys = [{"pk": i["pk"], "sk": {"S": ENQUEUED_PREFIX + i["sk"]["S"].removeprefix(RECORD_PREFIX)}} for i in items]
    marked = {i["sk"]["S"].removeprefix(ENQUEUED_PREFIX) for i in batch_get_items(client, table, keys)}
    page = []
    for item in items:
        batch = BatchMessage.model_validate(json.loads(item["body"]["S"]))
        page.append((batch, batch.batch_id in marked or bool(item.get("enqueued", {}).get("BOOL"))))
    return page, cursor


def _page_items(
    client: Any, table: str, partitions: list[str], cursor: str | None, limit: int
) -> tuple[list[dict[str, Any]], str | None]:
    shard, last = decode_cursor(cursor)
    batches: list[dict[str, Any]] = []
    while shard < len(partitions) and len(batches) < limit:
        request: dict[str, Any] = {
            "TableName": table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :b)",
            "ExpressionAttributeValues": {":pk": {"S": partitions[shard]}, ":b": {"S": RECORD_PREFIX}},
            "ConsistentRead": True,
            "Limit": limit - len(batches),
        }
        if last is not None:
            request["ExclusiveStartKey"] = {"pk": {"S": partitions[shard]}, "sk": {"S": last}}
        response = client.query(**request)
        batches.extend(response["Items"])
        if "LastEvaluatedKey" in response:
            last = response["LastEvaluatedKey"]["sk"]["S"]
        else:
            shard, last = shard + 1, None
    if shard >= len(partitions):
        return batches, None
    return batches, encode_cursor(shard, last)
