"""Pause, resume, cancel and the DLQ with real consumers (the consumer handler behind
local pollers), deliveries counted at the provider."""

from __future__ import annotations

import json
import threading

import boto3
import pytest

from sendonce.domain.models import DeliveryState
from sendonce_ops.sqs_tools import queue_depths
from tests.integration.operator_helpers import as_json, json_lines, sendonce, wait_for

pytestmark = pytest.mark.chaos

BATCH = 10
CONSUMERS = 2


def sent_count(system) -> int:
    return sum(system.deliveries().values())


def start_consumers(system, *, slow: bool = True, timeout_s: float = 7):
    """Two consumers at once, one batch each at a time; `slow`: the provider takes 40-60 ms
    per email, so a pause lands while batches are in progress. A short function timeout
    keeps leases short: a consumer that finds a delivery held by the other comes back when
    the lease ends."""
    system.resend.set_latency(40, 60) if slow else system.resend.set_latency(0, 0)
    pollers = [system.poller(timeout_s=timeout_s) for _ in range(CONSUMERS)]
    for poller in pollers:
        poller.start()
    return pollers


def until_idle(pollers, done=None) -> None:
    """Run until `done()` holds (if given), then until the queue has been idle for 3 s.

    Idle alone is not enough on a loaded machine: a message that found a delivery held by a
    consumer whose attempt ran out of time comes back only when that lease ends (the 7 s
    function timeout), longer than any idle window worth waiting for."""
    if done is not None:
        wait_for(done, timeout=150, interval=0.2)
    pollers[0].run_until_idle(idle_seconds=3.0, max_seconds=120)
    for poller in pollers:
        poller.stop()


def test_pause_stops_sending_within_one_batch_per_consumer_and_resume_sends_the_rest_once(system):
    # Given a campaign of 8 batches being sent by two consumers
    system.campaign()
    system.operator.publish("c1", system.recipients(80), batch_size=BATCH)
    pollers = start_consumers(system)
    wait_for(lambda: sent_count(system) >= 15)

    # When the operator pauses mid-way
    paused = sendonce(system, "campaign", "pause", "c1", "--reason", "wrong subject", "--json")
    sent_at_pause = sent_count(system)
    until_idle(pollers)

    # Then only the batches already in progress finish; the rest stay pending
    assert as_json(paused)["state"] == "paused"
    sent_after_pause = sent_count(system)
    assert sent_after_pause - sent_at_pause <= CONSUMERS * BATCH
    status = as_json(sendonce(system, "campaign", "status", "c1", "--json"))
    assert (status["state"], status["state_reason"]) == ("paused", "wrong subject")
    assert status["sent"] == sent_after_pause and status["pending"] == 80 - sent_after_pause > 0
    assert system.operator.get("c1").state_changed_by == "ann"

    # When it resumes, each remaining recipient is sent exactly once
    resumed = as_json(sendonce(system, "campaign", "resume", "c1", "--json"))
    assert resumed["republished"] == 80 - sent_after_pause
    # The resume republishes the rest as one message: a longer function timeout lets one
    # attempt send it at Resend's 5/s on a loaded machine, within the message's five receives.
    until_idle(start_consumers(system, slow=False, timeout_s=20), done=lambda: len(system.deliveries()) == 80)

    deliveries = system.deliveries()
    assert len(deliveries) == 80 and set(deliveries.values()) == {1}
    assert as_json(sendonce(system, "campaign", "status", "c1", "--json"))["state"] == "completed"


