"""dynamodb_locking.py: the backend applies one call at a time (defect fix); with the speed
patches, the lock is held until the answer is written."""

from __future__ import annotations

import pytest
from moto.dynamodb.models.table import Table

from tests.integration.moto_patches.helpers import (
    _answers_while_another_request_is_held,
    _filled_ledger,
    _key,
    _ledger_tables,
    moto_as,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("profile", "answered"), [("stock", True), ("defects", False), ("speed", False)])
def test_the_backend_applies_one_call_at_a_time_with_the_fixes(profile: str, answered: bool) -> None:
    with moto_as(profile) as ddb:
        # Given a request held inside the backend's write of an item
        _ledger_tables(ddb)

        def put() -> None:
            ddb.put_item(TableName="ledger", Item=_key("c1", "r1"))

        # When another request comes meanwhile, then stock moto serves it at once (the race
        # behind "dictionary changed size during iteration"), patched moto after the first
        assert _answers_while_another_request_is_held(ddb, Table, "put_item", put) is answered


@pytest.mark.parametrize(("profile", "answered"), [("stock", True), ("defects", True), ("speed", False)])
def test_the_speed_patches_hold_the_lock_while_the_answer_is_written(profile: str, answered: bool) -> None:
    # queries_read_one_partition hands out live items: no write may run until they are written
    from moto.dynamodb.responses import DynamoResult

    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 1)

        def read() -> None:
            ddb.get_item(TableName="ledger", Key=_key("c1", "r000"))

        assert _answers_while_another_request_is_held(ddb, DynamoResult, "__init__", read) is answered
