"""Jobs on moto: the job item moved on only by the write that read its version, batch
records read in pages, and the worker (the real handler behind the SQS poller) republishing
what a campaign lost, a page a message, so that everyone is then sent once."""

from __future__ import annotations

import functools
import json
import uuid

import boto3
import pytest

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.adapters.dynamodb.jobs import DynamoDBJobStore
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.sqs_queue import SqsJobQueue, SqsQueue
from sendonce.domain.errors import JobNotFoundError
from sendonce.domain.jobs.models import Job, JobKind, JobState
from sendonce.domain.jobs.service import JobService
from sendonce.domain.jobs.work import Reconcile, Republish
from sendonce.domain.models import DeliveryState
from sendonce.handlers import jobs as jobs_handler
from sendonce_local.poller import EventSourcePoller

pytestmark = pytest.mark.integration


def test_a_job_moves_on_only_from_the_version_it_was_read_at(system):
    store = DynamoDBJobStore(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table)
    job = Job(job_id=f"j-{uuid.uuid4().hex[:6]}", kind=JobKind.REPUBLISH, campaign_id="c1")

    assert store.create(job) == job
    moved = job.model_copy(update={"steps": 1, "cursor": "batch#x", "version": 1})
    assert store.create(moved) == job  # an id that exists: the job as it is, not replaced
    assert store.advance(job, moved) is True
    assert store.advance(job, moved.model_copy(update={"steps": 9, "version": 1})) is False  # read before
    assert store.get(job.job_id) == moved
    with pytest.raises(JobNotFoundError):
        store.get("nope")


def test_batch_records_read_in_pages_are_every_batch_once(system):
    system.campaign()
    system.operator.publish("c1", system.recipients(250), batch_size=10)
    store = DynamoDBCampaignStore(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table)

    seen, cursor, pages = [], None, 0
    while True:
        batches, cursor = store.batches_page("c1", cursor, 7)
        seen += [b.batch_id for b in batches]
        pages += 1
        if cursor is None:
            break

    assert sorted(seen) == sorted(b.batch_id for b, _ in store.batches("c1"))
    assert len(seen) == 25 and pages in (4, 5)  # 25 records, 7 a page (a last empty page is allowed)


