"""Per-campaign counters in the campaigns table (domain/campaigns/counters.py says why).

    pk = counters#<campaign>, sk = recorded             batch records written (ADD in add_batch's
                                                        transaction); `since_creation` when the
                                                        campaign is counted from its creation;
                                                        `counter_keys`: its counter items' key count
    pk = counters#<campaign>#<j>, sk = from#<stream>    one stream position's counts: `seq` (the
                                                        last sequence number applied), `n_<state>`,
                                                        `published`, `batches`
    pk = published#<campaign>#<k>, sk = <recipient_id>  marker: `first_batch`, the batch that
                                                        published the recipient first
    pk = counters#<campaign>#total#<t>, sk = total      the campaign's totals: `n_<state>`,
                                                        `published`, `batches` summed over
                                                        its counter items (SUM_KEYS of them)

Sequence numbers are decimal strings of 21 to 40 digits, more than a DynamoDB number holds
(38): `seq` is stored zero-padded to 40 characters, so that comparing the strings compares
the integers. Markers are spread over MARKER_SHARDS partition-key values, as the ledger is;
counter items over COUNTER_PARTITIONS: an aggregator batch writes up to one item per ledger
shard of a campaign, each in a transaction with the report's increments (2 units an item),
which with small batches is ~3.5 write units per recipient in all (bench-scale): 16 keys left
the hottest at 0.29; 64 hashed left it at 0.11 (a hash shares 256 ledger shards unevenly), so
the ledger shards are now dealt evenly over 128 keys (fewer when the campaign has fewer
ledger shards: counter_keys_for). The count is fixed when the campaign is created and
recorded with it; campaigns created before it was recorded keep LEGACY_COUNTER_PARTITIONS
(their items are where they are).

The totals: each `advance` (a batch's positions of one campaign, up to MOVES_PER_WRITE)
adds its moves' sum to one of the campaign's SUM_KEYS total items, in the same transaction
as the counter items it moves (so a total counts each record exactly when its counter item
does), chosen by the first position's ledger shard: a batch's writes to the totals spread
over SUM_KEYS keys as the shards do. A status read is one BatchGetItem of the `recorded`
item and the totals, whatever the campaign's size (129 Queries before, for 256 ledger
shards). A campaign created before the totals (its `recorded` item has no `sum_keys`) is
read by Querying its counter items, as then.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb.batch_get import batch_get_items
from sendonce.adapters.dynamodb.report_aggregates import aggregator_writer, fit, increment_updates
from sendonce.domain.campaigns.ports import Advance, CounterTotals, Counts
from sendonce.domain.campaigns.report_data import ReportIncrements
from sendonce.domain.models import DeliveryState
from sendonce.domain.sending.shards import dealt, shard_of

SEQUENCE_DIGITS = 40
MARKER_SHARDS = 256
COUNTER_PARTITIONS = 128
LEGACY_COUNTER_PARTITIONS = 16
# Status reads the counter keys with this many Queries in flight.
READ_WORKERS = 16
# The report's aggregates take ADDs from every stream position of a campaign: spread over this
# many writers' items (ADDs commute; exactly-once comes from the counter write they ride with).
TRANSACTION_ITEMS = 100
# Marker writes in flight at once (one conditional PutItem each: a batch's markers cannot
# be written in one request, since a batch write takes no condition).
MARKER_WORKERS = 8
RECORDED = "recorded"
_STATE_PREFIX = "n_"
# A campaign's total items: an advance writes one of them, so each takes 1/SUM_KEYS of the
# campaign's writes to its totals (a batch's worth of records each); all are read at once.
SUM_KEYS = 32
TOTAL = "total"


def recorded_key(campaign_id: str) -> dict[str, Any]:
    """The item add_batch's transaction counts batch records on (campaigns.py)."""
    return {"pk": {"S": f"counters#{campaign_id}"}, "sk": {"S": RECORDED}}


def counter_keys_for(ledger_shards: int) -> int:
    """A new campaign's counter key count, recorded with it: COUNTER_PARTITIONS, or its ledger
    shard count when fewer (each shard then has a key of its own, and a status read of a
    campaign that chose few shards is as few Queries)."""
    return max(1, min(COUNTER_PARTITIONS, ledger_shards))


def total_key(campaign_id: str, index: int) -> dict[str, Any]:
    """One of the campaign's total items."""
    return {"pk": {"S": f"counters#{campaign_id}#{TOTAL}#{index}"}, "sk": {"S": TOTAL}}


def counter_partitions(campaign_id: str, partitions: int = COUNTER_PARTITIONS) -> list[str]:
    return [f"counters#{campaign_id}#{j}" for j in range(partitions)]


