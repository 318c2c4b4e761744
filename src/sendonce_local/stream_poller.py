"""A local stand-in for Lambda's DynamoDB stream event source mapping, against moto's server.

Like ``poller.py`` for SQS: moto cannot run Lambda code, so the counters' aggregator is
invoked from here. For each shard of each stream (parents before children):

- ``GetShardIterator`` after the checkpoint (``TRIM_HORIZON`` before the first), one
  ``GetRecords`` of up to ``batch_size`` records;
- the handler gets Lambda's DynamoDB stream event (``eventID``, ``eventName``,
  ``eventSource: aws:dynamodb``, ``dynamodb`` with ``ApproximateCreationDateTime`` in epoch
  seconds, ``eventSourceARN`` = the stream ARN), records in shard order;
- on a normal return the checkpoint moves to the batch's last sequence number; if the
  handler raises, nothing moves and the same records come again on the next round (Lambda
  retries until the records expire; there is no bisecting here).

A fresh iterator per round (not ``NextShardIterator``): a cancelled transaction in moto
puts back a copy of the whole table, stream included, so an iterator can point at a shard
object the table no longer holds. The shard list is read again every ``SHARD_LIST_ROUNDS``
rounds (a shard keeps its id in such a copy). An idle round waits ``interval_s``: a quarter of a
second, as Lambda polls a stream's shards four times a second. Idle, that is two requests
a stream a round; reading the shard list every round at ten rounds a second (before) was
60 requests a second for the aggregator's two streams, a fifth of a core in moto and
another in the poller on this machine, while the demo is bound by CPU.

moto 5.2.5 answers DescribeStream with one shard per table and keeps every record. Its own
stream mappings (``AWS::Lambda::EventSourceMapping`` on a stream) would invoke a function
on every write and, failing without Docker, drop the shard's records; the defect fix
``stream_mappings_invoke_enabled_only`` (moto_patches/dynamodb_streams.py) makes a disabled mapping do
nothing, and ``disable_moto_event_source_mappings`` disables it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sendonce.contract import AGGREGATOR_BATCH_SIZE, BATCH_RECORD_SK_PREFIX
from sendonce_local.poller import LocalLambdaContext

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
RecordFilter = Callable[[dict[str, Any]], bool]

# Lambda polls a DynamoDB stream's shards four times a second.
IDLE_INTERVAL_S = 0.25
# How many rounds a stream's shard list is used before DescribeStream is asked again (idle:
# five seconds).
SHARD_LIST_ROUNDS = 20


def inserted_batch_records(record: dict[str, Any]) -> bool:
    """The stack's filter on the campaigns table's mapping (sendonce_cdk/aggregator.py)."""
    sk = record["dynamodb"].get("Keys", {}).get("sk", {}).get("S", "")
    return bool(record.get("eventName") == "INSERT" and sk.startswith(BATCH_RECORD_SK_PREFIX))


@dataclass
class StreamCounters:
    invocations: int = 0
    records: int = 0
    errors: int = 0


def stream_arn_of(dynamodb_client: Any, table_name: str) -> str:
    table = dynamodb_client.describe_table(TableName=table_name)["Table"]
    if "LatestStreamArn" not in table:
        raise ValueError(f"table {table_name} has no stream")
    return str(table["LatestStreamArn"])


def lambda_record(record: dict[str, Any], stream_arn: str, region: str) -> dict[str, Any]:
    """One record of Lambda's DynamoDB stream event, from a GetRecords record."""
    data = dict(record["dynamodb"])
    created = data.get("ApproximateCreationDateTime")
    if isinstance(created, dt.datetime):
        data["ApproximateCreationDateTime"] = created.timestamp()
    return {
        "eventID": record["eventID"],
        "eventName": record["eventName"],
        "eventVersion": record.get("eventVersion", "1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": record.get("awsRegion", region),
        "dynamodb": data,
        "eventSourceARN": stream_arn,
    }


class StreamPoller:
    """Poll DynamoDB streams and invoke ``handler(event, context)`` like Lambda's mapping."""

    def __init__(
        self,
        *,
        streams_client: Any,
        stream_arns: list[str],
        handler: Handler,
        function_name: str = "sendonce-aggregator",
        batch_size: int = 100,
        function_timeout_s: float = 60.0,
        interval_s: float = IDLE_INTERVAL_S,
        filters: dict[str, RecordFilter] | None = None,
        batching_window_s: float = 0.0,
    ) -> None:
        """`filters`: per stream ARN, which records reach the handler (a mapping's filter
        criteria); the others are passed over, and the checkpoint moves past them.
        `batching_window_s`: the mapping's MaximumBatchingWindowInSeconds, as the running
        poller approximates it: after a round that filled no batch it waits that long, so
        that records gather into batches of the size Lambda would hand over (0: poll again
        at once, the tests' default)."""
        if not 1 <= batch_size <= 1000:
            raise ValueError("batch_size must be 1..1000 (GetRecords' limit)")
        self._streams = streams_client
        self._arns = list(stream_arns)
        self._handler = handler
        self._function_name = function_name
        self._batch_size = batch_size
        self._timeout_s = function_timeout_s
        self._interval_s = interval_s
        self._filters = dict(filters or {})
        self._window_s = batching_window_s
        self._full = False  # the last round filled a batch on some shard
        self._region = streams_client.meta.region_name
        self._checkpoints: dict[tuple[str, str], str] = {}
        self._shard_lists: dict[str, tuple[int, list[dict[str, Any]]]] = {}  # arn: (rounds left, shards)
        self._lock = threading.Lock()  # one round at a time: a shard's batches in order
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.counters = StreamCounters()

    def poll_once(self) -> int:
        """One round over every shard: at most one batch each. Returns the records delivered
        to a handler that returned (0: nothing new, or every handler raised)."""
        delivered = 0
        with self._lock:
            self._full = False
            for arn in self._arns:
                for shard in self._shards(arn):
                    delivered += self._poll_shard(arn, shard["ShardId"])
        return delivered

    def _shards(self, arn: str) -> list[dict[str, Any]]:
        rounds, shards = self._shard_lists.get(arn, (0, []))
        if rounds <= 0:
            rounds, shards = SHARD_LIST_ROUNDS, self._describe_shards(arn)
        self._shard_lists[arn] = (rounds - 1, shards)
        return shards

    def _describe_shards(self, arn: str) -> list[dict[str, Any]]:
        shards: list[dict[str, Any]] = []
        request: dict[str, Any] = {"StreamArn": arn}
        while True:
            description = self._streams.describe_stream(**request)["StreamDescription"]
            shards.extend(description.get("Shards", []))
            last = description.get("LastEvaluatedShardId")
            if not last:
                break
            request["ExclusiveStartShardId"] = last
        known = {s["ShardId"] for s in shards}
        # Parents first (a child's records follow its parent's).
        return sorted(shards, key=lambda s: s.get("ParentShardId") in known)

    def _poll_shard(self, arn: str, shard_id: str) -> int:
        checkpoint = self._checkpoints.get((arn, shard_id))
        request: dict[str, Any] = {"StreamArn": arn, "ShardId": shard_id}
        if checkpoint is None:
            request["ShardIteratorType"] = "TRIM_HORIZON"
        else:
            request.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=checkpoint)
        iterator = self._streams.get_shard_iterator(**request)["ShardIterator"]
        records = self._streams.get_records(ShardIterator=iterator, Limit=self._batch_size).get("Records", [])
        if not records:
            return 0
        self._full = self._full or len(records) == self._batch_size
        keep = self._filters.get(arn)
        selected = [r for r in records if keep is None or keep(r)]
        if not selected:
            self._checkpoints[(arn, shard_id)] = records[-1]["dynamodb"]["SequenceNumber"]
            return len(records)
        event = {"Records": [lambda_record(r, arn, self._region) for r in selected]}
        context = LocalLambdaContext(
            function_name=self._function_name,
            invoked_function_arn=f"arn:aws:lambda:{self._region}:000000000000:function:{self._function_name}",
            timeout_s=self._timeout_s,
        )
        self.counters.invocations += 1
        try:
            self._handler(event, context)
        except Exception:  # Lambda retries the same batch
            self.counters.errors += 1
            logger.warning("stream handler failed; the batch comes again", exc_info=True)
            return 0
        self._checkpoints[(arn, shard_id)] = records[-1]["dynamodb"]["SequenceNumber"]
        self.counters.records += len(records)
        return len(records)

    def drain(self, max_seconds: float = 60.0) -> StreamCounters:
        """Poll until a round finds nothing new. Raise TimeoutError when no record has been
        applied for ``max_seconds``: a stall, not a busy machine. A busy machine applies a
        large campaign's records for longer than that, and each round that applies some
        starts the wait again (the demo's 12,480 recipients, beside other runs, were still
        applying after 60 s)."""
        deadline = time.monotonic() + max_seconds
        errors = self.counters.errors
        while True:
            polled = self.poll_once()
            failed = self.counters.errors != errors
            if polled == 0 and not failed:
                return self.counters
            if polled and not failed:
                deadline = time.monotonic() + max_seconds
            errors = self.counters.errors
            if time.monotonic() > deadline:
                raise TimeoutError(f"streams applied no record for {max_seconds}s ({self.counters})")

    def start(self) -> StreamPoller:
        if self._thread is None:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name=f"{self._function_name}-streams", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> StreamCounters:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self.counters

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self.poll_once() == 0:
                    self._stopping.wait(self._interval_s)
                elif self._window_s and not self._full:
                    self._stopping.wait(self._window_s)
            except Exception:  # moto unreachable for a moment: poll again
                logger.warning("stream poll failed; retrying", exc_info=True)
                self._stopping.wait(0.5)

    def __enter__(self) -> StreamPoller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def aggregator_handler(session: Any, campaigns_table: str) -> Handler:
    """The deployed aggregator's handler, its service assembled on `session`."""
    import functools

    from sendonce.handlers import aggregator
    from sendonce.settings import AggregatorSettings
    from sendonce.wiring.aggregator import build_aggregator_service
    from sendonce.wiring.clients import Clients

    service = build_aggregator_service(AggregatorSettings(campaigns_table=campaigns_table), Clients(session))
    return functools.partial(aggregator.lambda_handler, service=service)


