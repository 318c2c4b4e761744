"""Issue 18: the campaign service never records a batch the queue would refuse.

Before: `CampaignService.publish` cut batches by count only and recorded each before handing
it to SQS; a batch over the 256 KiB message limit stayed recorded and never enqueued, resume
failed the same way, and cancel set the state and then failed to republish, leaving pending
recipients on a cancelled campaign. The operator entry points refuse such recipients
earlier, so these tests call the service directly, with the real SQS adapter on moto."""

from __future__ import annotations

import json

import boto3
import pytest

from sendonce.domain import limits
from sendonce.domain.campaigns.batches import OversizedRecipientError
from sendonce.domain.models import CampaignState, Recipient

pytestmark = pytest.mark.integration


def big(i: int, nbytes: int) -> Recipient:
    return Recipient(recipient_id=f"r{i}", email=f"user{i}@example.com", variables={"blob": "x" * nbytes})


def queued(system) -> list[dict]:
    """Every message on the campaign queue (held invisible while read), as parsed bodies."""
    sqs = boto3.client("sqs")
    bodies = []
    while True:
        response = sqs.receive_message(
            QueueUrl=system.resources.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600
        )
        messages = response.get("Messages", [])
        if not messages:
            return bodies
        for message in messages:
            assert len(message["Body"].encode()) <= limits.SQS_MESSAGE_BYTES
            bodies.append(json.loads(message["Body"]))


def recipients_in(bodies: list[dict]) -> list[str]:
    return [r["recipient_id"] for body in bodies for r in body["recipients"]]


def test_publish_splits_by_bytes_and_every_recorded_batch_is_enqueued(system):
    # Given 40 recipients of ~30 KB each: 100 of them would be ~1.2 MB in one message
    system.campaign()
    people = [big(i, 30_000) for i in range(40)]
    # When the service publishes them (batch size 100)
    report = system.operator.publish("c1", people)
    # Then they went out in messages under SQS's limit, each recipient once, none stranded
    bodies = queued(system)
    assert sorted(recipients_in(bodies)) == sorted(p.recipient_id for p in people)
    assert len(bodies) == report.messages_sent > 1
    batches = list(system.operator._campaigns.batches("c1"))
    assert batches and all(enqueued for _, enqueued in batches)


def test_resume_and_cancel_republish_large_recipients_in_messages_that_fit(system):
    system.campaign()
    people = [big(i, 30_000) for i in range(40)]
    system.operator.publish("c1", people)
    queued(system)  # the first publish's messages, taken off the queue's view
    # When the operator pauses and resumes (nobody was sent: all 40 are republished)
    system.operator.pause("c1")
    _, job = system.operator.resume("c1")
    republished = job.progress["republished"]
    assert republished == 40
    assert sorted(recipients_in(queued(system))) == sorted(p.recipient_id for p in people)
    # And cancels: every recipient goes out once more to be closed, nothing is left behind
    campaign, _ = system.operator.cancel("c1")
    assert campaign.state is CampaignState.CANCELLED
    assert sorted(recipients_in(queued(system))) == sorted(p.recipient_id for p in people)


def test_a_recipient_too_large_for_any_message_is_refused_before_it_is_recorded(system):
    system.campaign()
    people = [big(i, 1_000) for i in range(150)]
    people.insert(120, big(999, limits.SQS_MESSAGE_BYTES))
    # When the service is asked to publish it, the error names the recipient
    with pytest.raises(OversizedRecipientError, match="'r999'"):
        system.operator.publish("c1", people)
    # Then everything before it was published and enqueued, nothing of it or after it
    # was recorded, and no recorded batch is left unqueued
    batches = list(system.operator._campaigns.batches("c1"))
    recorded = [r.recipient_id for batch, _ in batches for r in batch.recipients]
    assert sorted(recorded) == sorted(p.recipient_id for p in people[:120])
    assert all(enqueued for _, enqueued in batches)
    assert sorted(recipients_in(queued(system))) == sorted(recorded)
