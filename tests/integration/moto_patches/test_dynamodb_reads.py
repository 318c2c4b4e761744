"""dynamodb_reads.py (speed patches): a query reads one partition; item reads are written as
JSON."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.moto_patches.helpers import (
    _calls,
    _filled_ledger,
    _key,
    _s,
    moto_as,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("profile", "listings"), [("stock", 4), ("defects", 4), ("speed", 0)])
def test_the_speed_patches_read_a_partition_without_listing_the_table(profile: str, listings: int) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 20)

        def pages(condition: str = "", **values: Any) -> list[dict[str, Any]]:
            return list(
                ddb.get_paginator("query").paginate(
                    TableName="ledger",
                    KeyConditionExpression="pk = :c" + condition,
                    ExpressionAttributeValues={":c": _s("c1"), **values},
                    PaginationConfig={"PageSize": 5},
                )
            )

        # A ledger's pages: stock moto lists the whole table for each of the 4; and for a
        # range-key condition (the campaign store's groups) too
        assert _calls(pages)["moto/dynamodb/models/table.py:all_items"] == listings
        by_prefix = _calls(lambda: pages(" AND begins_with(sk, :p)", **{":p": _s("r01")}))
        assert by_prefix["moto/dynamodb/models/table.py:all_items"] == listings // 2  # 10 items: 2 pages


# Every range-key condition a key condition expression can hold, on a partition among others
RANGE_CONDITIONS: list[tuple[str, dict[str, Any]]] = [
    (" AND begins_with(sk, :a)", {":a": _s("r01")}),
    (" AND sk BETWEEN :a AND :b", {":a": _s("r005"), ":b": _s("r013")}),
    (" AND sk < :a", {":a": _s("r007")}),
    (" AND sk <= :a", {":a": _s("r007")}),
    (" AND sk > :a", {":a": _s("r011")}),
    (" AND sk >= :a", {":a": _s("r011")}),
    (" AND sk = :a", {":a": _s("r004")}),
    (" AND begins_with(sk, :a)", {":a": _s("x")}),  # matches nothing
]


def _range_pages(profile: str) -> list[list[dict[str, Any]]]:
    """Each condition's pages, every way a caller pages them."""
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 20)
        for i in range(5):  # another partition, sorting around c1
            ddb.put_item(TableName="ledger", Item={**_key("c0", f"r{i:03}"), "state": _s("queued")})
        answers = []
        for condition, values in RANGE_CONDITIONS:
            for page_size, forward in ((4, True), (3, False), (100, True)):
                answers.append(
                    [
                        {k: page.get(k) for k in ("Items", "Count", "ScannedCount", "LastEvaluatedKey")}
                        for page in ddb.get_paginator("query").paginate(
                            TableName="ledger",
                            KeyConditionExpression="pk = :c" + condition,
                            ExpressionAttributeValues={":c": _s("c1"), **values},
                            ScanIndexForward=forward,
                            PaginationConfig={"PageSize": page_size},
                        )
                    ]
                )
        return answers


def test_the_speed_patches_answer_range_key_conditions_page_by_page_as_stock_moto() -> None:
    stock = _range_pages("stock")
    assert _range_pages("speed") == stock
    # and the conditions select what they say (checked on stock moto's answers)
    items = [[i["sk"]["S"] for page in pages for i in page["Items"]] for pages in stock[::3]]
    assert items[0] == [f"r{i:03}" for i in range(10, 20)]
    assert items[1] == [f"r{i:03}" for i in range(5, 14)]
    assert (items[2][-1], items[3][-1], items[4][0], items[5][0]) == ("r006", "r007", "r012", "r011")
    assert (items[6], items[7]) == (["r004"], [])


@pytest.mark.parametrize(("profile", "serialized"), [("stock", 1), ("defects", 1), ("speed", 0)])
def test_the_speed_patches_write_item_reads_as_json(profile: str, serialized: int) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 1)
        execute = "moto/core/responses.py:execute_result"

        for read in (
            lambda: ddb.get_item(TableName="ledger", Key=_key("c1", "r000")),
            lambda: ddb.batch_get_item(RequestItems={"ledger": {"Keys": [_key("c1", "r000")]}}),
            lambda: ddb.query(
                TableName="ledger", KeyConditionExpression="pk = :c", ExpressionAttributeValues={":c": _s("c1")}
            ),
            lambda: ddb.scan(TableName="ledger"),
        ):
            assert _calls(read)[execute] == serialized
        # Binary values (bytes in moto) and every other action keep moto's serializer
        ddb.put_item(TableName="ledger", Item={**_key("c1", "bin"), "body": {"B": b"\xff"}})
        assert _calls(lambda: ddb.get_item(TableName="ledger", Key=_key("c1", "bin")))[execute] == 1
        assert _calls(lambda: ddb.describe_table(TableName="ledger"))[execute] == 1
