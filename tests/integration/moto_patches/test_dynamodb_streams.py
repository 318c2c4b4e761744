"""dynamodb_streams.py: a disabled stream mapping leaves the stream to its reader; the
speed patches write GetRecords as JSON, which boto3 reads as it reads stock moto's answer."""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from tests.integration.moto_patches.helpers import (
    _lambda_function,
    _s,
    _stream_records,
    _streamed_table,
    moto_as,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("profile", "kept"), [("stock", 0), ("defects", 3), ("speed", 3)])
def test_a_disabled_stream_mapping_leaves_the_stream_to_its_reader_with_the_fixes(
    profile: str, kept: int, no_docker: None
) -> None:
    with moto_as(profile) as ddb:
        # Given a table's stream mapped to a function (which cannot run), the mapping disabled
        arn = _streamed_table(ddb)
        _lambda_function()
        mapping = boto3.client("lambda").create_event_source_mapping(
            EventSourceArn=arn, FunctionName="fn", StartingPosition="TRIM_HORIZON"
        )
        boto3.client("lambda").update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)

        # When three items are written
        for i in range(3):
            ddb.put_item(TableName="streamed", Item={"pk": _s(f"r{i}")})

        # Then (patched) a reader of the stream gets the three records; stock moto's failed
        # invoke took them
        records = _stream_records(arn)
        assert len(records) == kept
        assert len({r["dynamodb"]["SequenceNumber"] for r in records}) == kept


@pytest.fixture
def moto_threaded_server() -> Iterator[str]:
    """moto's server in this process, so that patches applied here apply to it."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def _every_kind_of_record(endpoint: str, binary: bool = False) -> tuple[list[dict[str, Any]], int]:
    """Insert, modify and remove items holding every kind of attribute value on a streamed
    table; the stream's records as boto3 reads them, and how often moto's shape-driven
    serializer answered GetRecords meanwhile."""
    from moto.core.responses import ActionResult

    client = functools.partial(boto3.client, endpoint_url=endpoint, region_name="us-east-1")
    ddb = client("dynamodb")
    table = f"streamed-{uuid.uuid4().hex[:8]}"  # the server's moto is this process's: fresh names
    arn = _streamed_table(ddb, table)
    item = {
        "s": _s('é "quoted" \\ </>'),
        "n": {"N": "-12.50"},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2.5"]},
        "bool": {"BOOL": False},
        "null": {"NULL": True},
        "list": {"L": [_s("x"), {"M": {"deep": {"L": [{"N": "1"}]}}}]},
        "map": {"M": {"at": {"N": "1796295894718"}, "empty": {"M": {}}}},
        **({"b": {"B": b"\xff\x00"}} if binary else {}),
    }
    for i in range(3):
        ddb.put_item(TableName=table, Item={"pk": _s(f"r{i}"), **item})
    ddb.update_item(
        TableName=table,
        Key={"pk": _s("r0")},
        UpdateExpression="SET #s = :s ADD n :one",
        ExpressionAttributeNames={"#s": "s"},
        ExpressionAttributeValues={":s": _s("changed"), ":one": {"N": "1"}},
    )
    ddb.delete_item(TableName=table, Key={"pk": _s("r1")})

    streams = client("dynamodbstreams")
    [shard] = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    stock_execute = ActionResult.execute_result
    answered: list[str] = []

    def execute_result(self: Any, context: Any) -> Any:
        answered.append(context.operation_model.name)
        return stock_execute(self, context)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ActionResult, "execute_result", execute_result)
        page = streams.get_records(ShardIterator=iterator, Limit=1000)
    return page["Records"], answered.count("GetRecords")


@pytest.mark.parametrize(("profile", "serialized"), [("stock", 1), ("defects", 1), ("speed", 0)])
def test_the_speed_patches_write_stream_records_as_json_as_stock_moto_reads_them(
    profile: str, serialized: int, moto_threaded_server: str
) -> None:
    from sendonce_local import moto_patches

    stock_records, _ = _every_kind_of_record(moto_threaded_server)

    # Given moto as the profile: when the same writes are read from the stream
    with contextlib.ExitStack() as stack:
        if profile != "stock":
            stack.enter_context(moto_patches.patched(speed=profile == "speed"))
        records, answered = _every_kind_of_record(moto_threaded_server)

    # Then only the speed patches skip the serializer, and boto3 reads the same records:
    # every field alike but the ids, times and sizes (the size counts the time's digits),
    # which each write makes anew
    assert answered == serialized
    assert [r["eventName"] for r in records] == ["INSERT"] * 3 + ["MODIFY", "REMOVE"]

    def comparable(record: dict[str, Any]) -> dict[str, Any]:
        dynamodb = dict(record["dynamodb"])
        created = dynamodb.pop("ApproximateCreationDateTime")
        assert created.microsecond % 1000 == 0  # to the millisecond, as the serializer writes it
        dynamodb.pop("SequenceNumber")
        assert dynamodb.pop("SizeBytes") > 0
        return {**{k: v for k, v in record.items() if k != "eventID"}, "dynamodb": dynamodb}

    assert [comparable(r) for r in records] == [comparable(r) for r in stock_records]


def test_stream_records_with_binary_values_keep_moto_s_serializer(moto_threaded_server: str) -> None:
    from sendonce_local import moto_patches

    with moto_patches.patched(speed=True):
        records, answered = _every_kind_of_record(moto_threaded_server, binary=True)
    assert answered == 1
    assert records[0]["dynamodb"]["NewImage"]["b"] == {"B": b"\xff\x00"}
