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

        # A ledger's pages: stock moto lists the whole table for each of the 4
        assert _calls(pages)["moto/dynamodb/models/table.py:all_items"] == listings
        # A range-key condition (the campaign store's groups) goes to moto's own query
        by_prefix = _calls(lambda: pages(" AND begins_with(sk, :p)", **{":p": _s("r0")}))
        assert by_prefix["moto/dynamodb/models/table.py:all_items"] > 0


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
