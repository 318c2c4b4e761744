"""The same faults through the generic "send, then ack" consumer (`sendonce_local.demo.baseline`):
it must duplicate, or the scenarios that pass through sendonce prove nothing. Their
sendonce counterparts: test_consumer_faults.py (the incident, two consumers at once, a
consumer killed after accept) and test_provider_and_ledger_faults.py (batch mode)."""

from __future__ import annotations

import boto3
import pytest

from sendonce_local.demo import baseline
from sendonce_local.demo.proxy import RESEND_SEND_PATHS, FaultProxy

pytestmark = pytest.mark.chaos


def deliver_one_message_twice_at_once(system, handler_a, handler_b, n: int) -> dict[str, int]:
    system.campaign()
    system.operator.publish("c1", system.recipients(n))
    sqs = boto3.client("sqs")
    body = sqs.receive_message(QueueUrl=system.resources.queue_url, VisibilityTimeout=0)["Messages"][0]["Body"]
    sqs.send_message(QueueUrl=system.resources.queue_url, MessageBody=body)  # SQS delivers at least once
    system.resend.set_latency(20, 40)

    first, second = system.poller(handler=handler_a), system.poller(handler=handler_b)
    first.start(), second.start()
    first.run_until_idle(idle_seconds=2, max_seconds=40)
    second.stop()
    return system.deliveries()


def test_two_consumers_on_the_same_message_without_the_ledger_send_it_twice(system):
    deliveries = deliver_one_message_twice_at_once(system, baseline.lambda_handler, baseline.lambda_handler, 20)

    assert len(deliveries) == 20
    # Both copies of the message were sent in full (more, if a slow run let the
    # visibility timeout pass and a third delivery happened: still the point).
    assert min(deliveries.values()) >= 2


def kill_after_three_accepted(system, handler: str) -> None:
    """Its Resend calls pass a proxy that SIGKILLs the consumer process once the provider
    accepted three of its emails: the generic consumer has no fault points of its own."""
    proxy = FaultProxy(system.resend.url, send_paths=RESEND_SEND_PATHS).start()
    try:
        doomed = system.consumer_process(handler, timeout_s=7, extra_env={"RESEND_API_URL": proxy.url})
        proxy.kill_after(doomed.pid, 3)
        assert system.exit_code(doomed) == -9
    finally:
        proxy.stop()


def test_a_consumer_killed_after_accept_without_the_ledger_sends_the_batch_again(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(10))

    kill_after_three_accepted(system, "sendonce_local.demo.baseline:lambda_handler")
    system.poller(handler=baseline.lambda_handler).run_until_idle(idle_seconds=2, max_seconds=30)

    deliveries = system.deliveries()
    assert len(deliveries) == 10
    assert sum(deliveries.values()) >= 13  # what was accepted before the kill went out again
