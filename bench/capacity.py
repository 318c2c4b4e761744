"""What the consumer asks of DynamoDB: every request, by table and purpose, and the
capacity units it would be billed on-demand.

`DynamoDBRequestLog` hooks a boto3 session (clients created from it afterwards inherit
the hooks) and records one entry per API call — not per HTTP retry — with the items it
named and, where DynamoDB's response shows them, the sizes of the items it read.

Units follow DynamoDB's published rules (on-demand bills the same units):
- a write is 1 write unit per 1 KB of the larger of the item before and after, at
  least 1; a transactional write is 2 per item; a write whose condition fails still
  consumes units for the size of the existing item (at least 1);
- a strongly consistent read is 1 read unit per 4 KB (eventually consistent: half);
  a read that finds nothing still consumes the minimum; a Query rounds the sum of the
  sizes it read up to 4 KB.

What cannot be seen from the client is estimated, conservatively: a successful
`UpdateItem` is charged for the item's size at the end of the run (ledger items only
grow: every transition appends to `history`), and a cancelled transaction for 2 units
per item, as if it had gone through.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Item sizes: one formula for the bench and the per-key accountant (shipped), re-exported.
from sendonce_local.write_units import item_size as item_size
from sendonce_local.write_units import number_size as number_size
from sendonce_local.write_units import value_size as value_size
from sendonce_local.write_units import write_units as write_units

KB = 1024
READ_UNIT_BYTES = 4 * KB

LEDGER = "ledger"
CAMPAIGN_READ = "campaign_read"
SEND_GROUP = "send_group"
LIMITER = "limiter"
SUPPRESSIONS = "suppressions"
CAMPAIGNS_OTHER = "campaigns_other"
OTHER = "other"
CATEGORIES = (LEDGER, CAMPAIGN_READ, SEND_GROUP, LIMITER, SUPPRESSIONS, CAMPAIGNS_OTHER, OTHER)
# What the ledger mechanism adds: the ledger table and batch mode's send-group records.
# Reading the campaign's state once per message (pause is state) and the shared send
# rate are kept apart: a no-ledger consumer reads the campaign too and needs a limiter too.
LEDGER_SHARE = (LEDGER, SEND_GROUP)

Key = tuple[str, str]


# --- item sizes ---------------------------------------------------------------------


def read_units(size: int, *, consistent: bool) -> float:
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


# --- the request log ------------------------------------------------------------------


@dataclass
class Request:
    operation: str
    category: str
    consistent: bool
    keys: list[tuple[str, Key]] = field(default_factory=list)  # (table, key) per item named
    put_sizes: list[int] = field(default_factory=list)  # PutItem: the new item's size
    error: str | None = None
    read_sizes: list[int] | None = None  # sizes of items the response returned
    failed_item_sizes: list[int] = field(default_factory=list)  # old items of failed conditions
    seconds: float = 0.0


def _key(table: str, key: Mapping[str, Any], tables: Mapping[str, str]) -> Key:
    if tables.get(table) == LEDGER:
        return key["campaign_id"]["S"], key["recipient_id"]["S"]
    if tables.get(table) == SUPPRESSIONS:
        return key["fp"]["S"], ""
    return key["pk"]["S"], key["sk"]["S"]


class DynamoDBRequestLog:
    def __init__(self, session: Any, *, ledger_table: str, campaigns_table: str, suppressions_table: str | None = None):
        self._tables = {ledger_table: LEDGER, campaigns_table: "campaigns"}
        if suppressions_table:
            self._tables[suppressions_table] = SUPPRESSIONS
        self.ledger_table = ledger_table
        self.campaigns_table = campaigns_table
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        session.events.register("before-parameter-build.dynamodb", self._before)
        session.events.register("after-call.dynamodb", self._after)

    def reset(self) -> None:
        with self._lock:
            self.requests = []

    # botocore hands the same `context` dict to both hooks of one call.
    def _before(self, params: Mapping[str, Any], model: Any, context: dict, **_: Any) -> None:
        request = self._describe(model.name, params)
        context["bench_request"] = request
        context["bench_started"] = time.perf_counter()
        with self._lock:
            self.requests.append(request)

    def _after(self, parsed: Mapping[str, Any], context: dict, **_: Any) -> None:
        request: Request | None = context.get("bench_request")
        if request is None:
            return
        request.seconds = time.perf_counter() - context.get("bench_started", time.perf_counter())
        error = parsed.get("Error") or {}
        request.error = error.get("Code")
        if request.error == "ConditionalCheckFailedException":
            request.failed_item_sizes = [item_size(parsed["Item"])] if parsed.get("Item") else [0]
        elif request.error == "TransactionCanceledException":
            request.failed_item_sizes = [
                item_size(r["Item"]) if r.get("Item") else 0 for r in parsed.get("CancellationReasons", [])
            ]
        if request.operation == "GetItem" and not request.error:
            request.read_sizes = [item_size(parsed["Item"])] if parsed.get("Item") else [0]
        elif request.operation == "Query" and not request.error:
            request.read_sizes = [item_size(i) for i in parsed.get("Items", [])]
        elif request.operation == "BatchGetItem" and not request.error:
            found = [item_size(i) for items in parsed.get("Responses", {}).values() for i in items]
            request.read_sizes = found + [0] * max(0, len(request.keys) - len(found))

    def _describe(self, operation: str, params: Mapping[str, Any]) -> Request:
        consistent = bool(params.get("ConsistentRead"))
        if operation == "TransactWriteItems":
            keys = []
            for entry in params.get("TransactItems", []):
                ((_, body),) = entry.items()
                table = body["TableName"]
                keys.append((table, _key(table, body["Key"] if "Key" in body else body["Item"], self._tables)))
            first = keys[0] if keys else ("", ("", ""))
            return Request(operation, self._category(first[0], first[1], operation, params), consistent, keys)
        if operation == "BatchGetItem":
            keys = []
            for table, body in params.get("RequestItems", {}).items():
                consistent = consistent or bool(body.get("ConsistentRead"))
                keys.extend((table, _key(table, k, self._tables)) for k in body.get("Keys", []))
            first = keys[0] if keys else ("", ("", ""))
            return Request(operation, self._category(first[0], first[1], operation, params), consistent, keys)
        table = params.get("TableName", "")
        if operation == "PutItem":
            key = _key(table, params["Item"], self._tables) if table in self._tables else ("", "")
            return Request(
                operation,
                self._category(table, key, operation, params),
                consistent,
                [(table, key)],
                [item_size(params["Item"])],
            )
        if "Key" in params and table in self._tables:
            key = _key(table, params["Key"], self._tables)
            return Request(operation, self._category(table, key, operation, params), consistent, [(table, key)])
        return Request(operation, self._category(table, None, operation, params), consistent)

    def _category(self, table: str, key: Key | None, operation: str, params: Mapping[str, Any]) -> str:
        kind = self._tables.get(table)
        if kind in (LEDGER, SUPPRESSIONS):
            return kind
        if kind != "campaigns":
            return OTHER
        if key is not None:
            pk, sk = key
            if pk.startswith("limiter#"):
                return LIMITER
            if sk == "campaign" and operation == "GetItem":
                return CAMPAIGN_READ
            if sk.startswith("group#"):
                return SEND_GROUP
            return CAMPAIGNS_OTHER
        if operation == "Query":
            values = params.get("ExpressionAttributeValues", {})
            if any(str(v.get("S", "")).startswith("group#") for v in values.values()):
                return SEND_GROUP
        return CAMPAIGNS_OTHER

    # --- summaries ---------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        counts = Counter(r.category for r in self.requests)
        return {c: counts.get(c, 0) for c in CATEGORIES if counts.get(c)}

    def operations(self) -> dict[str, int]:
        return dict(Counter(f"{r.category}.{r.operation}" for r in self.requests))

    def total(self, categories: Iterable[str] | None = None) -> int:
        wanted = set(categories or CATEGORIES)
        return sum(1 for r in self.requests if r.category in wanted)

    def mean_seconds(self, categories: Iterable[str] | None = None) -> float | None:
        wanted = set(categories or CATEGORIES)
        times = [r.seconds for r in self.requests if r.category in wanted]
        return sum(times) / len(times) if times else None

    def units(self, size_of: Callable[[str, Key], int | None]) -> dict[str, dict[str, float]]:
        """Write and read units by category; `size_of(table, key)` gives an item's final size."""
        out: dict[str, dict[str, float]] = {}
        for request in self.requests:
            writes, reads = _units(request, size_of)
            entry = out.setdefault(request.category, {"write": 0.0, "read": 0.0})
            entry["write"] += writes
            entry["read"] += reads
        return out


def _units(request: Request, size_of: Callable[[str, Key], int | None]) -> tuple[float, float]:
    op = request.operation
    if op in ("GetItem", "Query", "BatchGetItem"):
        if request.read_sizes is None:  # the read failed: nothing billed that we can see
            return 0.0, 0.0
        if op == "Query":
            return 0.0, read_units(sum(request.read_sizes), consistent=request.consistent)
        return 0.0, sum(read_units(s, consistent=request.consistent) for s in request.read_sizes)
    if op == "TransactWriteItems":
        if request.error:
            return float(2 * len(request.keys)), 0.0  # cancelled: charged as if it went through
        return float(sum(2 * write_units(size_of(t, k) or 0) for t, k in request.keys)), 0.0
    if op in ("UpdateItem", "PutItem", "DeleteItem"):
        if request.failed_item_sizes:
            return float(write_units(request.failed_item_sizes[0])), 0.0
        sizes = [size_of(t, k) or 0 for t, k in request.keys] + request.put_sizes
        return float(write_units(max(sizes, default=0))), 0.0
    return 0.0, 0.0
