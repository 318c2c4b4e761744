"""DynamoDB Streams: disabled mappings stay quiet, and stream reads take the DynamoDB lock
(defect fixes); GetRecords is written as JSON (a speed patch).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_dynamodb_streams.py.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

from sendonce_local.moto_patches.dynamodb_locking import DYNAMODB_LOCK
from sendonce_local.moto_patches.dynamodb_reads import json_answer
from sendonce_local.moto_patches.replacing import Replace


def stream_mappings_invoke_enabled_only(replace: Replace) -> None:
    """A disabled event source mapping on a DynamoDB stream still invokes its function, and
    a failed invoke empties the stream.

    ``StreamShard.add`` (every write to a table with a stream) calls every mapping of the
    table whatever its ``Enabled``; without Docker the invoke answers an error, which moto
    takes as delivered: it clears the shard's records, so GetRecords never sees them, and
    the next record reuses a sequence number already handed out. A deployed stack maps the
    counters' aggregator to the ledger's and the campaigns table's streams.

    The patch hides disabled mappings from ``add`` (local runs disable them and poll the
    stream themselves, ``sendonce_local.stream_poller``); an enabled mapping behaves as stock.
    """
    from moto.dynamodb.models.table import StreamShard

    stock = StreamShard.add

    @functools.wraps(stock)
    def add(self: Any, old: Any, new: Any) -> None:
        mappings = self.table.lambda_event_source_mappings
        enabled = {arn: esm for arn, esm in mappings.items() if getattr(esm, "enabled", True)}
        if len(enabled) == len(mappings):
            return stock(self, old, new)
        self.table.lambda_event_source_mappings = enabled
        try:
            return stock(self, old, new)
        finally:
            self.table.lambda_event_source_mappings = mappings

    replace(StreamShard, "add", add)


def stream_reads_under_the_dynamodb_lock(replace: Replace) -> None:
    """GetRecords can see the stream records of a transaction that is then cancelled.

    The DynamoDB Streams backend reads a table's stream shard without the lock that
    ``dynamodb_backend_one_call_at_a_time`` holds around each DynamoDB call, so a GetRecords
    served while a transaction is half applied returns records its rollback then takes
    back: a counter built from them counts writes that never happened.

    The patch takes the same lock around every method of ``DynamoDBStreamsBackend``.
    """
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend

    for name, function in list(vars(DynamoDBStreamsBackend).items()):
        if isinstance(function, types.FunctionType) and not name.startswith("__"):

            def locked(*args: Any, __function: Callable[..., Any] = function, **kwargs: Any) -> Any:
                with DYNAMODB_LOCK:
                    return __function(*args, **kwargs)


def stream_records_written_as_json(replace: Replace) -> None:
    """GetRecords goes through moto's generic, shape-driven response serializer.

    That walks every attribute of every record's images: ~6 ms per ledger record, 6 s of
    moto's CPU for one 1,000-record page, where ``json.dumps`` takes 45 ms. It bounded the
    counters' aggregator in the demo and bench-scale (py-spy on moto's server: 680 of 1,559
    busy samples in the serializer) and left the demo waiting minutes for it after the last
    send. The records are DynamoDB JSON already, except ``ApproximateCreationDateTime``,
    which the patch writes as the serializer does (epoch seconds, truncated to the
    millisecond). Anything else that does not serialize as JSON (binary values, which moto
    holds as bytes) and every other action go to moto's serializer.

    Trade: none expected; tests/integration/moto_patches/test_dynamodb_streams.py compares
    the two answers record by record.
    """
    from datetime import datetime

    from botocore.utils import parse_to_aware_datetime
    from moto.core.serialize import TimestampSerializer
    from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

    stock = DynamoDBStreamsHandler.serialized

    def timestamp(value: Any) -> Any:
        if isinstance(value, datetime):
            return TimestampSerializer._timestamp_unixtimestamp(parse_to_aware_datetime(value))
        raise TypeError(f"{type(value).__name__} is not JSON")

    @functools.wraps(stock)
    def serialized(self: Any, action_result: Any) -> Any:
        result = action_result.result
        if isinstance(result, dict) and self._get_action() == "GetRecords":
            answer = json_answer(self, result, default=timestamp)
            if answer is not None:
                return answer
        return stock(self, action_result)

    replace(DynamoDBStreamsHandler, "serialized", serialized)
