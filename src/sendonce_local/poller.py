"""A local stand-in for Lambda's SQS event source mapping, run against moto's server.

moto cannot run Lambda code (invoke needs Docker), and its own event source mapping
raises receive counts without running anything, so local runs switch moto's mappings
off (``disable_moto_event_source_mappings``) and poll with ``EventSourcePoller``:

- each of ``max_concurrency`` workers long-polls the queue for up to ``batch_size``
  messages and invokes the handler with Lambda's SQS event shape and a context whose
  remaining time counts down from the function timeout;
- on a normal return it deletes every message except the ``batchItemFailures``
  (an invalid response fails the whole batch, as Lambda does);
- if the handler raises, or runs past the function timeout, it deletes nothing and the
  batch returns after the visibility timeout. A timed-out handler cannot be killed: it
  keeps running in the background like a stale consumer, which the ledger must fence.

Redrive to the dead-letter queue after ``maxReceiveCount`` is left to the queue itself.

As a process (so chaos tests can kill a real consumer)::

    python -m sendonce_local.poller --queue-url URL --handler module:function \
        [--init module:function] [--batch-size N] [--timeout S] [--concurrency N] \
        [--function-name NAME] [--idle-seconds S] [--max-seconds S]

``--init`` is called once before polling starts, as Lambda runs a function's
initialisation outside its timeout: a runtime built there does not eat the first
invocation's time budget.

Clients come from the environment (``AWS_ENDPOINT_URL`` ...). Handler output goes to
stdout as usual; the poller's last stdout line is one JSON object of counters.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import importlib
import json
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]

_DELETE_BATCH_LIMIT = 10
_QUEUE_CHECK_INTERVAL_S = 0.5


class NotIdleError(TimeoutError):
    """The queue did not go idle within ``max_seconds``."""

    def __init__(self, message: str, counters: PollerCounters) -> None:
        super().__init__(message)
        self.counters = counters


@dataclass
class LocalLambdaContext:
    """The Lambda context object's attributes, with a real countdown to the timeout.

    Like the Python runtime, ``memory_limit_in_mb`` is a string (the runtime copies it
    from ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``).
    """

    function_name: str
    invoked_function_arn: str
    timeout_s: float
    function_version: str = "$LATEST"
    memory_limit_in_mb: str = "256"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = ""
    client_context: Any = None
    identity: Any = None
    tenant_id: str | None = None
    started_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if not self.log_group_name:
            self.log_group_name = f"/aws/lambda/{self.function_name}"
        if not self.log_stream_name:
            day = time.strftime("%Y/%m/%d", time.gmtime())
            self.log_stream_name = f"{day}/[{self.function_version}]{uuid.uuid4().hex}"

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` value at which the invocation times out."""
        return self.started_at + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


