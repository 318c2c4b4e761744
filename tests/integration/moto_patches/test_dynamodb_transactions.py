"""dynamodb_transactions.py: a transaction copies its table once (defect fix) or backs up only
its items (speed patch); a cancelled one leaves no stream record either way."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models.table import Table

from tests.integration.moto_patches.helpers import (
    PROFILES,
    _filled_ledger,
    _group_claim,
    _s,
    _scan,
    _stream_records,
    _streamed_table,
    moto_as,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("profile", "copies"), [("stock", 10), ("defects", 1), ("speed", 0)])
def test_a_transaction_copies_its_table_once_with_the_fixes_and_not_at_all_with_the_speed_patches(
    profile: str, copies: int
) -> None:
    with moto_as(profile) as ddb:
        # Given a ledger of 50 deliveries
        _filled_ledger(ddb, 50)
        # (moto tracks every instance it creates, table copies included: a copy is a new Table)
        before = len(Table.instances_tracked)

        # When two transactions claim 10 each, and a third is cancelled by its last item
        # (r000 is held already)
        assert "error" not in _group_claim(ddb, range(0, 10))
        tables_after_first = len(Table.instances_tracked)
        assert "error" not in _group_claim(ddb, range(10, 20))
        cancelled = _group_claim(ddb, [*range(20, 29), 0])

        # Then the table was copied `copies` times per transaction, and the cancelled one
        # rolled back all the same
        assert tables_after_first - before == copies
        assert len(Table.instances_tracked) - before == 3 * copies
        assert cancelled["error"] == "TransactionCanceledException"
        assert [r["Code"] for r in cancelled["CancellationReasons"]] == ["None"] * 9 + ["ConditionalCheckFailed"]
        states = {item["sk"]["S"]: item["state"]["S"] for item in _scan(ddb, "ledger")}
        assert [states[f"r{i:03}"] for i in range(20, 29)] == ["queued"] * 9
        assert [states[f"r{i:03}"] for i in range(0, 20)] == ["claimed"] * 20


@pytest.mark.parametrize("profile", PROFILES)
def test_a_cancelled_transaction_leaves_no_stream_record(profile: str) -> None:
    with moto_as(profile) as ddb:
        # Given a streamed table holding one item
        arn = _streamed_table(ddb)
        ddb.put_item(TableName="streamed", Item={"pk": _s("taken")})

        # When a transaction puts a new item, then fails its condition on the existing one
        with pytest.raises(ClientError, match="TransactionCanceledException"):
            ddb.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": "streamed", "Item": {"pk": _s("new")}}},
                    {
                        "Put": {
                            "TableName": "streamed",
                            "Item": {"pk": _s("taken")},
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )

        # Then the stream holds the first put only (the speed patches drop the cancelled
        # writes' records with their items; stock restores the whole table, stream included)
        assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in _stream_records(arn)] == ["taken"]
