"""Write units per partition-key value: what sets a DynamoDB design's ceiling.

A partition-key value takes at most 1,000 write units per second, so the hottest value's
write units per recipient give a campaign's top rate (`ceiling`). `WriteUnitAccountant`
hooks botocore's events on DynamoDB clients (or on a session: clients created from it
afterwards inherit the hooks) and sums the units of every write by (table, partition-key
value).

How a write is charged (DynamoDB's rules: 1 unit per started KB of the item, at least 1;
2 per item in a transaction; a write whose condition fails consumes units too):
- PutItem, and BatchWriteItem's puts: the item as written.
- UpdateItem, and each update of a TransactWriteItems: the item *after* the write: the
  write's own answer when it asked for ALL_NEW; else, when the accountant has seen the
  item, `seen size + the bytes of the update's expression, names and values` bounds the
  size after (an update adds no byte its request does not carry) and is used when it
  falls in the same started KB as the seen size (the units are then exact, or over by
  one where the update removed attributes across a KB boundary); else the item
  is read back (one consistent read per write, on the accountant's own client, which is
  not hooked). Nothing of the system's own requests changes (no ReturnValues added).
  A concurrent write to the same item between the two can make the size read a later
  one: rare, and it is the same item's size a moment later.
- A failed condition: the existing item (the write's ALL_OLD when it asked for it, else
  read back), at least 1 unit; a cancelled transaction: 2 per item likewise.
- DeleteItem, and BatchWriteItem's deletes: the item's size as last seen, at least 1.
Item sizes follow DynamoDB's published formula (attribute names plus values).

Who wrote: `attach(session, writer="consumer")` labels every write made through that session
or client; `by_writer` then holds the units (and `writes_by_writer` the items written) per
(writer, table, partition-key value, kind of sort key), where the kind of sort key is what
`sort_kind` (given at construction) makes of the sort-key value: by default nothing (""),
so that a table keyed by recipient ids keeps one entry per partition-key value.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KB = 1024
PARTITION_WRITE_UNITS_PER_SECOND = 1_000
_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")


def number_size(text: str) -> int:
    digits = text.lstrip("+-").replace(".", "").lower().split("e")[0].strip("0")
    return (max(1, len(digits)) + 1) // 2 + 1


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one AttributeValue in DynamoDB's low-level form ({"S": ...})."""
    ((kind, data),) = value.items()
    if kind == "S":
        return len(data.encode())
    if kind == "N":
        return number_size(data)
    if kind == "B":
        return len(data)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in data)
    if kind == "NS":
        return sum(number_size(n) for n in data)
    if kind == "BS":
        return sum(len(b) for b in data)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in data.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def item_size(item: Mapping[str, Any]) -> int:
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    return max(1, math.ceil(size / KB))


@dataclass(frozen=True)
class KeyFigure:
    table: str
    partition: str
    units: int
    writes: int

    def per_recipient(self, recipients: int) -> float:
        return self.units / recipients

    def ceiling(self, recipients: int) -> float:
        """Recipients per second at which this key reaches a partition's write units."""
        return PARTITION_WRITE_UNITS_PER_SECOND * recipients / self.units


# (writer, table, partition-key value, kind of sort key)
WriterKey = tuple[str, str, str, str]


