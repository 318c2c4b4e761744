"""S3 publish as a job in parts on moto: the object cut into byte ranges, one jobs-queue
message a range taken by the real jobs handler, a part that died after publishing and before
it was recorded run again, and nothing recorded or enqueued twice; a bad line reported by its
line in the file."""

from __future__ import annotations

import functools
import json
import uuid

import boto3
import pytest

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.jobs import DynamoDBJobStore
from sendonce.adapters.providers import registry
from sendonce.adapters.s3_objects import S3ObjectLines
from sendonce.adapters.sqs_queue import SqsJobQueue, SqsQueue
from sendonce.domain.campaigns.s3_publish import S3Publish
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.jobs.models import JobKind, JobState
from sendonce.domain.jobs.service import JobService
from sendonce.domain.models import CampaignState
from sendonce.handlers import jobs as jobs_handler
from sendonce_local.poller import EventSourcePoller

pytestmark = pytest.mark.integration

LINES = 3_000
BAD_LINE = 1_777  # a line of the file (the JSONL has no header)
RANGE_BYTES = 100_000  # ~280 KB of lines: 3 ranges


def queued_publisher(system, *, queued: bool = True):
    """The operator service as wiring builds it, its S3 publish cut into RANGE_BYTES ranges;
    its parts on a jobs queue of their own (`queued`), else run in process one after another."""
    sqs, dynamodb = boto3.client("sqs"), boto3.client("dynamodb")
    jobs_queue = sqs.create_queue(QueueName=f"jobs-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=system.resources.campaigns_table)
    built: dict[str, S3Publish] = {}

    def jobs_of(service: CampaignService) -> JobService:
        built["publisher"] = S3Publish(
            service=service, objects=S3ObjectLines(client=boto3.client("s3")), range_bytes=RANGE_BYTES
        )
        return JobService(
            jobs=DynamoDBJobStore(client=dynamodb, table_name=system.resources.campaigns_table),
            queue=SqsJobQueue(client=sqs, queue_url=jobs_queue) if queued else None,
            campaigns=campaigns,
            clock=lambda: "2026-12-02T00:00:00.000+00:00",
            work=service.job_work(),
            parted={JobKind.PUBLISH_S3: built["publisher"]},
            on_finished=service.job_finished,
        )

    service = CampaignService(
        campaigns=campaigns,
        ledger=system.ledger(),
        queue=SqsQueue(
            client=sqs,
            queue_url=system.resources.queue_url,
            dead_letter_queue_url=system.resources.dead_letter_queue_url,
        ),
        provider_names=registry.names(),
        jobs=jobs_of,
    )
    return service, built["publisher"], jobs_queue


def recipient_file(system) -> tuple[str, str]:
    s3 = boto3.client("s3")
    bucket = f"sendonce-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    lines = []
    for n in range(1, LINES + 1):
        email = "not an address" if n == BAD_LINE else f"user{n}@{system.domain}"
        lines.append(json.dumps({"recipient_id": f"r{n}", "email": email, "variables": {"name": f"U{n}"}}) + "\n")
    s3.put_object(Bucket=bucket, Key="lists/all.jsonl", Body="".join(lines).encode())
    return bucket, "lists/all.jsonl"


def queued(url: str) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def test_ranges_published_in_parallel_parts_a_part_run_twice_records_and_enqueues_nothing_twice(system):
    # Given a campaign and a JSONL object of 3,000 lines (one bad) cut into 3 ranges
    system.campaign()
    bucket, key = recipient_file(system)
    service, publisher, jobs_queue = queued_publisher(system)

    # When the publish starts (one message a range), and a worker publishes range 1 and
    # dies before recording it (its message stays on the queue, to be taken again)
    job = publisher.start(
        "c1", bucket=bucket, key=key, fmt=None, strict=False, dedupe_addresses=False, send_at_ms=None, by="test"
    )
    assert job.state is JobState.RUNNING and job.params["parts"] == 3 and queued(jobs_queue) == 3
    died = publisher.part(service.jobs.get(job.job_id), 1)
    assert died["counts"]["accepted"] > 0 and service.jobs.get(job.job_id).parts == {}
    # ... then the real jobs handler takes every message (range 1's a second time)
    EventSourcePoller(
        sqs_client=boto3.client("sqs"),
        queue_url=jobs_queue,
        handler=functools.partial(jobs_handler.lambda_handler, service=service.jobs),
    ).run_until_idle(idle_seconds=1, max_seconds=120)

    # Then the job is done, each range recorded once, the bad line named by its file line
    done = service.jobs.get(job.job_id)
    assert done.state is JobState.DONE and sorted(done.parts) == ["0", "1", "2"]
    assert done.progress["ranges_done"] == 3 and done.progress["accepted"] == LINES - 1
    assert done.progress["bad_rows"] == 1 and done.result["lines"] == LINES
    assert done.result["problems"] == [f"{BAD_LINE}: email: not a valid email address"]
    # ... and every batch was recorded once and enqueued once (range 1's run again found
    # its batches enqueued: content-addressed ids, the same bytes read from the pinned ETag)
    store = DynamoDBCampaignStore(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table)
    batches = [batch for batch, _ in store.batches("c1")]
    published = [r.recipient_id for b in batches for r in b.recipients]
    assert len(published) == len(set(published)) == LINES - 1
    assert queued(system.resources.queue_url) == len(batches)
    assert done.progress["batches_new"] + done.progress["batches_already_enqueued"] == len(batches)
    assert done.progress["batches_already_enqueued"] == died["counts"]["batches_new"] > 0
    assert service.get("c1").state is CampaignState.SENDING


def test_a_strict_publish_checks_every_range_first_and_publishes_nothing_when_one_line_is_bad(system):
    system.campaign()
    bucket, key = recipient_file(system)
    service, publisher, _ = queued_publisher(system, queued=False)  # the parts run in process, one after another

    job = publisher.start(
        "c1", bucket=bucket, key=key, fmt=None, strict=True, dedupe_addresses=False, send_at_ms=None, by="test"
    )

    assert job.state is JobState.FAILED and job.progress["ranges_checked"] == 3
    assert (
        job.error
        == f"s3://{bucket}/{key}: 1 bad row(s); nothing was published: line {BAD_LINE}: email: not a valid email address"
    )
    assert service.get("c1").state is CampaignState.DRAFT and queued(system.resources.queue_url) == 0
