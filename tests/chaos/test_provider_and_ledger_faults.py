"""Chaos: provider throttling storms, provider 5xx bursts, ledger throttling, and batch mode
under kills and concurrent consumers. Every scenario counts deliveries at the provider
(no duplicate) and reads every recipient's ledger state (no silent loss)."""

from __future__ import annotations

import functools
import json
import threading

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from sendonce.domain.models import DeliveryState
from sendonce.handlers import consumer
from sendonce.settings import ConsumerSettings
from sendonce.wiring.clients import Clients
from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime

pytestmark = pytest.mark.chaos


def states(system, campaign_id="c1"):
    return {r.recipient_id: r.state for r in system.operator.records(campaign_id)}


def assert_once_each(deliveries: dict, n: int):
    assert len(deliveries) == n and set(deliveries.values()) == {1}, deliveries


class _Raw:
    """A minimal raw body botocore can read."""

    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_):
        yield self._body


def inject(
    session: boto3.session.Session,
    service: str,
    operations: set[str],
    count: int,
    status: int,
    body: dict,
    headers: dict | None = None,
):
    """Answer the first `count` calls of `operations` with an error response, before they reach
    the server: botocore parses it as a real one (and retries it as it would a real one)."""
    left = {"n": count}
    lock = threading.Lock()

    def handler(request, **kwargs):
        with lock:
            if left["n"] <= 0:
                return None
            left["n"] -= 1
        payload = json.dumps(body).encode()
        return AWSResponse(
            request.url, status, {"Content-Type": "application/x-amz-json-1.0", **(headers or {})}, _Raw(payload)
        )

    for operation in operations:
        session.events.register(f"before-send.{service}.{operation}", handler)
    return left


def handler_with(system, session: boto3.session.Session):
    settings = ConsumerSettings.from_env(system.env)
    runtime = build_consumer_runtime(settings, build_consumer_parts(settings, Clients(session)))
    return functools.partial(consumer.lambda_handler, runtime=runtime)


def test_a_storm_of_provider_429s_slows_everyone_and_fails_nobody(system, monkeypatch):
    monkeypatch.setenv("SENDONCE_RESEND_REQUESTS_PER_SECOND", "40")
    # Not learning the limit from Resend's headers: a provider that states none, or one
    # whose team is shared with another sender, answers with 429s instead.
    monkeypatch.setenv("SENDONCE_RESEND_RATE_FROM_HEADERS", "false")
    system.resend.set_rate_limit(8)  # the provider allows far less than we were told
    # and its first answers are 429s whatever our speed (a loaded machine may stay under 8/s)
    system.resend.fail_next(12, 429)
    system.campaign()
    system.operator.publish("c1", system.recipients(60))

    system.poller(concurrency=2).run_until_idle(idle_seconds=3, max_seconds=120)

    assert_once_each(system.deliveries(), 60)
    assert system.resend.stats()["errors"].get("rate_limit_exceeded", 0) >= 12
    assert set(states(system).values()) == {DeliveryState.SENT}  # throttling never ends as failed


def test_a_burst_of_resend_5xx_is_retried_under_the_same_key(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(30))
    system.resend.fail_next(12, 500)  # not accepted, answered 500: ambiguous to the consumer

    system.poller().run_until_idle(idle_seconds=3, max_seconds=90)

    assert_once_each(system.deliveries(), 30)
    assert set(states(system).values()) == {DeliveryState.SENT}


def test_a_burst_of_ses_5xx_ends_those_recipients_unknown_never_resent(system):
    system.campaign(provider="ses")
    system.operator.publish("c1", system.recipients(20))
    session = boto3.session.Session()
    inject(session, "sesv2", {"SendEmail"}, 3, 500, {"__type": "InternalFailure", "message": "internal error"})

    system.poller(handler=handler_with(system, session)).run_until_idle(idle_seconds=2, max_seconds=60)

    final = states(system)
    unknown = [r for r, s in final.items() if s is DeliveryState.UNKNOWN]
    assert len(unknown) == 3 and all(s is DeliveryState.SENT for r, s in final.items() if r not in unknown)
    deliveries = system.deliveries("ses")
    assert len(deliveries) == 17 and set(deliveries.values()) == {1}  # SES said 500: nothing accepted here
    assert system.operator.status("c1").unknown == 3


def test_ledger_throttling_neither_duplicates_nor_loses(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(20))
    session = boto3.session.Session()
    throttled = inject(
        session,
        "dynamodb",
        {"UpdateItem", "GetItem"},
        12,
        400,
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "message": "The level of configured provisioned throughput for the table was exceeded.",
        },
    )

    system.poller(handler=handler_with(system, session), timeout_s=30).run_until_idle(idle_seconds=3, max_seconds=120)

    assert throttled["n"] == 0  # every injected throttle was hit
    assert_once_each(system.deliveries(), 20)
    assert set(states(system).values()) == {DeliveryState.SENT}


def test_batch_mode_two_consumers_on_the_same_message_send_each_recipient_once(system):
    system.campaign(delivery_mode="batch")
    system.operator.publish("c1", system.recipients(60))
    sqs = boto3.client("sqs")
    body = sqs.receive_message(QueueUrl=system.resources.queue_url, VisibilityTimeout=0)["Messages"][0]["Body"]
    sqs.send_message(QueueUrl=system.resources.queue_url, MessageBody=body)
    system.resend.set_latency(200, 400)

    first, second = system.poller(), system.poller()
    first.start(), second.start()
    first.run_until_idle(idle_seconds=3, max_seconds=60)
    second.stop()

    assert_once_each(system.deliveries(), 60)
    assert set(states(system).values()) == {DeliveryState.SENT}


def test_batch_killed_after_accept_is_replayed_with_the_same_key_and_members(system, tmp_path):
    system.campaign(delivery_mode="batch")
    system.operator.publish("c1", system.recipients(40))

    # The dead consumer's lease (its 20 s timeout) holds the group; the message must still come
    # back after it ends, whatever the machine's load did to the receives before (this
    # fixture's 5 receives 2 s apart once ran out first: no replay, the batch dead-lettered).
    system.receives_outlast(90)
    # A 20 s function (5 s of it the safety margin): an 8 s one left 3 s to claim 40 recipients,
    # which four CPU hogs beside the suite made too little (it never sent, so never died).
    dead = system.consumer_process(
        timeout_s=20,
        extra_env={
            "SENDONCE_FAULTS": json.dumps([{"at": "after_accept", "recipient_id": "r3"}]),
            "SENDONCE_FAULT_MARKERS": str(tmp_path),
        },
    )
    assert system.exit_code(dead) == -9
    assert set(states(system).values()) == {DeliveryState.CLAIMED}
    system.poller().run_until_idle(idle_seconds=2, max_seconds=120)

    assert_once_each(system.deliveries(), 40)
    assert system.resend.stats()["replays"] == 1  # the same request, answered from Resend's key store
    assert set(states(system).values()) == {DeliveryState.SENT}
