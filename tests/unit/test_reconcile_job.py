"""The reconcile job (domain/jobs): the ledger counted by state a page a step, the counts kept
in the job with the cursor, and the drifts against the counters as its result."""

from __future__ import annotations

import pytest

from sendonce.domain.campaigns.counters import BatchRecorded, CounterAggregator, DeliveryChange, StreamPosition
from sendonce.domain.errors import InvalidCampaignError
from sendonce.domain.jobs.models import JobKind, JobState
from sendonce.domain.jobs.service import InMemoryJobStore, JobService
from sendonce.domain.jobs.work import Reconcile
from sendonce.domain.models import DeliveryRecord, DeliveryState
from tests.fakes import FakeCounters, FakeJobQueue, FakeLedger
from tests.unit.helpers import World

S = DeliveryState
SENT, UNKNOWN = 7, 2  # r0..r6 sent, r7..r8 unknown, r9 published and never claimed


class WorkerDiedError(Exception):
    pass


class DyingStore(InMemoryJobStore):
    """A worker that dies after its page, before the write that moves the job on."""

    def __init__(self) -> None:
        super().__init__()
        self.die_at_step: int | None = None

    def advance(self, old, new) -> bool:
        if new.steps == self.die_at_step:
            self.die_at_step = None
            raise WorkerDiedError()
        return super().advance(old, new)


def rig(*, counted: bool = True, queued: bool = False, store: InMemoryJobStore | None = None):
    world = World()
    world.campaign("c1")
    ledger = FakeLedger()
    for i in range(SENT + UNKNOWN):
        state = S.SENT if i < SENT else S.UNKNOWN
        ledger.items[("c1", f"r{i}")] = DeliveryRecord(campaign_id="c1", recipient_id=f"r{i}", state=state)
    counters = FakeCounters()
    if counted:
        counters.count_from_creation("c1")
        counters.record_batch("c1")
        aggregate = CounterAggregator(counters=counters, campaigns=world.campaigns, clock_ms=world.clock)
        ids = tuple(f"r{i}" for i in range(10))
        position = StreamPosition(source="campaigns", shard_id="campaign#c1", sequence=1)
        events: list = [BatchRecorded(campaign_id="c1", position=position, batch_id="b1", recipient_ids=ids)]
        for i in range(SENT + UNKNOWN):
            at = StreamPosition(source="ledger", shard_id="c1#0", sequence=2 + i)
            events.append(
                DeliveryChange(campaign_id="c1", position=at, old=None, new=S.SENT if i < SENT else S.UNKNOWN)
            )
        aggregate.apply(events)
    service = JobService(
        jobs=store or InMemoryJobStore(),
        queue=FakeJobQueue() if queued else None,
        campaigns=world.campaigns,
        clock=lambda: "2026-12-02T00:00:00.000+00:00",
        work={JobKind.RECONCILE: Reconcile(ledger=ledger, counters=counters, page_records=4)},
    )
    return service, ledger


def test_a_reconcile_job_counts_every_record_once_a_page_a_step_and_finds_no_drift_at_rest():
    service, _ = rig()

    job = service.start_reconcile("c1", by="ops", job_id="j1")

    assert job.kind is JobKind.RECONCILE and job.state is JobState.DONE and job.steps == 3  # 9 records, 4 a step
    assert job.progress == {"records_read": 9, "ledger_sent": SENT, "ledger_unknown": UNKNOWN}
    assert job.result is not None and job.result["counted"] and job.result["drifts"] == []
    assert job.result["ledger"]["pending"] == 1 and job.result["ledger"]["sent"] == SENT


def test_a_drift_is_named_by_state_with_both_counts():
    service, ledger = rig()
    del ledger.items[("c1", "r0")]  # a ledger record lost: the counters still count it sent

    result = service.start_reconcile("c1", by="ops").result

    assert result is not None
    drifts = {(d["state"], d["counter"], d["ledger"]) for d in result["drifts"]}
    assert drifts == {("sent", SENT, SENT - 1), ("pending", 1, 2)}


def test_a_worker_killed_after_its_page_and_before_the_write_leaves_the_counts_exact():
    store = DyingStore()
    service, _ = rig(queued=True, store=store)
    service.start_reconcile("c1", by="ops", job_id="j1")
    store.die_at_step = 2

    service.work("j1")
    with pytest.raises(WorkerDiedError):
        service.work("j1")  # page 2 read, then the worker died: the message comes back
    assert store.get("j1").steps == 1
    while not store.get("j1").done:
        service.work("j1")

    job = store.get("j1")
    assert job.progress == {"records_read": 9, "ledger_sent": SENT, "ledger_unknown": UNKNOWN}
    assert job.result is not None and job.result["drifts"] == []


def test_the_same_step_taken_by_two_workers_counts_its_page_once():
    service, _ = rig(queued=True)
    service.start_reconcile("c1", by="ops", job_id="j1")
    first, second = service._jobs.get("j1"), service._jobs.get("j1")  # both read version 0
    assert service._jobs.advance(first, first.model_copy(update={"version": 1, "steps": 1}))

    assert not service._jobs.advance(second, second.model_copy(update={"version": 1}))
    while not service.get("j1").done:
        service.work("j1")
    assert service.get("j1").progress["records_read"] == 9


def test_a_campaign_without_counters_reports_its_records_and_nothing_to_compare():
    service, _ = rig(counted=False)

    result = service.start_reconcile("c1", by="ops").result

    assert result is not None and not result["counted"] and result["drifts"] == []
    assert result["ledger"]["sent"] == SENT


def test_a_service_without_counters_refuses_to_start_one():
    world = World()
    world.campaign("c1")
    service = JobService(jobs=InMemoryJobStore(), queue=None, campaigns=world.campaigns, clock=lambda: "now", work={})

    with pytest.raises(InvalidCampaignError, match="reconcile: this service keeps no counters"):
        service.start_reconcile("c1", by="ops")