def counters_poller(
    session: Any,
    *,
    ledger_table: str,
    campaigns_table: str,
    handler: Handler | None = None,
    batch_size: int = AGGREGATOR_BATCH_SIZE,
    batching_window_s: float = 0.0,
) -> StreamPoller:
    """The counters' aggregator as the stack maps it: the ledger's stream whole, the
    campaigns table's inserted batch records; from the streams' beginning. `handler`:
    `aggregator_handler(session, campaigns_table)` unless given."""
    handler = handler or aggregator_handler(session, campaigns_table)
    dynamodb = session.client("dynamodb")
    ledger, campaigns = stream_arn_of(dynamodb, ledger_table), stream_arn_of(dynamodb, campaigns_table)
    return StreamPoller(
        streams_client=session.client("dynamodbstreams"),
        stream_arns=[ledger, campaigns],
        handler=handler,
        batch_size=batch_size,
        filters={campaigns: inserted_batch_records},
        batching_window_s=batching_window_s,
    )


def _load(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    """``python -m sendonce_local.stream_poller --table T [--table T2] --handler module:function
    [--batch-records-of T2]``:
    clients from the environment (``AWS_ENDPOINT_URL``); runs until killed, or with
    ``--drain`` until the streams hold nothing new, then prints its counters as JSON."""
    import boto3

    parser = argparse.ArgumentParser(prog="sendonce_local.stream_poller")
    parser.add_argument("--table", action="append", required=True)
    parser.add_argument("--handler", required=True)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument(
        "--batch-records-of", action="append", default=[], help="a table whose inserted batch records only count"
    )
    parser.add_argument("--drain", action="store_true")
    args = parser.parse_args(argv)
    session = boto3.session.Session()
    dynamodb = session.client("dynamodb")
    arns = [stream_arn_of(dynamodb, table) for table in args.table]
    filters: dict[str, RecordFilter] = {
        stream_arn_of(dynamodb, table): inserted_batch_records for table in args.batch_records_of
    }
    poller = StreamPoller(
        filters=filters,
        streams_client=session.client("dynamodbstreams"),
        stream_arns=arns,
        handler=_load(args.handler),
        batch_size=args.batch_size,
    )
    if args.drain:
        poller.drain()
    else:
        try:
            poller.start()
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            poller.stop()
    print(json.dumps(poller.counters.__dict__))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
