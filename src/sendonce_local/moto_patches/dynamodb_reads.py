"""Reading items: a query reads one partition, and item reads are written as JSON (speed
patches).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_dynamodb_reads.py.
"""

from __future__ import annotations

import bisect
import copy
import functools
import json
from collections.abc import Callable
from typing import Any

from sendonce_local.moto_patches.replacing import Replace


def queries_read_one_partition(replace: Replace) -> None:
    """Query lists, filters and sorts every item of the table for each 1 MB page.

    ``Table.query`` walks ``all_items()`` to find the partition, sorts it, skips to the
    exclusive start key item by item and deep-copies the page: reading a 12,480-item
    campaign's ledger took ~35 s, and a query of the campaigns table (batch records, group
    records, counters) cost more the more the table held. For a query on one partition of
    the table itself (no index, no legacy KeyConditions filter, S or N range key; a range-key
    condition compared as moto compares it) the patch sorts just that partition once per
    page, finds the start by bisection and hands out the live items
    (``dynamodb_requests_one_at_a_time`` keeps writers out until the response is written).
    Every other query goes to moto's.

    Trade: none expected; projections still work on copies.
    """
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT, Table

    stock = Table.query

    @functools.wraps(stock)
    def query(
        self: Any,
        hash_key: Any,
        range_comparison: str | None,
        range_objs: list[Any],
        limit: int,
        exclusive_start_key: dict[str, Any],
        scan_index_forward: bool,
        projection_expressions: list[list[str]] | None,
        index_name: str | None = None,
        consistent_read: bool = False,
        filter_expression: Any = None,
        hash_key_conditions: list[tuple[str, Any]] | None = None,
        range_key_conditions: list[tuple[str, str, list[Any]]] | None = None,
        **filter_kwargs: Any,
    ) -> tuple[list[Any], int, dict[str, Any] | None]:
        if (
            index_name is not None
            or hash_key is None
            or self.range_key_attr is None
            or (range_key_conditions and len(range_key_conditions) > 1)
            or filter_kwargs
            or self.range_key_type not in ("S", "N")
        ):
            return stock(
                self,
                hash_key,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                index_name,
                consistent_read,
                filter_expression,
                hash_key_conditions=hash_key_conditions,
                range_key_conditions=range_key_conditions,
                **filter_kwargs,
            )
        partition = self.items.get(hash_key) or {}
        ordered = sorted(partition.values(), key=lambda item: item.range_key.cast_value)
        keys = [item.range_key.cast_value for item in ordered]
        if exclusive_start_key is not None:
            start = DynamoType(exclusive_start_key[self.range_key_attr]).cast_value
            if scan_index_forward is False:
                ordered = ordered[: bisect.bisect_left(keys, start)]
            else:
                ordered = ordered[bisect.bisect_right(keys, start) :]
        if scan_index_forward is False:
            ordered.reverse()
        results: list[Any] = []
        size, last_evaluated_key = 0, None
        for item in ordered:
            item_size = item.size()
            # As moto's: the page ends at the limit or the size before the next item is compared
            if len(results) == limit or size + item_size > RESULT_SIZE_LIMIT:
                last_evaluated_key = self._get_last_evaluated_key(results[-1], None)
                break
            if range_comparison and not item.range_key.compare(range_comparison, range_objs):
                continue
            results.append(item)
            size += item_size
        scanned = len(results)
        if filter_expression is not None:
            results = [item for item in results if filter_expression.expr(item)]
        if projection_expressions:
            results = [item.project(projection_expressions) for item in copy.deepcopy(results)]
        return results, scanned, last_evaluated_key

    replace(Table, "query", query)


def item_reads_written_as_json(replace: Replace) -> None:
    """Items read back go through moto's generic, shape-driven response serializer.

    That costs ~2 ms per ledger item, most of reading a 12,480-item ledger. The results of
    Query, Scan, GetItem and BatchGetItem are DynamoDB JSON already: the patch writes them
    with ``json.dumps``. Anything that does not serialize as JSON (binary values, which
    moto holds as bytes) and every other action go to moto's serializer.

    Trade: the answer keeps keys the serializer would drop because the operation's shape
    lacks them (GetItem's ``ConsumedCapacityUnits``); boto3 ignores them.
    """
    import moto.dynamodb.responses as responses

    stock = responses.DynamoHandler.serialized
    item_reads = {"Query", "Scan", "GetItem", "BatchGetItem"}

    @functools.wraps(stock)
    def serialized(self: Any, action_result: Any) -> Any:
        result = action_result.result
        if (
            isinstance(action_result, responses.DynamoResult)
            and isinstance(result, dict)
            and self._get_action() in item_reads
        ):
            answer = json_answer(self, result)
            if answer is not None:
                return answer
        return stock(self, action_result)

    replace(responses.DynamoHandler, "serialized", serialized)


def json_answer(
    handler: Any, result: dict[str, Any], default: Callable[[Any], Any] | None = None
) -> tuple[int, dict[str, str], str] | None:
    """`result` as a JSON-protocol answer of `handler`'s; None when it does not serialize
    as JSON (binary values: moto holds them as bytes), for moto's serializer to write."""
    try:
        body = json.dumps(result, separators=(",", ":"), default=default)
    except (TypeError, ValueError):
        return None
    headers = dict(handler.response_headers)
    headers["Content-Type"] = "application/x-amz-json-1.0"
    return 200, headers, body
