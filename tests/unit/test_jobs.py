"""Jobs (domain/jobs): a page a step, moved on by one conditional write, so that a worker
that dies anywhere, or two workers on the same step, end with the same result."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.jobs.models import JobKind, JobState
from sendonce.domain.jobs.service import InMemoryJobStore, JobService
from sendonce.domain.jobs.work import Republish
from sendonce.domain.models import SCHEMA_VERSION, BatchMessage, DeliveryRecord, DeliveryState
from tests.fakes import FakeCampaignStore, FakeJobQueue, FakeLedger, FakeQueue
from tests.unit.helpers import World, recipients

NOT_ENDED = (DeliveryState.PENDING, DeliveryState.CLAIMED, DeliveryState.IN_FLIGHT, DeliveryState.DEAD_LETTERED)


class Jobs:
    """A campaign of 7 batches of 10 recipients: r0-r19 sent, r20-r24 dead-lettered, the
    rest never claimed; jobs read 3 batch records a step."""

    def __init__(self, *, queued: bool = False, store: InMemoryJobStore | None = None):
        world = World()
        world.campaign()
        self.campaigns: FakeCampaignStore = world.campaigns
        self.ledger: FakeLedger = world.ledger
        people = recipients(70)
        for i in range(7):
            self.campaigns.add_batch(
                BatchMessage(
                    schema_version=SCHEMA_VERSION,
                    campaign_id="c1",
                    batch_id=f"b{i}",
                    recipients=people[i * 10 : (i + 1) * 10],
                )
            )
        for i in range(25):
            state = DeliveryState.SENT if i < 20 else DeliveryState.DEAD_LETTERED
            self.ledger.items[("c1", f"r{i}")] = DeliveryRecord(campaign_id="c1", recipient_id=f"r{i}", state=state)
        self.queue = FakeQueue()
        self.job_queue = FakeJobQueue() if queued else None
        self.store = store or InMemoryJobStore()
        self.service = JobService(
            jobs=self.store,
            queue=self.job_queue,
            campaigns=self.campaigns,
            clock=lambda: "2026-12-02T00:00:00.000+00:00",
            work={
                JobKind.REPUBLISH: Republish(
                    campaigns=self.campaigns, ledger=self.ledger, queue=self.queue, page_batches=3
                )
            },
        )

    def republished(self) -> list[str]:
        return [r["recipient_id"] for body in self.queue.published for r in json.loads(body)["recipients"]]

    def start(self, **options):
        return self.service.start_republish("c1", NOT_ENDED, prefix="r", by="ops", job_id="j1", **options)


EXPECTED = {f"r{i}" for i in range(20, 70)}  # everyone not ended, dead-lettered included


def test_a_job_run_in_process_republishes_every_recipient_not_ended_once_a_page_at_a_time():
    jobs = Jobs()

    job = jobs.start()

    assert job.state is JobState.DONE and job.steps == 3  # 7 batch records, 3 a step
    assert sorted(jobs.republished()) == sorted(EXPECTED)
    assert job.progress == {"batches_read": 7, "recipients_read": 70, "republished": 50, "messages": 3}


def test_a_queued_job_goes_a_step_a_message_and_the_last_step_submits_nothing():
    jobs = Jobs(queued=True)

    job = jobs.start()
    assert job.state is JobState.RUNNING and jobs.job_queue.submitted == ["j1"] and not jobs.queue.published

    while jobs.job_queue.submitted:
        jobs.service.work(jobs.job_queue.submitted.pop(0))

    assert jobs.service.get("j1").state is JobState.DONE
    assert sorted(jobs.republished()) == sorted(EXPECTED)


def test_a_worker_that_dies_after_its_page_leaves_the_job_where_it_was_and_the_page_is_done_again():
    class DiesOnce(InMemoryJobStore):
        died = False

        def advance(self, old, new):
            if old.steps == 1 and not self.died:
                self.died = True
                raise ConnectionError("killed between the page and the write")
            return super().advance(old, new)

    jobs = Jobs(queued=True, store=DiesOnce())
    jobs.start()
    step = jobs.job_queue.submitted.pop(0)
    jobs.service.work(step)  # page 1
    with pytest.raises(ConnectionError):
        jobs.service.work(jobs.job_queue.submitted.pop(0))  # page 2 published, never recorded
    jobs.job_queue.submitted.append("j1")  # the message comes back after its visibility timeout

    while jobs.job_queue.submitted:
        jobs.service.work(jobs.job_queue.submitted.pop(0))

    job = jobs.service.get("j1")
    assert job.state is JobState.DONE and job.steps == 3
    # Page 2 (b3-b5: r30-r59) was published twice; the ledger sends each recipient once.
    assert set(jobs.republished()) == EXPECTED
    assert len(jobs.republished()) == len(EXPECTED) + 30
    assert job.progress["republished"] == 50  # counted once, by the write that moved the job


def test_two_workers_on_the_same_step_one_goes_on_and_the_other_stops():
    class StaleOnce(InMemoryJobStore):
        stale = None

        def get(self, job_id):
            job = super().get(job_id)
            if self.stale is None:
                self.stale = job
            return self.stale if job.steps == 1 and self.stale.steps == 0 else job

    store = StaleOnce()
    jobs = Jobs(queued=True, store=store)
    jobs.start()
    first = jobs.service.work(jobs.job_queue.submitted.pop(0))
    assert first is not None and first.steps == 1
    # A second worker that read the job before the first one's write: its write loses.
    assert jobs.service.work("j1") is None
    assert jobs.job_queue.submitted == ["j1"]  # only the winner submitted the next step


def test_starting_a_job_twice_with_its_id_starts_it_once():
    jobs = Jobs()
    first = jobs.start()
    again = jobs.start()
    assert again == first and len(jobs.republished()) == len(EXPECTED)


def test_a_job_on_a_campaign_that_is_gone_fails_with_the_reason():
    jobs = Jobs()
    missing = _Missing()
    job = JobService(
        jobs=InMemoryJobStore(),
        queue=None,
        campaigns=missing,
        clock=lambda: "now",
        work={JobKind.REPUBLISH: Republish(campaigns=missing, ledger=jobs.ledger, queue=jobs.queue)},
    ).start_republish("c1", NOT_ENDED, prefix="r", by="ops")
    assert job.state is JobState.FAILED and "c1" in (job.error or "")


class _Missing(FakeCampaignStore):
    def batches_page(self, campaign_id, cursor, limit):
        from sendonce.domain.errors import CampaignNotFoundError

        raise CampaignNotFoundError(f"campaign {campaign_id!r} does not exist")
