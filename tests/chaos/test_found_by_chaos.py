"""Chaos scenarios that found defects (fixed): SES throttling after in_flight must not end
unknown, and a batch-mode send group whose message was acknowledged while paused must be
replayed by whichever message next carries its members."""

from __future__ import annotations

import time

import boto3
import pytest

from sendonce.domain.models import DeliveryState
from tests.chaos.injection import FailingCalls, consumer_on

pytestmark = pytest.mark.chaos


def states(system, campaign_id: str = "c1") -> dict[str, DeliveryState]:
    return {r.recipient_id: r.state for r in system.operator.records(campaign_id)}


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def test_ses_throttling_after_in_flight_is_retried_later_not_closed_unknown(system):
    system.campaign(provider="ses")
    system.operator.publish("c1", system.recipients(5))
    session = boto3.session.Session()
    # One recipient's first attempt meets SES throttling on every in-process retry (1 + 3);
    # one send at a time, so the four throttles meet that one recipient.
    FailingCalls(session, "sesv2", {"SendEmail": {1, 2, 3, 4}}, code="TooManyRequestsException",
                 message="Maximum sending rate exceeded.")  # fmt: skip
    handler = consumer_on(system, session, SENDONCE_SEND_CONCURRENCY="1")

    system.poller(handler=handler).run_until_idle(idle_seconds=2, max_seconds=40)

    final = states(system)
    assert set(final.values()) == {DeliveryState.SENT}, final  # throttled means not sent: try again later
    deliveries = system.deliveries("ses")
    assert len(deliveries) == 5 and set(deliveries.values()) == {1}


def test_batch_mode_pause_while_an_unfinished_group_returns_then_resume_sends_it(system):
    system.campaign(delivery_mode="batch")
    system.operator.publish("c1", system.recipients(10))
    system.resend.fail_next(1, 500)  # the group's request: not accepted, but ambiguous to the consumer
    poller = system.poller(timeout_s=8)
    poller.start()
    wait_for(lambda: system.resend.stats()["errors"].get("application_error"))
    wait_for(lambda: set(states(system).values()) == {DeliveryState.PENDING})

    # When the operator pauses before the batch comes back, the paused consumer acknowledges it
    system.operator.pause("c1")
    wait_for(lambda: poller.counters.messages_deleted == 1, timeout=20)
    _, job = system.operator.resume("c1")
    republished = job.progress["republished"]
    poller.run_until_idle(idle_seconds=2, max_seconds=40)

    # Then every recipient is sent once (before the fix: none was, and all ended dead-lettered)
    assert republished == 10
    deliveries = system.deliveries()
    assert len(deliveries) == 10 and set(deliveries.values()) == {1}, (deliveries, states(system))
    assert set(states(system).values()) == {DeliveryState.SENT}