def build_sqs_event(messages: Iterable[Mapping[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """Lambda's SQS event for messages as boto3's ``receive_message`` returns them."""
    return {"Records": [_sqs_record(message, queue_arn, region) for message in messages]}


def _sqs_record(message: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: _lambda_message_attribute(value) for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def _lambda_message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    attribute: dict[str, Any] = {}
    if "StringValue" in value:
        attribute["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
    attribute["stringListValues"] = list(value.get("StringListValues", []))
    attribute["binaryListValues"] = [base64.b64encode(v).decode("ascii") for v in value.get("BinaryListValues", [])]
    attribute["dataType"] = value["DataType"]
    return attribute


@dataclass(frozen=True)
class PollerCounters:
    invocations: int = 0
    messages_received: int = 0
    messages_deleted: int = 0
    failures_reported: int = 0
    """Messages the handler named in ``batchItemFailures``."""
    errors: int = 0
    """Invocations that raised or returned a response Lambda would reject."""
    timeouts: int = 0
    abandoned_running: int = 0
    """Timed-out handlers still running in the background right now."""

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class EventSourcePoller:
    """Poll an SQS queue and invoke ``handler(event, context)`` like Lambda's event source mapping."""

    def __init__(
        self,
        *,
        sqs_client: Any,
        queue_url: str,
        handler: Handler,
        function_name: str = "sendonce-consumer",
        batch_size: int = 10,
        function_timeout_s: float = 60.0,
        max_concurrency: int = 2,
        wait_time_s: int = 1,
        visibility_timeout_s: int | None = None,
        report_batch_item_failures: bool = True,
    ) -> None:
        if not 1 <= batch_size <= 10:
            raise ValueError("batch_size must be 1..10 (no batching window here)")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self._sqs = sqs_client
        self._queue_url = queue_url
        self._handler = handler
        self._function_name = function_name
        self._batch_size = batch_size
        self._function_timeout_s = function_timeout_s
        self._max_concurrency = max_concurrency
        self._wait_time_s = wait_time_s
        self._visibility_timeout_s = visibility_timeout_s
        self._report_batch_item_failures = report_batch_item_failures

        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._workers: list[threading.Thread] = []
        self._abandoned: list[threading.Thread] = []
        self._counts = dict.fromkeys(
            ("invocations", "messages_received", "messages_deleted", "failures_reported", "errors", "timeouts"), 0
        )
        self._in_flight = 0
        self._last_activity = time.monotonic()
        self._queue_arn = ""
        self._region = ""
        self._function_arn = ""

    @property
    def running(self) -> bool:
        return bool(self._workers)

    @property
    def counters(self) -> PollerCounters:
        with self._lock:
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            return PollerCounters(**self._counts, abandoned_running=len(self._abandoned))

    def start(self) -> EventSourcePoller:
        if self._workers:
            return self
        self._resolve_queue()
        self._stopping.clear()
        with self._lock:
            self._last_activity = time.monotonic()
        self._workers = [
            threading.Thread(target=self._poll, name=f"{self._function_name}-poller-{n}", daemon=True)
            for n in range(self._max_concurrency)
        ]
        for worker in self._workers:
            worker.start()
        return self

    def stop(self) -> PollerCounters:
        """Stop polling; invocations in progress finish (or time out) first."""
        self._stopping.set()
        for worker in self._workers:
            worker.join()
        self._workers = []
        return self.counters

    def join_abandoned(self, timeout_s: float) -> bool:
        """Wait for timed-out handlers still running in the background; True if none is left."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            abandoned = list(self._abandoned)
        for thread in abandoned:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self.counters.abandoned_running == 0

    def run_until_idle(self, idle_seconds: float = 2.0, max_seconds: float = 60.0) -> PollerCounters:
        """Poll until nothing was received for ``idle_seconds``, nothing is in flight and the
        queue holds no visible, invisible or delayed message; raise ``NotIdleError`` after
        ``max_seconds``. Stops the workers again if this call started them.
        """
        started_here = not self.running
        self.start()
        try:
            if not self._wait_until_idle(idle_seconds, time.monotonic() + max_seconds):
                raise NotIdleError(f"queue not idle after {max_seconds}s", self.counters)
            return self.counters
        finally:
            if started_here:
                self.stop()

    def _wait_until_idle(
        self, idle_seconds: float, deadline: float, interrupted: threading.Event | None = None
    ) -> bool:
        """True once idle; False at the deadline or when ``interrupted`` is set."""
        next_queue_check = 0.0
        while interrupted is None or not interrupted.is_set():
            now = time.monotonic()
            with self._lock:
                quiet = self._in_flight == 0 and now - self._last_activity >= idle_seconds
            if quiet and now >= next_queue_check:
                if self._queue_is_empty():
                    return True
                next_queue_check = now + _QUEUE_CHECK_INTERVAL_S
            if now >= deadline:
                return False
            time.sleep(0.05)
        return False

    def __enter__(self) -> EventSourcePoller:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _resolve_queue(self) -> None:
        attributes = self._sqs.get_queue_attributes(QueueUrl=self._queue_url, AttributeNames=["QueueArn"])
        self._queue_arn = attributes["Attributes"]["QueueArn"]
        _, partition, _, region, account, _ = _arn_parts(self._queue_arn)
        self._region = region or self._sqs.meta.region_name
        self._function_arn = f"arn:{partition}:lambda:{self._region}:{account}:function:{self._function_name}"

    def _queue_is_empty(self) -> bool:
        attributes = self._sqs.get_queue_attributes(
            QueueUrl=self._queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        return all(int(count) == 0 for count in attributes.values())

    def _poll(self) -> None:
        receive_args: dict[str, Any] = {
            "QueueUrl": self._queue_url,
            "MaxNumberOfMessages": self._batch_size,
            "WaitTimeSeconds": self._wait_time_s,
            "AttributeNames": ["All"],
            "MessageSystemAttributeNames": ["All"],
            "MessageAttributeNames": ["All"],
        }
        if self._visibility_timeout_s is not None:
            receive_args["VisibilityTimeout"] = self._visibility_timeout_s
        while not self._stopping.is_set():
            try:
                messages = self._sqs.receive_message(**receive_args).get("Messages", [])
            except Exception:
                logger.warning("receive_message failed; retrying", exc_info=True)
                self._stopping.wait(0.5)
                continue
            if not messages:
                continue
            with self._lock:
                self._in_flight += len(messages)
                self._counts["messages_received"] += len(messages)
                self._last_activity = time.monotonic()
            try:
                self._invoke(messages)
            finally:
                with self._lock:
                    self._in_flight -= len(messages)
                    self._last_activity = time.monotonic()

    def _invoke(self, messages: Sequence[Mapping[str, Any]]) -> None:
        event = build_sqs_event(messages, self._queue_arn, self._region)
        context = LocalLambdaContext(
            function_name=self._function_name,
            invoked_function_arn=self._function_arn,
            timeout_s=self._function_timeout_s,
        )
        invocation = _Invocation(self._handler, event, context)
        with self._lock:
            self._counts["invocations"] += 1
        invocation.thread.start()
        invocation.thread.join(max(0.0, context.deadline - time.monotonic()))

        if invocation.thread.is_alive():
            logger.warning(
                "invocation %s timed out after %ss; its %d messages return after the visibility timeout",
                context.aws_request_id,
                self._function_timeout_s,
                len(messages),
            )
            with self._lock:
                self._counts["timeouts"] += 1
                self._abandoned.append(invocation.thread)
            return
        if invocation.error is not None:
            logger.warning(
                "invocation %s raised; the whole batch returns", context.aws_request_id, exc_info=invocation.error
            )
            with self._lock:
                self._counts["errors"] += 1
            return

        failed = self._failed_message_ids(invocation.result, messages)
        if failed is None:
            with self._lock:
                self._counts["errors"] += 1
            return
        with self._lock:
            self._counts["failures_reported"] += len(failed)
        deleted = self._delete([m for m in messages if m["MessageId"] not in failed])
        with self._lock:
            self._counts["messages_deleted"] += deleted

    def _failed_message_ids(self, result: Any, messages: Sequence[Mapping[str, Any]]) -> set[str] | None:
        """Message ids to keep, or None when Lambda would count the whole batch as failed."""
        if not self._report_batch_item_failures:
            return set()
        try:
            response = json.loads(json.dumps(result))
        except (TypeError, ValueError):
            logger.warning("handler response is not JSON; the whole batch returns")
            return None
        # Lambda counts a null response, or a null or empty list, as full success.
        if response is None:
            return set()
        if not isinstance(response, dict):
            logger.warning("handler response %r is not an object; the whole batch returns", response)
            return None
        failures = response.get("batchItemFailures") or []
        if not isinstance(failures, list):
            logger.warning("batchItemFailures %r is not a list; the whole batch returns", failures)
            return None
        received = {m["MessageId"] for m in messages}
        failed: set[str] = set()
        for failure in failures:
            identifier = failure.get("itemIdentifier") if isinstance(failure, dict) else None
            if not identifier or identifier not in received:
                logger.warning("invalid batchItemFailures entry %r; the whole batch returns", failure)
                return None
            failed.add(identifier)
        return failed

    def _delete(self, messages: Sequence[Mapping[str, Any]]) -> int:
        deleted = 0
        for start in range(0, len(messages), _DELETE_BATCH_LIMIT):
            chunk = messages[start : start + _DELETE_BATCH_LIMIT]
            entries = [{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(chunk)]
            try:
                response = self._sqs.delete_message_batch(QueueUrl=self._queue_url, Entries=entries)
            except Exception:
                logger.warning(
                    "delete_message_batch failed; %d messages will be redelivered", len(chunk), exc_info=True
                )
                continue
            deleted += len(response.get("Successful", []))
            for failure in response.get("Failed", []):
                logger.warning("could not delete message: %s", failure)
        return deleted


class _Invocation:
    """One handler call on its own thread, so a timeout can abandon it like Lambda ends the sandbox."""

    def __init__(self, handler: Handler, event: dict[str, Any], context: LocalLambdaContext) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(
            target=self._run, args=(handler, event, context), name=f"invocation-{context.aws_request_id}", daemon=True
        )

    def _run(self, handler: Handler, event: dict[str, Any], context: LocalLambdaContext) -> None:
        try:
            self.result = handler(event, context)
        except BaseException as exc:  # noqa: BLE001 - the runtime reports any exception as a failed invocation
            self.error = exc


def disable_moto_event_source_mappings(lambda_client: Any, function_name: str) -> list[dict[str, Any]]:
    """Switch off a function's event source mappings in moto and return their settings.

    moto's own mapping receives messages on every SendMessage, fails to invoke (no
    Docker) and makes them visible again, pushing them towards the dead-letter queue
    unseen. The returned settings are what a local poller should mimic: ``uuid``,
    ``queue_arn``, ``batch_size``, ``max_concurrency`` (ScalingConfig.MaximumConcurrency,
    None if unset), ``function_response_types``, ``maximum_batching_window_s`` and
    ``state`` (before disabling).
    """
    settings = []
    paginator = lambda_client.get_paginator("list_event_source_mappings")
    for page in paginator.paginate():
        for mapping in page.get("EventSourceMappings", []):
            if not _is_function(mapping.get("FunctionArn", ""), function_name):
                continue
            settings.append(
                {
                    "uuid": mapping["UUID"],
                    "queue_arn": mapping.get("EventSourceArn"),
                    "batch_size": mapping.get("BatchSize"),
                    "max_concurrency": (mapping.get("ScalingConfig") or {}).get("MaximumConcurrency"),
                    "function_response_types": list(mapping.get("FunctionResponseTypes") or []),
                    "maximum_batching_window_s": mapping.get("MaximumBatchingWindowInSeconds"),
                    "state": mapping.get("State"),
                }
            )
            lambda_client.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
    return settings


def _is_function(function_arn: str, function_name: str) -> bool:
    if function_arn == function_name:
        return True
    parts = function_arn.split(":")
    return len(parts) >= 7 and parts[5] == "function" and parts[6] == function_name


def _arn_parts(arn: str) -> tuple[str, str, str, str, str, str]:
    parts = arn.split(":", 5)
    if len(parts) != 6:
        raise ValueError(f"not an ARN: {arn!r}")
    return parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]


def import_handler(path: str) -> Handler:
    """``package.module:function`` -> the function."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"handler must look like module:function, got {path!r}")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{path} is not callable")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sendonce_local.poller",
        description="Poll an SQS queue and invoke a handler like Lambda's event source mapping.",
        epilog="Exit codes: 0 idle, stopped by SIGTERM/SIGINT or --max-seconds reached without --idle-seconds; "
        "3 --max-seconds reached before the queue went idle.",
    )
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--handler", required=True, help="module:function, called as handler(event, context)")
    parser.add_argument(
        "--init", default=None, help="module:function, called once before polling (Lambda's init phase)"
    )
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=60.0, help="function timeout in seconds")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--function-name", default="sendonce-consumer")
    parser.add_argument("--visibility-timeout", type=int, default=None)
    parser.add_argument("--idle-seconds", type=float, default=None, help="exit once the queue is idle this long")
    parser.add_argument("--max-seconds", type=float, default=None, help="exit after this long at most")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(threadName)s %(message)s")
    import boto3  # imported here so the module stays importable in handler-only test environments

    if args.init:
        import_handler(args.init)()
    poller = EventSourcePoller(
        sqs_client=boto3.client("sqs"),
        queue_url=args.queue_url,
        handler=import_handler(args.handler),
        function_name=args.function_name,
        batch_size=args.batch_size,
        function_timeout_s=args.timeout,
        max_concurrency=args.concurrency,
        visibility_timeout_s=args.visibility_timeout,
    )
    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: finishing invocations in progress", signum)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    deadline = time.monotonic() + args.max_seconds if args.max_seconds is not None else float("inf")
    exit_code = 0
    poller.start()
    try:
        if args.idle_seconds is not None:
            idle = poller._wait_until_idle(args.idle_seconds, deadline, interrupted=stop_requested)
            if not idle and not stop_requested.is_set():
                exit_code = 3
        else:
            while not stop_requested.is_set() and time.monotonic() < deadline:
                stop_requested.wait(min(1.0, max(0.0, deadline - time.monotonic())))
    finally:
        counters = poller.stop()
        print(json.dumps({**counters.as_dict(), "exit_code": exit_code}), flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
