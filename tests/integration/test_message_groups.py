"""Every way a campaign's batch reaches the campaign queue carries the campaign as its
MessageGroupId, which makes the standard queue an SQS fair queue (docs/messages.md): the
publisher (publish, resume, cancel), the DLQ redrive (`sendonce dlq redrive` where SQS has no
move task) and the demo's redrive. Messages an earlier release sent without a group are still
received and sent; the local poller hands the consumer records with the group; and moto's
server, patched (docs/local-aws.md), serves a quiet campaign before a busy one."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from sendonce.adapters.sqs_queue import SqsQueue
from sendonce.domain.models import SCHEMA_VERSION, BatchMessage, Recipient
from sendonce_local.demo.schedule import redrive_campaign
from sendonce_ops.sqs_tools import move_messages

pytestmark = pytest.mark.integration

HOLD_S = 300  # a message received here stays in flight for the rest of the test


def receive_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Every visible message of the queue, each held in flight, with its group if it has one."""
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=HOLD_S, MessageSystemAttributeNames=["MessageGroupId"]
    ).get("Messages", []):
        messages.extend(batch)
    return messages


def group_of(message: dict[str, Any]) -> str | None:
    return message.get("Attributes", {}).get("MessageGroupId")


def batch_body(campaign_id: str, batch_id: str, people: list[Recipient]) -> str:
    return BatchMessage(
        schema_version=SCHEMA_VERSION, campaign_id=campaign_id, batch_id=batch_id, recipients=people
    ).to_body()


def test_publish_resume_and_cancel_send_each_batch_in_its_campaign_s_group(system):
    # Given two campaigns published, then one paused and resumed, the other cancelled
    system.campaign("c1")
    system.campaign("c2")
    system.operator.publish("c1", system.recipients(5), batch_size=2)
    system.operator.publish("c2", system.recipients(3), batch_size=2)
    system.operator.pause("c1")
    system.operator.resume("c1")
    system.operator.cancel("c2")

    # When the queue is read
    messages = receive_all(boto3.client("sqs"), system.resources.queue_url)

    # Then every message, first publish ("b…"), resume's ("r…") and cancel's ("x…", each
    # republishing its campaign's recipients in one message), is in the group of the
    # campaign its body names
    kinds = sorted(
        (group_of(m), json.loads(m["Body"])["campaign_id"], json.loads(m["Body"])["batch_id"][0]) for m in messages
    )
    assert kinds == [("c1", "c1", "b")] * 3 + [("c1", "c1", "r")] + [("c2", "c2", "b")] * 2 + [("c2", "c2", "x")]


def test_a_batch_dead_lettered_by_sqs_comes_back_in_its_group_after_a_redrive(system):
    sqs = boto3.client("sqs")
    queue, dlq = system.resources.queue_url, system.resources.dead_letter_queue_url
    # Given a batch published in its group, received more than maxReceiveCount (5) times: SQS
    # moves it to the dead-letter queue as it is
    SqsQueue(client=sqs, queue_url=queue).publish("c1", [batch_body("c1", "b1", system.recipients(1))])
    for _ in range(6):
        sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0)
    [dead] = receive_all(sqs, dlq)
    assert group_of(dead) == "c1"
    sqs.change_message_visibility(QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0)

    # When it is redriven
    assert move_messages(sqs, dlq, queue) == 1

    # Then it is back in the campaign's group
    [back] = receive_all(sqs, queue)
    assert (group_of(back), json.loads(back["Body"])["batch_id"]) == ("c1", "b1")


def test_a_redrive_keeps_a_message_s_group_or_takes_the_campaign_its_body_names(system):
    sqs = boto3.client("sqs")
    queue, dlq = system.resources.queue_url, system.resources.dead_letter_queue_url
    # Given, in the dead-letter queue: a batch in its group, an earlier release's batch (no
    # group), poison the consumer kept there (no group) and a message that is no batch
    grouped = batch_body("c1", "b1", system.recipients(1))
    old = batch_body("c2", "b2", system.recipients(1))
    sqs.send_message(QueueUrl=dlq, MessageBody=grouped, MessageGroupId="c1")
    sqs.send_message(QueueUrl=dlq, MessageBody=old)
    sqs.send_message(QueueUrl=dlq, MessageBody="{not json")
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps({"job_id": "j1"}))

    # When the dead-letter queue is redriven
    assert move_messages(sqs, dlq, queue) == 4

    # Then the batches are in their campaigns' groups, and the rest in none
    groups = {m["Body"]: group_of(m) for m in receive_all(sqs, queue)}
    assert groups == {grouped: "c1", old: "c2", "{not json": None, json.dumps({"job_id": "j1"}): None}


def test_the_demo_s_redrive_sends_the_campaign_s_messages_in_its_group(system):
    sqs = boto3.client("sqs")
    queue, dlq = system.resources.queue_url, system.resources.dead_letter_queue_url
    # Given an earlier release's batches of two campaigns in the dead-letter queue, no group
    mine = batch_body("c1", "b1", system.recipients(1))
    theirs = batch_body("c2", "b2", system.recipients(1))
    for body in (mine, theirs):
        sqs.send_message(QueueUrl=dlq, MessageBody=body)

    # When the demo redrives c1's
    assert redrive_campaign(sqs, dlq, queue, "c1") == 1

    # Then c1's batch is on the queue in c1's group; c2's stays in the dead-letter queue
    assert [(m["Body"], group_of(m)) for m in receive_all(sqs, queue)] == [(mine, "c1")]
    assert [m["Body"] for m in receive_all(sqs, dlq)] == [theirs]


def test_the_consumer_sends_grouped_and_earlier_releases_ungrouped_batches_alike(system):
    # Given a campaign's batches published in its group, and one an earlier release sent
    # without a group
    system.campaign("c1")
    system.operator.publish("c1", system.recipients(4), batch_size=2)
    old = batch_body("c1", "bold", system.recipients(2, start=4))
    boto3.client("sqs").send_message(QueueUrl=system.resources.queue_url, MessageBody=old)
    handler = system.handler()
    records: list[dict[str, Any]] = []

    def recording(event: dict[str, Any], context: Any) -> Any:
        records.extend(event["Records"])
        return handler(event, context)

    # When the local event source runs the consumer until the queue is empty
    system.poller(handler=recording).run_until_idle(idle_seconds=2, max_seconds=60)

    # Then each recipient got one email, and the consumer saw the group where there was one
    assert sorted(system.deliveries().values()) == [1] * 6
    groups = {json.loads(r["body"])["batch_id"]: r["attributes"].get("MessageGroupId") for r in records}
    assert groups.pop("bold") is None
    assert set(groups.values()) == {"c1"} and len(groups) == 2


def test_moto_s_server_serves_a_quiet_campaign_before_a_busy_one(system):
    sqs = boto3.client("sqs")
    url = system.resources.queue_url
    queue = SqsQueue(client=sqs, queue_url=url)
    # Given a campaign with 40 batches in flight (all there are: a noisy tenant) and 60 more
    # waiting, then one batch of another campaign
    queue.publish("busy", [json.dumps({"campaign_id": "busy", "n": i}) for i in range(100)])
    held = []
    while len(held) < 40:
        held += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=HOLD_S)["Messages"]
    queue.publish("quiet", [json.dumps({"campaign_id": "quiet", "n": 0})])

    # When a consumer receives, then the quiet campaign's batch comes first
    [first] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=HOLD_S)["Messages"]
    assert json.loads(first["Body"])["campaign_id"] == "quiet"