def key_index(stream: str, partitions: int, *, balanced: bool) -> int:
    """Which of the campaign's counter keys holds a stream position's item. Balanced (the
    layout recorded with a campaign): a ledger shard `<campaign>#<k>` goes to `k` modulo the
    keys, so the 256 ledger shards share them evenly (a hash left the hottest of 64 keys at
    twice the mean); anything else by a hash. Campaigns from before: a hash over 16."""
    return dealt(stream, partitions) if balanced else shard_of(stream, partitions)


def stream_key(
    campaign_id: str, stream: str, partitions: int = COUNTER_PARTITIONS, *, balanced: bool = True
) -> dict[str, Any]:
    """One stream position's counter item."""
    partition = counter_partitions(campaign_id, partitions)[key_index(stream, partitions, balanced=balanced)]
    return {"pk": {"S": partition}, "sk": {"S": f"from#{stream}"}}


def _padded(sequence: int) -> str:
    text = str(sequence)
    if len(text) > SEQUENCE_DIGITS:
        raise ValueError(f"sequence number {text} is longer than {SEQUENCE_DIGITS} digits")
    return text.zfill(SEQUENCE_DIGITS)


class DynamoDBCounters:
    def __init__(
        self,
        *,
        client: Any,
        table_name: str,
        marker_workers: int = MARKER_WORKERS,
        partitions: int | None = None,
    ):
        self._client = client
        self._table = table_name
        self._workers = marker_workers
        # None: each campaign's own count, as recorded at its creation. A number overrides it
        # for every campaign (the model check, whose in-process moto lists the whole table per
        # Query, uses 1); every reader and writer of a table's counters must then agree on it.
        self._partitions = partitions
        self._known: dict[str, tuple[int, bool]] = {}

    def _stream_key(self, campaign_id: str, stream: str) -> dict[str, Any]:
        partitions, balanced, _ = self._layout(campaign_id)
        return stream_key(campaign_id, stream, partitions, balanced=balanced)

    def partitions_of(self, campaign_id: str) -> int:
        """The campaign's counter key count."""
        return self._layout(campaign_id)[0]

    def _layout(self, campaign_id: str) -> tuple[int, bool, int]:
        """The campaign's counter keys: how many, whether the ledger shards are dealt over
        them evenly, and how many total items it has (0: none, a campaign from before them);
        recorded at creation, so read once and kept (its item is written in the campaign's
        creating transaction, so a campaign with records to count has it)."""
        if campaign_id not in self._known:
            item = (
                self._client.get_item(
                    TableName=self._table,
                    Key=recorded_key(campaign_id),
                    ProjectionExpression="counter_keys, sum_keys",
                    ConsistentRead=True,
                ).get("Item")
                or {}
            )
            recorded = "counter_keys" in item
            count = int(item["counter_keys"]["N"]) if recorded else LEGACY_COUNTER_PARTITIONS
            sums = int(item.get("sum_keys", {}).get("N", "0"))
            self._known[campaign_id] = (count, recorded, sums)
        count, balanced, sums = self._known[campaign_id]
        if self._partitions is not None:
            return self._partitions, False, sums
        return count, balanced, sums

    def applied_through(self, campaign_id: str, stream: str) -> int | None:
        response = self._client.get_item(
            TableName=self._table,
            Key=self._stream_key(campaign_id, stream),
            ProjectionExpression="seq",
            ConsistentRead=True,
        )
        item = response.get("Item")
        return int(item["seq"]["S"]) if item and "seq" in item else None

    def advance(self, campaign_id: str, moves: Sequence[Advance], *, report: ReportIncrements | None = None) -> bool:
        if not moves:
            return True
        updates = [self._move(campaign_id, move) for move in moves]
        sums = self._layout(campaign_id)[2]
        total = Counts()
        for move in moves:
            total.add(move.delta)
        if sums and not total.empty:
            index = dealt(moves[0].stream, sums)
            updates.append(_adding(self._table, total_key(campaign_id, index), total))
        if report:
            writer = aggregator_writer(moves[0].stream)
            room = TRANSACTION_ITEMS - len(updates)
            updates += increment_updates(self._table, campaign_id, writer, fit(report, room))
        if len(updates) == 1:  # one position, nothing else: a plain conditional write
            try:
                self._client.update_item(**updates[0])
            except ClientError as exc:
                if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                    return False
                raise
            return True
        try:
            self._client.transact_write_items(
                TransactItems=[{"Update": u} if "Update" not in u else u for u in updates]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if "ConditionalCheckFailed" in reasons:
                return False
            raise
        return True

    def _move(self, campaign_id: str, move: Advance) -> dict[str, Any]:
        """One position's conditional update: the sequence number it held, the new one, its delta."""
        request = _adding(self._table, self._stream_key(campaign_id, move.stream), move.delta)
        values = request.setdefault("ExpressionAttributeValues", {})
        values[":to"] = {"S": _padded(move.through)}
        adds = request.pop("UpdateExpression", "")
        request["UpdateExpression"] = "SET seq = :to" + (f" {adds}" if adds else "")
        if move.expected is None:
            request["ConditionExpression"] = "attribute_not_exists(seq)"
        else:
            request["ConditionExpression"] = "seq = :from"
            values[":from"] = {"S": _padded(move.expected)}
        return request

    def mark_published(self, campaign_id: str, batch_id: str, recipient_ids: Iterable[str]) -> int:
        ids = list(dict.fromkeys(recipient_ids))
        if not ids:
            return 0
        with ThreadPoolExecutor(max_workers=min(self._workers, len(ids))) as pool:
            return sum(pool.map(lambda r: self._mark(campaign_id, batch_id, r), ids))

    def _mark(self, campaign_id: str, batch_id: str, recipient_id: str) -> int:
        try:
            self._client.put_item(
                TableName=self._table,
                Item={
                    "pk": {"S": f"published#{campaign_id}#{shard_of(recipient_id, MARKER_SHARDS)}"},
                    "sk": {"S": recipient_id},
                    "first_batch": {"S": batch_id},
                },
                ConditionExpression="attribute_not_exists(pk) OR first_batch = :b",
                ExpressionAttributeValues={":b": {"S": batch_id}},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return 0  # another batch published it first
            raise
        return 1

    def totals(self, campaign_id: str) -> CounterTotals | None:
        # The recorded item and the totals, in one request (SUM_KEYS: what a campaign is
        # created with; one created with another count is read again with its own).
        keys = [recorded_key(campaign_id), *(total_key(campaign_id, t) for t in range(SUM_KEYS))]
        found = {i["pk"]["S"]: i for i in batch_get_items(self._client, self._table, keys)}
        item = found.get(recorded_key(campaign_id)["pk"]["S"])
        if not item or not item.get("since_creation", {}).get("BOOL"):
            return None
        recorded = CounterTotals(recorded_batches=int(item.get("batches", {}).get("N", "0")), counts=Counts())
        sums = int(item.get("sum_keys", {}).get("N", "0"))
        if sums:
            if sums != SUM_KEYS:
                keys = [total_key(campaign_id, t) for t in range(sums)]
                found = {i["pk"]["S"]: i for i in batch_get_items(self._client, self._table, keys)}
            for t in range(sums):
                total = found.get(total_key(campaign_id, t)["pk"]["S"])
                if total:
                    recorded.counts.add(_counts(total))
            return recorded
        # A campaign from before the totals: its counter items, one Query per key.
        partitions = self._partitions or int(item.get("counter_keys", {}).get("N", LEGACY_COUNTER_PARTITIONS))
        with ThreadPoolExecutor(max_workers=min(READ_WORKERS, partitions)) as pool:
            for items in pool.map(self._query, counter_partitions(campaign_id, partitions)):
                for counter in items:
                    recorded.counts.add(_counts(counter))
        return recorded

    def _query(self, partition: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for page in self._client.get_paginator("query").paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": partition}},
            ConsistentRead=True,
        ):
            items.extend(page["Items"])
        return items


def _adding(table: str, key: dict[str, Any], delta: Counts) -> dict[str, Any]:
    """An UpdateItem request that ADDs `delta`'s non-zero counts to the item at `key`."""
    amounts: dict[str, int] = {
        **{f"{_STATE_PREFIX}{state.value}": n for state, n in delta.states.items() if n},
        "published": delta.published,
        "batches": delta.batches,
    }
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    adds = []
    for i, (attribute, amount) in enumerate(a for a in amounts.items() if a[1]):
        names[f"#a{i}"] = attribute
        values[f":a{i}"] = {"N": str(amount)}
        adds.append(f"#a{i} :a{i}")
    request: dict[str, Any] = {"TableName": table, "Key": key}
    if adds:
        request["UpdateExpression"] = "ADD " + ", ".join(adds)
        request["ExpressionAttributeNames"] = names
        request["ExpressionAttributeValues"] = values
    return request


def _counts(item: dict[str, Any]) -> Counts:
    states: Counter[DeliveryState] = Counter()
    for attribute, value in item.items():
        if attribute.startswith(_STATE_PREFIX):
            states[DeliveryState(attribute[len(_STATE_PREFIX) :])] += int(value["N"])
    return Counts(
        states=states,
        published=int(item.get("published", {}).get("N", "0")),
        batches=int(item.get("batches", {}).get("N", "0")),
    )
