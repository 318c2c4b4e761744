"""The real consumer handler, over HTTP to moto's server and the local Resend server,
deliveries counted at the provider."""

from __future__ import annotations

import json
import time

import boto3
import pytest

from sendonce.domain.models import DeliveryState
from sendonce_local.demo import baseline
from sendonce_ops.sqs_tools import queue_depths

pytestmark = pytest.mark.chaos


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not reached in time")


def states(system, campaign_id: str = "c1") -> dict[str, DeliveryState]:
    return {r.recipient_id: r.state for r in system.operator.records(campaign_id)}


def run_incident(system, handler_a, handler_b, n: int = 20):
    """Consumer A's provider call is accepted, then stalls past the visibility timeout;
    consumer B receives the redelivered message meanwhile."""
    system.resend.stall_next(1, 4.0)
    a = system.poller(handler=handler_a)
    b = system.poller(handler=handler_b)
    a.start()
    wait_for(lambda: system.resend.in_flight() or system.resend.stats()["emails_accepted"])
    b.start()
    a.run_until_idle(idle_seconds=3, max_seconds=40)
    b.run_until_idle(idle_seconds=1, max_seconds=20)


def test_the_incident_each_recipient_receives_exactly_one_email(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(20))

    run_incident(system, system.handler(), system.handler())

    deliveries = system.deliveries()
    assert len(deliveries) == 20 and set(deliveries.values()) == {1}
    assert set(states(system).values()) == {DeliveryState.SENT}


def test_the_incident_without_the_ledger_sends_duplicates(system):
    """The mechanism matters: the generic send-then-ack consumer, same faults."""
    system.campaign()
    system.operator.publish("c1", system.recipients(20))

    run_incident(system, baseline.lambda_handler, baseline.lambda_handler)

    deliveries = system.deliveries()
    assert len(deliveries) == 20
    assert sum(deliveries.values()) > 20  # the redelivered batch was sent again


def test_two_consumers_on_the_same_message_at_once_send_each_recipient_once(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(30))
    system.resend.set_latency(20, 60)
    body = boto3.client("sqs").receive_message(QueueUrl=system.resources.queue_url, MaxNumberOfMessages=1)["Messages"][
        0
    ]["Body"]
    boto3.client("sqs").send_message(QueueUrl=system.resources.queue_url, MessageBody=body)  # a duplicate delivery
    system.resend.set_latency(20, 60)

    p1, p2 = system.poller(), system.poller()
    p1.start(), p2.start()
    p1.run_until_idle(idle_seconds=3, max_seconds=40)
    p2.stop()

    deliveries = system.deliveries()
    assert len(deliveries) == 30 and set(deliveries.values()) == {1}


def test_publishing_the_same_campaign_twice_does_not_double_send(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(150))
    # A publisher retrying a batch: the same message body arrives twice.
    sqs = boto3.client("sqs")
    body = sqs.receive_message(QueueUrl=system.resources.queue_url, MaxNumberOfMessages=1, VisibilityTimeout=0)[
        "Messages"
    ][0]["Body"]
    sqs.send_message(QueueUrl=system.resources.queue_url, MessageBody=body)
    again = system.operator.publish("c1", system.recipients(150))

    system.poller(concurrency=2).run_until_idle(idle_seconds=2, max_seconds=60)

    assert again.messages_sent == 0
    deliveries = system.deliveries()
    assert len(deliveries) == 150 and set(deliveries.values()) == {1}
    status = system.operator.status("c1")
    assert (status.total, status.sent, status.remaining, status.state.value) == (150, 150, 0, "completed")


def test_consumer_killed_after_the_provider_accepted_before_the_ledger_heard(system, tmp_path):
    system.campaign()
    system.operator.publish("c1", system.recipients(10))

    dead = system.consumer_process(
        timeout_s=8,
        extra_env={
            "SENDONCE_FAULTS": json.dumps([{"at": "after_accept", "recipient_id": "r3"}]),
            "SENDONCE_FAULT_MARKERS": str(tmp_path),
        },
    )
    assert system.exit_code(dead) == -9  # SIGKILL: a real process died mid-batch
    assert states(system).get("r3") is DeliveryState.CLAIMED

    system.poller().run_until_idle(idle_seconds=2, max_seconds=40)

    deliveries = system.deliveries()
    assert len(deliveries) == 10 and set(deliveries.values()) == {1}
    assert set(states(system).values()) == {DeliveryState.SENT}


def test_ses_consumer_killed_after_accept_leaves_the_recipient_unknown_never_twice(system, tmp_path):
    system.campaign(provider="ses")
    system.operator.publish("c1", system.recipients(10))

    dead = system.consumer_process(
        timeout_s=8,
        extra_env={
            "SENDONCE_FAULTS": json.dumps([{"at": "after_accept", "recipient_id": "r3"}]),
            "SENDONCE_FAULT_MARKERS": str(tmp_path),
            "SENDONCE_SEND_CONCURRENCY": "1",
        },
    )
    assert system.exit_code(dead) == -9
    system.poller().run_until_idle(idle_seconds=2, max_seconds=40)

    deliveries = system.deliveries("ses")
    assert len(deliveries) == 10 and set(deliveries.values()) == {1}
    final = states(system)
    assert final.pop("r3") is DeliveryState.UNKNOWN
    assert set(final.values()) == {DeliveryState.SENT}
    assert system.operator.status("c1").unknown == 1