def test_the_worker_republishes_what_the_queue_lost_and_everyone_is_then_sent_once(system):
    # Given a campaign whose first 30 recipients were sent, and whose next 30 were published
    # but lost from the queue (purged)
    system.campaign()
    system.operator.publish("c1", system.recipients(30), batch_size=10)
    system.poller().run_until_idle(idle_seconds=1, max_seconds=60)
    system.operator.publish("c1", system.recipients(30, start=30), batch_size=10)
    sqs, dynamodb = boto3.client("sqs"), boto3.client("dynamodb")
    sqs.purge_queue(QueueUrl=system.resources.queue_url)
    jobs_queue = sqs.create_queue(QueueName=f"jobs-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=system.resources.campaigns_table)
    service = JobService(
        jobs=DynamoDBJobStore(client=dynamodb, table_name=system.resources.campaigns_table),
        queue=SqsJobQueue(client=sqs, queue_url=jobs_queue),
        campaigns=campaigns,
        clock=lambda: "2026-12-02T00:00:00.000+00:00",
        work={
            JobKind.REPUBLISH: Republish(
                campaigns=campaigns,
                ledger=DynamoDBLedger(
                    client=dynamodb, table_name=system.resources.ledger_table, shards_of=system.shards_of
                ),
                queue=SqsQueue(client=sqs, queue_url=system.resources.queue_url),
                page_batches=2,
            )
        },
    )

    # When a job republishes everyone not ended, a step a message through the real handler
    job = service.start_republish("c1", [DeliveryState.PENDING], prefix="r", by="test")
    EventSourcePoller(
        sqs_client=sqs, queue_url=jobs_queue, handler=functools.partial(jobs_handler.lambda_handler, service=service)
    ).run_until_idle(idle_seconds=1, max_seconds=60)

    # Then it read the 6 batch records 2 a step and republished the 30 lost recipients
    done = service.get(job.job_id)
    assert done.state is JobState.DONE and done.steps >= 3
    assert done.progress["batches_read"] == 6 and done.progress["republished"] == 30
    # ... and the consumer sends each of the 60 once
    system.poller().run_until_idle(idle_seconds=1, max_seconds=60)
    deliveries = system.deliveries()
    assert len(deliveries) == 60 and set(deliveries.values()) == {1}


def test_ledger_records_read_in_pages_over_the_shards_are_every_record_once(system):
    system.campaign(ledger_shards=4)
    system.operator.publish("c1", system.recipients(40), batch_size=10)
    system.poller().run_until_idle(idle_seconds=1, max_seconds=60)
    ledger = system.ledger()

    seen, cursor, pages = [], None, 0
    while True:
        records, cursor = ledger.records_page("c1", cursor, 7)
        seen += [r.recipient_id for r in records]
        pages += 1
        if cursor is None:
            break

    assert sorted(seen) == sorted(r.recipient_id for r in ledger.records("c1"))
    assert len(seen) == 40 and 6 <= pages <= 9  # 7 a page; a shard's end may end one early


def test_a_reconcile_job_whose_worker_died_midway_is_taken_up_and_gives_the_same_counts(system):
    # Given a sent campaign of 40 (4 ledger shards)
    system.campaign(ledger_shards=4)
    system.operator.publish("c1", system.recipients(40), batch_size=10)
    system.poller().run_until_idle(idle_seconds=1, max_seconds=60)
    sqs, dynamodb = boto3.client("sqs"), boto3.client("dynamodb")
    jobs_queue = sqs.create_queue(QueueName=f"jobs-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    service = JobService(
        jobs=DynamoDBJobStore(client=dynamodb, table_name=system.resources.campaigns_table),
        queue=SqsJobQueue(client=sqs, queue_url=jobs_queue),
        campaigns=DynamoDBCampaignStore(client=dynamodb, table_name=system.resources.campaigns_table),
        clock=lambda: "2026-12-02T00:00:00.000+00:00",
        work={
            JobKind.RECONCILE: Reconcile(
                ledger=system.ledger(),
                counters=DynamoDBCounters(client=dynamodb, table_name=system.resources.campaigns_table),
                page_records=6,
            )
        },
    )

    # When its worker takes two steps, the second one twice (its message received again), and dies
    job = service.start_reconcile("c1", by="test")
    service.step(job.job_id)
    stale = service.get(job.job_id)
    service.step(job.job_id)
    assert not service._jobs.advance(stale, stale.model_copy(update={"version": stale.version + 1}))
    sqs.purge_queue(QueueUrl=jobs_queue)  # the chain's messages lost with it
    # ... and `sendonce job run` takes it up
    done = service.run(job.job_id)

    # Then every record was counted once, as a job never interrupted counts them
    again = service.start_reconcile("c1", by="test")
    again = service.run(again.job_id)
    assert done.state is JobState.DONE and done.progress == again.progress
    assert done.progress["records_read"] == 40 and done.progress["ledger_sent"] == 40
    assert done.result == again.result and done.result["ledger"]["sent"] == 40


def test_a_message_that_is_no_step_of_a_job_is_dropped_with_a_reason(system, caplog):
    service = JobService(
        jobs=DynamoDBJobStore(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table),
        queue=None,
        campaigns=None,
        clock=lambda: "now",
        work={},
    )
    records = [
        {"messageId": "m1", "body": "not json"},
        {"messageId": "m2", "body": json.dumps({"job_id": "nope"})},
    ]
    event = {"Records": [{**r, "receiptHandle": "h", "attributes": {}, "eventSource": "aws:sqs"} for r in records]}

    answer = jobs_handler.lambda_handler(event, _Context(), service=service)

    assert answer == {"batchItemFailures": []}
    assert [r.getMessage() for r in caplog.records].count("not a step of a job") == 2


class _Context:
    function_name = "jobs"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:jobs"
    aws_request_id = "r1"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 60_000
