"""S3 publish as a job in parts (domain/campaigns/s3_publish.py) on fakes: ranges in any
order, a part taken twice recorded once, bad rows named by their line in the file (a CSV's
header read again for every range after the first), strict publishing nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from sendonce.domain.campaigns.ports import StoredObject
from sendonce.domain.campaigns.recipients_file import RecipientFileError
from sendonce.domain.campaigns.s3_publish import S3Publish
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.errors import CampaignNotFoundError, IllegalTransitionError
from sendonce.domain.jobs.models import JobKind, JobState
from sendonce.domain.jobs.pages import PartedWork
from sendonce.domain.models import CampaignState
from tests.fakes import FakeJobQueue
from tests.unit.helpers import World, jobs_of

BAD = {3: "x3,nobody,X\n", 41: "x41,x41@example.com\n"}  # line -> its text (line 1 is the header)


class FakeObjects:
    """Objects in memory, read by byte range as the S3 adapter reads them."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.reads = 0

    def head(self, bucket: str, key: str) -> StoredObject:
        if (bucket, key) not in self.objects:
            raise RecipientFileError(f"s3://{bucket}/{key}: cannot be read (404)")
        body = self.objects[(bucket, key)]
        return StoredObject(size=len(body), etag=f'"{hash(body)}"')

    def lines_in_range(self, bucket: str, key: str, start: int, end: int, *, pinned: StoredObject) -> Iterator[str]:
        self.reads += 1
        body = self.objects[(bucket, key)]
        assert f'"{hash(body)}"' == pinned.etag
        at = 0
        for raw in body.splitlines(keepends=True):
            if start <= at < end:
                yield raw.decode()
            at += len(raw)


def csv_file(lines: int = 60) -> bytes:
    rows = ["recipient_id,email,name\n"]
    for n in range(2, lines + 1):
        rows.append(BAD.get(n, f"r{n},user{n}@example.com,U{n}\n"))
    rows.append("r10,again@example.com,U10\n")  # the last line: r10 again, in another range
    return "".join(rows).encode()


def rig(*, queued: bool = False, range_bytes: int = 400):
    world = World()
    world.campaign("c1", state=CampaignState.DRAFT)
    job_queue = FakeJobQueue() if queued else None
    objects = FakeObjects()
    objects.objects[("b", "list.csv")] = csv_file()
    built: dict[str, S3Publish] = {}

    def parted(service: CampaignService) -> dict[JobKind, PartedWork]:
        built["publisher"] = S3Publish(service=service, objects=objects, range_bytes=range_bytes)
        return {JobKind.PUBLISH_S3: built["publisher"]}

    service = CampaignService(
        campaigns=world.campaigns,
        ledger=world.ledger,
        queue=world.queue,
        provider_names=["resend"],
        jobs=jobs_of(world.campaigns, queue=job_queue, parted=parted),
    )
    return world, service, built["publisher"], job_queue


def start(publisher, *, strict: bool = False, key: str = "list.csv", campaign: str = "c1"):
    return publisher.start(
        campaign, bucket="b", key=key, fmt=None, strict=strict, dedupe_addresses=False, send_at_ms=None, by="ops"
    )


def published(world) -> list[str]:
    return [r["recipient_id"] for body in world.queue.published for r in json.loads(body)["recipients"]]


def test_a_file_published_in_ranges_names_each_bad_row_by_its_line_in_the_file():
    world, service, publisher, _ = rig()

    job = start(publisher)

    assert job.state is JobState.DONE and job.params["parts"] >= 4
    assert job.progress["ranges_done"] == job.params["parts"] and job.result["lines"] == 61
    assert job.result["problems"] == [
        "3: email: not a valid email address",
        "41: expected 3 columns, found 2",
    ]
    # r10 twice, in different ranges: published by both, sent once by the ledger (a range
    # cannot see another's ids); everyone good published, no header published as a recipient
    ids = published(world)
    assert set(ids) == {f"r{n}" for n in range(2, 61) if n not in BAD}
    assert job.progress["bad_rows"] == 2 and job.progress["accepted"] == 57 + 1  # r10 in two ranges
    assert service.get("c1").state is CampaignState.SENDING


def test_parts_taken_in_any_order_and_twice_are_each_recorded_once():
    world, service, publisher, job_queue = rig(queued=True)
    job = start(publisher)
    parts = [n for _, n in job_queue.parts]
    assert parts == list(range(job.params["parts"])) and not world.queue.published

    for n in reversed(parts):
        service.jobs.work_part(job.job_id, n)
        service.jobs.work_part(job.job_id, n)  # the message received twice

    done = service.jobs.get(job.job_id)
    assert done.state is JobState.DONE and done.progress["ranges_done"] == len(parts)
    assert done.progress["accepted"] == 58 and done.progress["bad_rows"] == 2
    assert len(published(world)) == 58  # the second take of each part found its batches enqueued


def test_strict_checks_every_range_then_publishes_nothing_if_a_row_is_bad():
    world, service, publisher, _ = rig()

    job = start(publisher, strict=True)

    assert job.state is JobState.FAILED and job.progress["ranges_checked"] == job.params["parts"]
    assert job.error == (
        "s3://b/list.csv: 2 bad row(s); nothing was published: "
        "line 3: email: not a valid email address; line 41: expected 3 columns, found 2"
    )
    assert not world.queue.published and service.get("c1").state is CampaignState.DRAFT


def test_strict_with_a_good_file_checks_then_publishes_in_a_second_phase():
    world, service, publisher, job_queue = rig(queued=True)
    publisher._objects.objects[("b", "good.csv")] = b"recipient_id,email\n" + b"".join(
        f"g{n},g{n}@example.com\n".encode() for n in range(50)
    )
    job = start(publisher, strict=True, key="good.csv")
    first = [n for _, n in job_queue.parts]

    for n in first:
        service.jobs.work_part(job.job_id, n)
    assert not world.queue.published  # checked only
    second = [n for _, n in job_queue.parts][len(first) :]
    assert second == first  # the last check submitted every range again, to publish
    for n in second:
        service.jobs.work_part(job.job_id, n)

    done = service.jobs.get(job.job_id)
    assert done.state is JobState.DONE and done.progress["accepted"] == 50 and len(published(world)) == 50


def test_the_api_checks_before_any_job_a_missing_object_a_missing_campaign_a_cancelled_one():
    world, service, publisher, _ = rig()
    with pytest.raises(RecipientFileError, match="cannot be read"):
        start(publisher, key="none.csv")
    with pytest.raises(CampaignNotFoundError):
        start(publisher, campaign="nope")
    world.campaign("c2", state=CampaignState.CANCELLED)
    with pytest.raises(IllegalTransitionError, match="cancelled"):
        start(publisher, campaign="c2")
