"""dynamodb_streams.py: a disabled stream mapping leaves the stream to its reader."""

from __future__ import annotations

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