class WriteUnitAccountant:
    def __init__(self, reader: Any, *, sort_kind: Callable[[str], str] | None = None):
        """`reader`: a DynamoDB client the accountant reads item sizes and key schemas
        with; it must not be one of the clients attached (its reads are not the system's).
        `sort_kind`: a sort-key value to the kind `by_writer` counts it under (bounded:
        recipient ids must fall into one kind)."""
        self._reader = reader
        self._sort_kind = sort_kind or (lambda _value: "")
        self._lock = threading.Lock()
        self._schemas: dict[str, tuple[str, str | None]] = {}
        self._sizes: dict[tuple[str, tuple[str, ...]], int] = {}
        self.units: Counter[tuple[str, str]] = Counter()
        self.writes: Counter[tuple[str, str]] = Counter()
        self.by_writer: Counter[WriterKey] = Counter()
        self.writes_by_writer: Counter[WriterKey] = Counter()

    def attach(self, emitter_owner: Any, *, writer: str = "") -> Any:
        """Hook a DynamoDB client (`client.meta.events`) or a boto3 session (`events`); its
        writes are counted under `writer` in `by_writer`."""
        events = emitter_owner.meta.events if hasattr(emitter_owner, "meta") else emitter_owner.events
        events.register("before-parameter-build.dynamodb", self._before)
        events.register("after-call.dynamodb", functools.partial(self._after, writer=writer))
        return emitter_owner

    def reset(self) -> None:
        with self._lock:
            self.units.clear()
            self.writes.clear()
            self.by_writer.clear()
            self.writes_by_writer.clear()

    # --- reading -----------------------------------------------------------------------

    def hottest(self, table: str | None = None, n: int | None = 5) -> list[KeyFigure]:
        """The `n` keys that took the most units, the most first (None: every key)."""
        with self._lock:
            ranked = sorted(
                ((k, u) for k, u in self.units.items() if table is None or k[0] == table), key=lambda x: -x[1]
            )
            return [KeyFigure(t, p, u, self.writes[(t, p)]) for (t, p), u in ranked[:n]]

    def by_writers(self) -> list[tuple[WriterKey, int, int]]:
        """(writer, table, partition-key value, kind of sort key), its units and items written."""
        with self._lock:
            return [(key, units, self.writes_by_writer[key]) for key, units in sorted(self.by_writer.items())]

    def total(self, table: str | None = None) -> int:
        with self._lock:
            return sum(u for (t, _), u in self.units.items() if table is None or t == table)

    # --- hooks -------------------------------------------------------------------------

    def _before(self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if model.name in _WRITES:
            context["write_units_params"] = dict(params)

    def _after(
        self, parsed: Mapping[str, Any], model: Any, context: dict[str, Any], *, writer: str = "", **_: Any
    ) -> None:
        params = context.get("write_units_params")
        if params is None:
            return
        error = (parsed.get("Error") or {}).get("Code")
        operation = model.name
        if operation == "TransactWriteItems":
            self._transaction(params, parsed, error, writer)
        elif operation == "BatchWriteItem":
            self._batch_write(params, parsed, error, writer)
        elif error in (None, "ConditionalCheckFailedException"):
            table = params["TableName"]
            if operation == "PutItem" and error is None:
                self._charge(table, params["Item"], size=item_size(params["Item"]), writer=writer)
            elif operation == "DeleteItem":
                self._charge(table, params["Key"], size=None, gone=error is None, writer=writer)
            else:
                # The item the write left, when the write asked for it; else read back.
                seen = parsed.get("Item") if error else parsed.get("Attributes")
                if not error and params.get("ReturnValues") != "ALL_NEW":
                    seen = None
                key = params.get("Key") or params["Item"]
                size: int | None
                if seen:
                    size = item_size(seen)
                elif error:  # the item is as it was
                    size = self._sizes.get((table, tuple(str(v) for v in self._key(table, key).values())))
                else:
                    size = self._bounded(table, key, params)
                self._charge(table, key, size=size, writer=writer)

    def _transaction(
        self, params: Mapping[str, Any], parsed: Mapping[str, Any], error: str | None, writer: str
    ) -> None:
        if error not in (None, "TransactionCanceledException"):
            return
        reasons = parsed.get("CancellationReasons") or []
        charges = []
        for i, entry in enumerate(params.get("TransactItems", [])):
            ((kind, body),) = entry.items()
            if kind == "ConditionCheck":
                continue
            old = reasons[i].get("Item") if i < len(reasons) else None
            if kind == "Put" and error is None:
                size: int | None = item_size(body["Item"])
            elif old:
                size = item_size(old)
            else:
                size = (
                    self._bounded(body["TableName"], body["Key"], body) if kind == "Update" and error is None else None
                )
            charges.append((body["TableName"], body.get("Key") or body["Item"], size, kind == "Delete"))
        unknown = [(table, self._key(table, key)) for table, key, size, gone in charges if size is None and not gone]
        sizes = iter(self._read_sizes(unknown))
        for table, key, size, gone in charges:
            if size is None and not gone:
                size = next(sizes)
            self._charge(table, key, size=size, factor=2, gone=gone, writer=writer)

    def _batch_write(
        self, params: Mapping[str, Any], parsed: Mapping[str, Any], error: str | None, writer: str
    ) -> None:
        if error is not None:
            return
        unprocessed = parsed.get("UnprocessedItems") or {}
        for table, requests in params.get("RequestItems", {}).items():
            for request in requests:
                if request in unprocessed.get(table, []):
                    continue
                if "PutRequest" in request:
                    item = request["PutRequest"]["Item"]
                    self._charge(table, item, size=item_size(item), writer=writer)
                else:
                    self._charge(table, request["DeleteRequest"]["Key"], size=None, gone=True, writer=writer)

    # --- charging ----------------------------------------------------------------------

    def _schema(self, table: str) -> tuple[str, str | None]:
        schema = self._schemas.get(table)
        if schema is None:
            keys = self._reader.describe_table(TableName=table)["Table"]["KeySchema"]
            hash_key = next(k["AttributeName"] for k in keys if k["KeyType"] == "HASH")
            range_key = next((k["AttributeName"] for k in keys if k["KeyType"] == "RANGE"), None)
            schema = self._schemas[table] = (hash_key, range_key)
        return schema

    def _key(self, table: str, key_or_item: Mapping[str, Any]) -> dict[str, Any]:
        hash_key, range_key = self._schema(table)
        key = {hash_key: key_or_item[hash_key]}
        if range_key:
            key[range_key] = key_or_item[range_key]
        return key

    def _charge(
        self,
        table: str,
        key_or_item: Mapping[str, Any],
        *,
        size: int | None,
        factor: int = 1,
        gone: bool = False,
        writer: str = "",
    ) -> None:
        key = self._key(table, key_or_item)
        ident = (table, tuple(str(v) for v in key.values()))
        if size is None:
            size = self._sizes.get(ident, 0) if gone else self._read_sizes([(table, key)])[0]
        values = [next(iter(v.values())) for v in key.values()]
        sort_kind = self._sort_kind(str(values[1])) if len(values) > 1 else ""
        units = factor * write_units(size)
        with self._lock:
            if gone:
                self._sizes.pop(ident, None)
            else:
                self._sizes[ident] = size
            partition = (table, values[0])
            self.units[partition] += units
            self.writes[partition] += 1
            by = (writer, table, str(values[0]), sort_kind)
            self.by_writer[by] += units
            self.writes_by_writer[by] += 1

    def _bounded(self, table: str, key_or_item: Mapping[str, Any], update: Mapping[str, Any]) -> int | None:
        """The size after an update, when the item's seen size and the update's own bytes
        fix its write units; None when they do not (the caller reads it back)."""
        ident = (table, tuple(str(v) for v in self._key(table, key_or_item).values()))
        seen = self._sizes.get(ident)
        if seen is None:
            return None
        carried = len(update.get("UpdateExpression", "").encode())
        carried += sum(len(n.encode()) for n in (update.get("ExpressionAttributeNames") or {}).values())
        carried += sum(value_size(v) for v in (update.get("ExpressionAttributeValues") or {}).values())
        return seen + carried if write_units(seen + carried) == write_units(seen) else None

    def _read_sizes(self, keys: list[tuple[str, dict[str, Any]]]) -> list[int]:
        """The current sizes of these items (0 for an absent one), read consistently."""
        found: dict[tuple[str, str], int] = {}
        for start in range(0, len(keys), 100):
            request: dict[str, Any] = {}
            for table, key in keys[start : start + 100]:
                request.setdefault(table, {"Keys": [], "ConsistentRead": True})["Keys"].append(key)
            while request:
                response = self._reader.batch_get_item(RequestItems=request)
                for table, items in response["Responses"].items():
                    for item in items:
                        found[(table, repr(sorted(self._key(table, item).items())))] = item_size(item)
                request = response.get("UnprocessedKeys") or {}
        return [found.get((table, repr(sorted(key.items()))), 0) for table, key in keys]


def per_key_report(
    accountant: WriteUnitAccountant, recipients: int, tables: Iterable[tuple[str, str]], n: int = 3
) -> str:
    """Lines for `print`: per table (label, name), its hottest keys' units per recipient and
    the ceiling each sets at 1,000 write units/s."""
    lines = []
    for label, table in tables:
        total = accountant.total(table)
        lines.append(f"{label}: {total / recipients:.3f} write units per recipient in all")
        for figure in accountant.hottest(table, n):
            lines.append(
                f"  {figure.partition}: {figure.units} units in {figure.writes} writes, "
                f"{figure.per_recipient(recipients):.4f} per recipient, "
                f"ceiling {figure.ceiling(recipients):,.0f} recipients/s"
            )
    return "\n".join(lines)
