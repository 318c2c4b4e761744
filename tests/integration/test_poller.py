"""The local event source poller against moto's server, with real boto3 clients.

Over 500 lines: the poller's behaviours against one moto server (receives, batch item
failures, redrive, visibility, signals), sharing its fixtures.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes import SQSEvent
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.parser.models import SqsModel

from sendonce_local.poller import (
    EventSourcePoller,
    LocalLambdaContext,
    disable_moto_event_source_mappings,
)

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER_ENV = "SENDONCE_TEST_POLLER_MARKER"


# --- handlers the subprocess tests import by dotted path ------------------------------


def announcing_handler(event: dict[str, Any], context: Any) -> None:
    """Write the batch's message ids to $SENDONCE_TEST_POLLER_MARKER, then block until killed."""
    marker = Path(os.environ[MARKER_ENV])
    marker.write_text(json.dumps([record["messageId"] for record in event["Records"]]))
    time.sleep(300)


def accepting_handler(event: dict[str, Any], context: Any) -> dict[str, list[Any]]:
    return {"batchItemFailures": []}


# --- helpers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    body: str
    message_id: str
    receive_count: int
    request_id: str
    started: float
    finished: float


class RecordingHandler:
    """Records every record it is given; ``fails(record)`` decides which to report as failed."""

    def __init__(
        self,
        fails: Callable[[dict[str, Any]], bool] = lambda record: False,
        before_return: Callable[[dict[str, Any], Any], None] = lambda event, context: None,
    ) -> None:
        self._fails = fails
        self._before_return = before_return
        self._lock = threading.Lock()
        self.calls: list[Call] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        started = time.monotonic()
        self._before_return(event, context)
        failures = [{"itemIdentifier": r["messageId"]} for r in event["Records"] if self._fails(r)]
        finished = time.monotonic()
        with self._lock:
            for record in event["Records"]:
                self.calls.append(
                    Call(
                        body=record["body"],
                        message_id=record["messageId"],
                        receive_count=int(record["attributes"]["ApproximateReceiveCount"]),
                        request_id=context.aws_request_id,
                        started=started,
                        finished=finished,
                    )
                )
        return {"batchItemFailures": failures}

    def bodies(self) -> list[str]:
        with self._lock:
            return sorted(call.body for call in self.calls)


@pytest.fixture
def sqs(aws_env: dict[str, str]) -> Any:
    return boto3.client("sqs")


@dataclass(frozen=True)
class Queue:
    url: str
    arn: str
    dlq_url: str | None = None