def test_ses_consumer_killed_after_the_claim_before_the_send_is_sent_once_later(system, tmp_path):
    system.campaign(provider="ses")
    system.operator.publish("c1", system.recipients(10))

    # One send at a time, so no other delivery is mid-call when the process dies (with
    # SES such a delivery would rightly end unknown; the next test covers that).
    dead = system.consumer_process(
        timeout_s=8,
        extra_env={
            "SENDONCE_FAULTS": json.dumps([{"at": "after_claim", "recipient_id": "r5"}]),
            "SENDONCE_FAULT_MARKERS": str(tmp_path),
            "SENDONCE_SEND_CONCURRENCY": "1",
        },
    )
    assert system.exit_code(dead) == -9
    system.poller().run_until_idle(idle_seconds=2, max_seconds=40)

    deliveries = system.deliveries("ses")
    assert len(deliveries) == 10 and set(deliveries.values()) == {1}
    assert set(states(system).values()) == {DeliveryState.SENT}


def test_ledger_write_failing_after_a_send_does_not_duplicate(system, tmp_path, monkeypatch):
    system.campaign()
    system.operator.publish("c1", system.recipients(10))
    monkeypatch.setenv("SENDONCE_FAULTS", json.dumps([{"at": "ledger_write_fails", "recipient_id": "r2"}]))
    monkeypatch.setenv("SENDONCE_FAULT_MARKERS", str(tmp_path))
    from sendonce_local import faults

    faults._runtime.cache_clear()
    system.poller(handler=faults.lambda_handler, timeout_s=8).run_until_idle(idle_seconds=6, max_seconds=40)

    deliveries = system.deliveries()
    assert len(deliveries) == 10 and set(deliveries.values()) == {1}
    assert set(states(system).values()) == {DeliveryState.SENT}


def test_poison_messages_are_kept_in_the_dlq_with_their_reason_and_not_retried(system):
    system.campaign()
    sqs = boto3.client("sqs")
    too_many = {
        "schema_version": 1,
        "campaign_id": "c1",
        "batch_id": "b1",
        "recipients": [{"recipient_id": f"r{i}", "email": f"u{i}@x.example.com"} for i in range(101)],
    }
    for body in ("{not json", json.dumps({"schema_version": 1, "campaign_id": "c1"}), json.dumps(too_many)):
        sqs.send_message(QueueUrl=system.resources.queue_url, MessageBody=body)

    counters = system.poller().run_until_idle(idle_seconds=1, max_seconds=20)

    assert counters.invocations == 3  # each seen once: no retry storm
    reasons = sorted(m["MessageAttributes"]["sendonce-poison-reason"]["StringValue"] for m in system.dead_letters())
    assert len(reasons) == 3
    assert any("not JSON" in r for r in reasons)
    assert any("recipients: Field required" in r for r in reasons)
    assert any("at most 100" in r for r in reasons)
    assert system.deliveries() == {}


def test_an_invalid_address_fails_only_that_recipient_with_its_reason(system):
    from sendonce.domain.models import Recipient

    system.campaign()
    people = system.recipients(3) + [Recipient(recipient_id="bad", email="nobody-at-all", variables={"name": "x"})]
    system.operator.publish("c1", people)

    system.poller().run_until_idle(idle_seconds=1, max_seconds=20)

    record = system.operator.delivery("c1", "bad")
    assert record.state is DeliveryState.FAILED and record.reason == "invalid email address"
    assert len(system.deliveries()) == 3


def test_dlq_redrive_of_a_half_sent_batch_sends_only_the_rest(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(10))
    system.resend.reject([f"user{i}@{system.domain}" for i in (7, 8, 9)], status=429, name="rate_limit_exceeded")

    system.poller().run_until_idle(idle_seconds=2, max_seconds=60)

    assert queue_depths(boto3.client("sqs"), system.resources.dead_letter_queue_url)["visible"] == 1
    status = system.operator.status("c1")
    assert (status.sent, status.dead_lettered) == (7, 3)

    system.resend.clear_rejections()
    from sendonce_ops.sqs_tools import move_messages

    moved = move_messages(boto3.client("sqs"), system.resources.dead_letter_queue_url, system.resources.queue_url)
    system.poller().run_until_idle(idle_seconds=2, max_seconds=30)

    assert moved == 1
    deliveries = system.deliveries()
    assert len(deliveries) == 10 and set(deliveries.values()) == {1}
    assert system.operator.status("c1").sent == 10
