"""``EventSourcePoller``: Lambda's SQS event source mapping, run locally. Each of
``max_concurrency`` workers long-polls the queue, invokes the handler on a thread of its own
(abandoned, still running, when it outlives the function timeout), and deletes the messages
the handler did not report in ``batchItemFailures``."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from sendonce_local.poller.lambda_event import Handler, LocalLambdaContext, build_sqs_event

logger = logging.getLogger(__name__)

_DELETE_BATCH_LIMIT = 10
_QUEUE_CHECK_INTERVAL_S = 0.5


class NotIdleError(TimeoutError):
    """The queue did not go idle within ``max_seconds``."""

    def __init__(self, message: str, counters: PollerCounters) -> None:
        super().__init__(message)
        self.counters = counters


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
        """True once idle; False at the deadline or when ``interrupted`` is set.

        Idle takes two readings of an empty queue, ``_QUEUE_CHECK_INTERVAL_S`` apart, with
        nothing received in between. One is not enough: moto reads a queue's visible and
        its invisible messages at two instants, so a message whose visibility timeout ends
        between them is in neither count, and a worker may receive it while the reading
        is on its way back (a CI run returned the counters of an invocation in progress)."""
        next_queue_check = 0.0
        empty_at: float | None = None  # the activity stamp at the last reading of an empty queue
        while interrupted is None or not interrupted.is_set():
            now = time.monotonic()
            with self._lock:
                quiet = self._in_flight == 0 and now - self._last_activity >= idle_seconds
                stamp = self._last_activity
            if not quiet:
                empty_at = None
            elif now >= next_queue_check:
                if not self._queue_is_empty():
                    empty_at = None
                else:
                    with self._lock:
                        unchanged = self._in_flight == 0 and self._last_activity == stamp
                    if unchanged and empty_at == stamp:
                        return True
                    empty_at = stamp if unchanged else None
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


def _arn_parts(arn: str) -> tuple[str, str, str, str, str, str]:
    parts = arn.split(":", 5)
    if len(parts) != 6:
        raise ValueError(f"not an ARN: {arn!r}")
    return parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]