def make_queue(sqs: Any, *, visibility_timeout_s: int = 1, max_receive_count: int | None = None) -> Queue:
    name = f"poller-{uuid.uuid4().hex[:12]}"
    attributes = {"VisibilityTimeout": str(visibility_timeout_s)}
    dlq_url = None
    if max_receive_count is not None:
        dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
        dlq_arn = queue_arn(sqs, dlq_url)
        attributes["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count})
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    return Queue(url=url, arn=queue_arn(sqs, url), dlq_url=dlq_url)


def queue_arn(sqs: Any, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def send(sqs: Any, queue: Queue, *bodies: str) -> None:
    for start in range(0, len(bodies), 10):
        chunk = bodies[start : start + 10]
        sqs.send_message_batch(
            QueueUrl=queue.url, Entries=[{"Id": str(n), "MessageBody": body} for n, body in enumerate(chunk)]
        )


def depth(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def poller(sqs: Any, queue: Queue, handler: Callable[..., Any], **settings: Any) -> EventSourcePoller:
    return EventSourcePoller(sqs_client=sqs, queue_url=queue.url, handler=handler, **settings)


# --- the Lambda context ----------------------------------------------------------------


def test_context_counts_down_from_the_function_timeout_and_stops_at_zero() -> None:
    context = LocalLambdaContext(function_name="sendonce-consumer", invoked_function_arn="arn:x", timeout_s=0.3)

    assert 200 < context.get_remaining_time_in_millis() <= 300
    time.sleep(0.35)
    assert context.get_remaining_time_in_millis() == 0
    assert context.log_group_name == "/aws/lambda/sendonce-consumer"
    assert uuid.UUID(context.aws_request_id)


# --- deleting, failing, redriving ------------------------------------------------------


def test_successes_are_deleted_and_reported_failures_return_after_the_visibility_timeout(sqs: Any) -> None:
    # Given a queue with a 1 s visibility timeout and a handler failing "retry-*" on first receipt
    queue = make_queue(sqs, visibility_timeout_s=1)
    send(sqs, queue, "ok-1", "ok-2", "ok-3", "retry-1")
    handler = RecordingHandler(
        fails=lambda r: r["body"].startswith("retry") and r["attributes"]["ApproximateReceiveCount"] == "1"
    )

    # When the poller drains the queue
    counters = poller(sqs, queue, handler, max_concurrency=1).run_until_idle(idle_seconds=0.5, max_seconds=20)

    # Then successes were handled once and deleted, the failure came back once, later
    assert handler.bodies() == ["ok-1", "ok-2", "ok-3", "retry-1", "retry-1"]
    retries = [call for call in handler.calls if call.body == "retry-1"]
    assert [call.receive_count for call in retries] == [1, 2]
    assert retries[1].started - retries[0].finished >= 0.9
    assert counters.failures_reported == 1
    assert counters.messages_deleted == 4
    assert depth(sqs, queue.url) == 0


def test_a_message_failing_every_time_lands_in_the_dlq_after_max_receive_count(sqs: Any) -> None:
    # Given maxReceiveCount 2 and a handler that always fails "poison"
    queue = make_queue(sqs, visibility_timeout_s=1, max_receive_count=2)
    send(sqs, queue, "poison", "fine")
    handler = RecordingHandler(fails=lambda r: r["body"] == "poison")

    # When the poller drains the queue
    counters = poller(sqs, queue, handler).run_until_idle(idle_seconds=0.5, max_seconds=20)

    # Then the handler saw it exactly maxReceiveCount times, and the queue itself moved it
    assert [c.receive_count for c in handler.calls if c.body == "poison"] == [1, 2]
    assert counters.failures_reported == 2
    assert depth(sqs, queue.url) == 0
    dead = sqs.receive_message(QueueUrl=queue.dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in dead] == ["poison"]


def test_a_handler_that_raises_leaves_the_whole_batch(sqs: Any) -> None:
    # Given a handler that raises on its first invocation only
    queue = make_queue(sqs, visibility_timeout_s=1)
    send(sqs, queue, "a", "b", "c")
    raised = threading.Event()

    def raise_once(event: dict[str, Any], context: Any) -> None:
        if not raised.is_set():
            raised.set()
            raise RuntimeError("provider down")

    handler = RecordingHandler(before_return=raise_once)

    # When the poller drains the queue with one worker
    counters = poller(sqs, queue, handler, max_concurrency=1).run_until_idle(idle_seconds=0.5, max_seconds=20)

    # Then nothing was deleted by the failed invocation: every message came back for a second receive
    assert counters.errors == 1
    assert handler.bodies() == ["a", "b", "c"]
    assert {call.receive_count for call in handler.calls} == {2}
    assert counters.messages_deleted == 3
    assert depth(sqs, queue.url) == 0


def test_an_unknown_item_identifier_fails_the_whole_batch_as_lambda_does(sqs: Any) -> None:
    # Given a handler that names a message id that was not in its batch on the first receive
    queue = make_queue(sqs, visibility_timeout_s=1)
    send(sqs, queue, "a", "b")
    first_batch: list[str] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if not first_batch:
            first_batch.extend(r["body"] for r in event["Records"])
            return {"batchItemFailures": [{"itemIdentifier": "not-in-this-batch"}]}
        return {"batchItemFailures": []}

    # When the poller drains the queue with one worker
    counters = poller(sqs, queue, handler, max_concurrency=1).run_until_idle(idle_seconds=0.5, max_seconds=20)

    # Then the first batch was not deleted: it took a second invocation to drain
    assert sorted(first_batch) == ["a", "b"]
    assert counters.errors == 1
    assert counters.invocations == 2
    assert counters.messages_deleted == 2


def test_a_handler_overrunning_the_function_timeout_is_redelivered_while_still_running(sqs: Any) -> None:
    # Given a 1 s function timeout, a 1 s visibility timeout (the misconfiguration behind the
    # incident) and a handler whose first invocation blocks until the message is redelivered
    queue = make_queue(sqs, visibility_timeout_s=1)
    send(sqs, queue, "slow")
    redelivered = threading.Event()
    first_saw_redelivery: list[bool] = []
    remaining_at_end: list[int] = []

    def block_first_invocation(event: dict[str, Any], context: Any) -> None:
        if event["Records"][0]["attributes"]["ApproximateReceiveCount"] == "1":
            first_saw_redelivery.append(redelivered.wait(timeout=10))
            remaining_at_end.append(context.get_remaining_time_in_millis())
        else:
            # Hold the redelivered copy for the rest of the test: with a 1 s visibility timeout a
            # busy machine can let a second second pass between this receive and its delete, and a
            # third copy would arrive (CI: 3 calls, 1 failure in a clean-clone run of 5ea6676).
            record = event["Records"][0]
            sqs.change_message_visibility(
                QueueUrl=queue.url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=60
            )
            redelivered.set()

    handler = RecordingHandler(before_return=block_first_invocation)
    local = poller(sqs, queue, handler, function_timeout_s=1.0, max_concurrency=2)

    # When the poller drains the queue
    counters = local.run_until_idle(idle_seconds=0.5, max_seconds=20)

    # Then the first invocation timed out, the message was handled again while it still ran,
    # and only the second invocation's success deleted it
    assert counters.timeouts == 1
    assert local.join_abandoned(timeout_s=10)
    assert first_saw_redelivery == [True]
    assert remaining_at_end == [0]
    stale, fresh = sorted(handler.calls, key=lambda call: call.receive_count)
    assert stale.message_id == fresh.message_id
    assert stale.request_id != fresh.request_id
    assert fresh.started < stale.finished
    assert counters.messages_deleted == 1
    assert depth(sqs, queue.url) == 0


def test_workers_invoke_the_handler_concurrently_up_to_max_concurrency(sqs: Any) -> None:
    # Given three workers taking one message each, and a handler whose first invocations only
    # return once three are inside it at the same time; later ones return at once.
    # One meeting, not one per round: a barrier per round of three (the earlier shape) broke
    # for good when a round waited past its guard on a loaded CI machine, and every later
    # message then failed and stayed invisible past the idle wait ('queue not idle after 240s').
    # The visibility timeout outlasts the meeting's guard and the function timeout: a message
    # held at the meeting must not come back meanwhile (30 s did: handled twice).
    queue = make_queue(sqs, visibility_timeout_s=300)
    send(sqs, queue, *(f"m-{n}" for n in range(6)))
    # Hang guard, not a time budget; shorter than the function timeout so a hang is reported
    # as the handler's error rather than an abandoned invocation.
    guard_s = 90.0
    active = 0
    peak = 0
    met = threading.Condition()

    def meet(event: dict[str, Any], context: Any) -> None:
        nonlocal active, peak
        with met:
            late = peak >= 3
            active += 1
            peak = max(peak, active)
            met.notify_all()
            try:
                if late:
                    return
                if not met.wait_for(lambda: peak >= 3, timeout=guard_s):
                    raise AssertionError(f"only {peak} invocations ran at once within {guard_s}s")
                # The three stay a moment longer: a fourth worker, were there one, would join.
                met.wait(0.5)
            finally:
                active -= 1

    handler = RecordingHandler(before_return=meet)

    # When the poller drains the queue
    counters = poller(
        sqs, queue, handler, batch_size=1, max_concurrency=3, function_timeout_s=guard_s + 60
    ).run_until_idle(idle_seconds=0.5, max_seconds=240)

    # Then three invocations ran at once, never more, and all six messages were handled once
    assert counters.errors == 0
    assert peak == 3
    assert handler.bodies() == [f"m-{n}" for n in range(6)]
    assert counters.invocations == 6


# --- Powertools accepts the event and the context ---------------------------------------


def test_the_event_and_context_pass_powertools_parsing_batch_processing_and_logging(sqs: Any) -> None:
    # Given messages with string, number and binary attributes
    queue = make_queue(sqs, visibility_timeout_s=1)
    attributes = {
        "campaign": {"DataType": "String", "StringValue": "c-1"},
        "size": {"DataType": "Number", "StringValue": "100"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
    }
    sqs.send_message(QueueUrl=queue.url, MessageBody="good", MessageAttributes=attributes)
    sqs.send_message(QueueUrl=queue.url, MessageBody="bad", MessageAttributes=attributes)
    log = io.StringIO()
    powertools_logger = Logger(service="poller-test", logger_handler=logging.StreamHandler(log))
    processor = BatchProcessor(event_type=EventType.SQS)
    seen: list[SQSRecord] = []
    models: list[SqsModel] = []
    events: list[dict[str, Any]] = []

    def record_handler(record: SQSRecord) -> None:
        seen.append(record)
        if record.body == "bad" and record.attributes.approximate_receive_count == "1":
            raise ValueError("first attempt fails")

    @powertools_logger.inject_lambda_context
    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        events.append(event)
        models.append(SqsModel.model_validate(event))
        powertools_logger.info("batch", records=sum(1 for _ in SQSEvent(event).records))
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    # When the poller drains the queue
    counters = poller(sqs, queue, lambda_handler, max_concurrency=1).run_until_idle(idle_seconds=0.5, max_seconds=20)

    # Then the event has Lambda's shape exactly
    raw = events[0]["Records"][0]
    assert set(raw) == {
        "messageId", "receiptHandle", "body", "attributes", "messageAttributes",
        "md5OfBody", "eventSource", "eventSourceARN", "awsRegion",
    }  # fmt: skip
    assert {"ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp"} <= set(
        raw["attributes"]
    )
    assert raw["messageAttributes"]["campaign"] == {
        "stringValue": "c-1", "stringListValues": [], "binaryListValues": [], "dataType": "String"
    }  # fmt: skip
    assert raw["messageAttributes"]["blob"] == {
        "binaryValue": "AAE=", "stringListValues": [], "binaryListValues": [], "dataType": "Binary"
    }  # fmt: skip

    # And Powertools parsed every field, and its partial response drove deletion
    assert counters.errors == 0
    assert counters.failures_reported == 1
    assert sorted(r.body for r in seen) == ["bad", "bad", "good"]
    assert depth(sqs, queue.url) == 0
    record = seen[0]
    assert record.event_source == "aws:sqs"
    assert record.event_source_arn == queue.arn
    assert record.aws_region == "us-east-1"
    assert record.message_attributes["campaign"].string_value == "c-1"
    assert record.message_attributes["size"].data_type == "Number"
    assert base64.b64decode(record.message_attributes["blob"].binary_value) == b"\x00\x01"
    assert record.attributes.sent_timestamp and record.attributes.sender_id
    parsed = models[0].Records[0]
    assert parsed.md5OfBody and parsed.attributes.ApproximateFirstReceiveTimestamp
    log_lines = [json.loads(line) for line in log.getvalue().splitlines()]
    assert {line["function_name"] for line in log_lines} == {"sendonce-consumer"}
    assert log_lines[0]["function_arn"] == "arn:aws:lambda:us-east-1:123456789012:function:sendonce-consumer"
    assert uuid.UUID(log_lines[0]["function_request_id"])


def test_the_context_sets_powertools_idempotency_in_progress_expiry(aws_env: dict[str, str]) -> None:
    # Given an idempotency table in moto and a config registered with a context that has 30 s left
    dynamodb = boto3.client("dynamodb")
    table = f"idempotency-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    config = IdempotencyConfig()
    persistence = DynamoDBPersistenceLayer(table_name=table, boto3_client=dynamodb)
    context = LocalLambdaContext(function_name="sendonce-consumer", invoked_function_arn="arn:x", timeout_s=30)
    config.register_lambda_context(context)
    in_progress: list[dict[str, Any]] = []

    @idempotent_function(
        data_keyword_argument="delivery", config=config, persistence_store=persistence, key_prefix="poller-test"
    )
    def send(delivery: dict[str, str]) -> str:
        in_progress.extend(dynamodb.scan(TableName=table)["Items"])
        return "sent"

    # When the function runs
    now_ms = time.time() * 1000
    assert send(delivery={"campaign_id": "c-1", "recipient_id": "r-1"}) == "sent"

    # Then Powertools stored an in-progress expiry from the context's remaining time
    expiry_ms = int(in_progress[0]["in_progress_expiration"]["N"])
    assert now_ms + 25_000 <= expiry_ms <= now_ms + 31_000


# --- moto's own event source mapping ---------------------------------------------------


def test_disabling_moto_event_source_mappings_stops_moto_receiving_on_send(sqs: Any) -> None:
    # Given a function with an event source mapping on a queue, as a deployed stack has
    lambda_client = boto3.client("lambda")
    iam = boto3.client("iam")
    name = f"consumer-{uuid.uuid4().hex[:8]}"
    role = iam.create_role(
        RoleName=name,
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
                ],
            }
        ),
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return {}\n")
    lambda_client.create_function(
        FunctionName=name, Runtime="python3.11", Role=role, Handler="index.handler", Code={"ZipFile": code.getvalue()}
    )
    queue = make_queue(sqs, visibility_timeout_s=30)
    mapping = lambda_client.create_event_source_mapping(
        EventSourceArn=queue.arn,
        FunctionName=name,
        BatchSize=5,
        ScalingConfig={"MaximumConcurrency": 2},
        FunctionResponseTypes=["ReportBatchItemFailures"],
    )
    # moto's live mapping receives the message on send (no consumer ran) and puts it back
    send(sqs, queue, "before")
    before = _receive_one(sqs, queue)
    assert before["Attributes"]["ApproximateReceiveCount"] == "2"
    sqs.delete_message(QueueUrl=queue.url, ReceiptHandle=before["ReceiptHandle"])

    # When its mappings are disabled
    settings = disable_moto_event_source_mappings(lambda_client, name)

    # Then the settings were read, the mapping is off, and a new message is untouched until received
    assert settings == [
        {
            "uuid": mapping["UUID"],
            "queue_arn": queue.arn,
            "batch_size": 5,
            "max_concurrency": 2,
            "function_response_types": ["ReportBatchItemFailures"],
            "maximum_batching_window_s": mapping.get("MaximumBatchingWindowInSeconds"),
            "state": "Enabled",
        }
    ]
    assert lambda_client.get_event_source_mapping(UUID=mapping["UUID"])["State"] == "Disabled"
    send(sqs, queue, "after")
    assert _receive_one(sqs, queue)["Attributes"]["ApproximateReceiveCount"] == "1"


def _receive_one(sqs: Any, queue: Queue) -> dict[str, Any]:
    messages = sqs.receive_message(QueueUrl=queue.url, WaitTimeSeconds=1, MessageSystemAttributeNames=["All"])
    [message] = messages["Messages"]
    return message


# --- the process entry point -----------------------------------------------------------


def _start_poller_process(queue: Queue, handler: str, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    pythonpath = os.pathsep.join(str(REPO_ROOT / part) for part in ("src", "lambdas", "."))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sendonce_local.poller",
            "--queue-url",
            queue.url,
            "--handler",
            handler,
            "--concurrency",
            "1",
            *extra,
        ],
        cwd=REPO_ROOT,
        env={**os.environ, **env, "PYTHONPATH": pythonpath},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _counters(stdout: str) -> dict[str, int]:
    return json.loads(stdout.strip().splitlines()[-1])


def test_a_consumer_process_killed_mid_invocation_leaves_its_message_for_redelivery(
    sqs: Any, aws_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a consumer process in the middle of an invocation
    queue = make_queue(sqs, visibility_timeout_s=2)
    send(sqs, queue, "in-flight")
    marker = tmp_path / "batch.json"
    process = _start_poller_process(
        queue, f"{__name__}:announcing_handler", {**aws_env, MARKER_ENV: str(marker)}, "--timeout", "60"
    )
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), process.stderr.read() if process.poll() is not None else "no invocation in 20 s"
        killed_at = time.monotonic()
        [message_id] = json.loads(marker.read_text())

        # When it is killed without warning
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()

    # Then the message comes back after the visibility timeout, received a second time
    messages = sqs.receive_message(
        QueueUrl=queue.url, WaitTimeSeconds=5, VisibilityTimeout=30, MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert [m["MessageId"] for m in messages] == [message_id]
    assert messages[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    assert time.monotonic() - killed_at >= 1.0
    assert process.returncode == -signal.SIGKILL


def test_a_consumer_process_drains_until_idle_and_prints_its_counters(sqs: Any, aws_env: dict[str, str]) -> None:
    # Given three messages
    queue = make_queue(sqs, visibility_timeout_s=5)
    send(sqs, queue, "a", "b", "c")

    # When a consumer process runs until the queue is idle
    process = _start_poller_process(
        queue, f"{__name__}:accepting_handler", aws_env, "--idle-seconds", "0.5", "--max-seconds", "20"
    )
    stdout, stderr = process.communicate(timeout=30)

    # Then it exits 0 after deleting all three, and says so on its last stdout line
    assert process.returncode == 0, stderr
    counters = _counters(stdout)
    assert counters["messages_deleted"] == 3
    assert counters["exit_code"] == 0
    assert depth(sqs, queue.url) == 0


def test_a_consumer_process_stops_cleanly_on_sigterm(sqs: Any, aws_env: dict[str, str]) -> None:
    # Given a consumer process running with no idle limit, that has drained its queue
    queue = make_queue(sqs, visibility_timeout_s=5)
    process = _start_poller_process(queue, f"{__name__}:accepting_handler", aws_env)
    try:
        send(sqs, queue, "a", "b")
        deadline = time.monotonic() + 20
        while depth(sqs, queue.url) and time.monotonic() < deadline:
            time.sleep(0.1)

        # When it receives SIGTERM
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    # Then it exits 0 and prints its counters
    assert process.returncode == 0, stderr
    assert _counters(stdout)["messages_deleted"] == 2