def test_two_resumes_at_once_send_each_recipient_once(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(40), batch_size=BATCH)
    system.operator.pause("c1")
    system.poller().run_until_idle(idle_seconds=0.5, max_seconds=20)  # batches acknowledged unsent
    assert sent_count(system) == 0

    barrier = threading.Barrier(2)
    results: list = []

    def resume(operator: str) -> None:
        service = system.operator.acting_as(operator)
        barrier.wait()
        results.append(service.resume("c1"))

    threads = [threading.Thread(target=resume, args=(name,)) for name in ("ann", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Every recipient is now on the queue twice; one consumer meets each copy in turn.
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)

    assert sorted(job.progress["republished"] for _, job in results) == [40, 40]  # both published everyone
    deliveries = system.deliveries()
    assert len(deliveries) == 40 and set(deliveries.values()) == {1}


def test_cancel_mid_send_ends_the_rest_as_cancelled_and_sends_none_after(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(100), batch_size=BATCH)
    pollers = start_consumers(system)
    wait_for(lambda: sent_count(system) >= 10)

    cancelled = sendonce(system, "campaign", "cancel", "c1", "--reason", "sent to the wrong list")
    sent_at_cancel = sent_count(system)
    until_idle(pollers, done=lambda: system.operator.status("c1").remaining == 0)

    assert cancelled.exit_code == 0
    sent = sent_count(system)
    assert sent - sent_at_cancel <= CONSUMERS * BATCH
    status = as_json(sendonce(system, "campaign", "status", "c1", "--json"))
    assert status["state"] == "cancelled"
    assert (status["sent"], status["cancelled"], status["remaining"]) == (sent, 100 - sent, 0)
    assert status["sent"] + status["cancelled"] == status["total"] == 100
    resumed = sendonce(system, "campaign", "resume", "c1")
    assert resumed.exit_code == 4 and "is cancelled" in resumed.stderr
    system.poller().run_until_idle(idle_seconds=0.5, max_seconds=10)
    assert sent_count(system) == sent


def test_dead_lettered_recipients_show_their_last_error_and_a_redrive_sends_them_once(system, monkeypatch):
    # Given a queue that gives up after two receives, a provider that throttles three
    # recipients, and one poison message
    sqs = boto3.client("sqs")
    redrive = {"deadLetterTargetArn": system.resources.dead_letter_queue_arn, "maxReceiveCount": "2"}
    sqs.set_queue_attributes(QueueUrl=system.resources.queue_url, Attributes={"RedrivePolicy": json.dumps(redrive)})
    monkeypatch.setenv("SENDONCE_MAX_RECEIVE_COUNT", "2")
    monkeypatch.setenv("SENDONCE_THROTTLE_RETRIES", "0")
    system.campaign()
    system.operator.publish("c1", system.recipients(10))
    system.resend.reject([f"user{i}@{system.domain}" for i in (7, 8, 9)], status=429, name="rate_limit_exceeded")
    sqs.send_message(QueueUrl=system.resources.queue_url, MessageBody="{not json")

    system.poller().run_until_idle(idle_seconds=2.5, max_seconds=40)

    # Then status, the ledger and the DLQ listing all say who and why
    assert queue_depths(sqs, system.resources.dead_letter_queue_url)["visible"] == 2
    status = as_json(sendonce(system, "campaign", "status", "c1", "--json"))
    assert (status["sent"], status["dead_lettered"], status["remaining"], status["state"]) == (7, 3, 3, "sending")
    assert {r["recipient_id"] for r in status["dead_lettered_recipients"]} == {"r7", "r8", "r9"}
    assert all("rate" in r["reason"].lower() for r in status["dead_lettered_recipients"])
    table = sendonce(system, "campaign", "status", "c1")
    assert "dead-lettered recipients (last error)" in table.stdout and "r7" in table.stdout

    record = as_json(sendonce(system, "ledger", "show", "c1", "r8", "--json"))
    assert record["state"] == "dead_lettered" and "rate" in record["reason"].lower()
    assert record["history"][-1]["event"] == "dead_lettered"

    listing = as_json(sendonce(system, "dlq", "list", "--json"))
    groups = {g["campaign_id"]: g for g in listing["campaigns"]}
    assert (groups["c1"]["messages"], groups["c1"]["recipients"], groups["c1"]["dead_lettered"]) == (1, 10, 3)
    assert "rate" in groups["c1"]["last_error"].lower()
    assert "not JSON" in groups[None]["last_error"]
    text = sendonce(system, "dlq", "list")
    assert "(not a batch)" in text.stdout and "c1" in text.stdout
    assert queue_depths(sqs, system.resources.dead_letter_queue_url)["visible"] == 2  # listing consumed nothing

    # When the provider recovers and the operator redrives the DLQ
    system.resend.clear_rejections()
    redriven = sendonce(system, "dlq", "redrive")
    system.poller().run_until_idle(idle_seconds=1.5, max_seconds=30)

    # Then moto's missing StartMessageMoveTask is reported and the messages moved directly;
    # the three are sent once, the seven already sent are not sent again
    assert redriven.exit_code == 0
    assert "StartMessageMoveTask is not available here (HTTP 500); moving the messages directly" in redriven.stderr
    assert "moved 2 message(s)" in redriven.stdout
    deliveries = system.deliveries()
    assert len(deliveries) == 10 and set(deliveries.values()) == {1}
    final = as_json(sendonce(system, "campaign", "status", "c1", "--json"))
    assert (final["sent"], final["dead_lettered"], final["state"]) == (10, 0, "completed")
    assert {r.state for r in system.operator.records("c1")} == {DeliveryState.SENT}
    # The poison message is judged poison again and kept with its reason.
    assert [g["campaign_id"] for g in as_json(sendonce(system, "dlq", "list", "--json"))["campaigns"]] == [None]


def test_watch_follows_a_campaign_until_it_completes(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(30), batch_size=BATCH)
    pollers = start_consumers(system)

    watched = sendonce(system, "campaign", "watch", "c1", "--interval", "0.3", "--timeout", "30", "--json")
    until_idle(pollers)

    assert watched.exit_code == 0
    lines = json_lines(watched)
    assert lines[-1]["state"] == "completed" and lines[-1]["sent"] == 30
    assert [line["remaining"] for line in lines] == sorted((line["remaining"] for line in lines), reverse=True)
    bar = sendonce(system, "campaign", "watch", "c1")
    assert bar.exit_code == 0 and "completed" in bar.stdout
    timed_out = sendonce(system, "campaign", "watch", "nope", "--timeout", "0")
    assert timed_out.exit_code == 2


def test_watch_gives_up_at_its_timeout(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(3))  # nobody consumes

    watched = sendonce(system, "campaign", "watch", "c1", "--interval", "0.2", "--timeout", "0.5")

    assert watched.exit_code == 3 and "timed out after 0.5s" in watched.stderr
