"""`resume --include-unknown` as a job (domain/jobs): unknowns reopened a page at a time by
the same rules as `resume_including_unknown` (only those proven not sent, unless possible
duplicates are accepted), then the campaign resumed; a step repeated reopens nobody twice."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.campaigns.ports import StateChange
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.unknowns import UnknownOutcomes
from sendonce.domain.errors import IllegalTransitionError
from sendonce.domain.jobs import work as jobs_work
from sendonce.domain.jobs.models import JobKind, JobState
from sendonce.domain.models import BatchMessage, CampaignState, DeliveryKey, DeliveryRecord, DeliveryState
from tests.fakes import FakeClock, FakeLedgerEvents
from tests.unit.helpers import World, jobs_of, recipients

NOW = 1_800_000_000_000
PROVEN = ("r1", "r3", "r5")  # of r0..r5 unknown, the audit proved these absent


@pytest.fixture
def rig(monkeypatch):
    monkeypatch.setattr(jobs_work, "PAGE_UNKNOWNS", 2)  # 6 unknowns: 3 pages
    world = World(provider_name="ses")
    world.campaign(state=CampaignState.PAUSED)
    people = recipients(8)
    world.campaigns.add_batch(BatchMessage(schema_version=1, campaign_id="c1", batch_id="b1", recipients=people))
    for i in range(8):
        state = DeliveryState.UNKNOWN if i < 6 else DeliveryState.SENT
        world.ledger.items[("c1", f"r{i}")] = DeliveryRecord(
            campaign_id="c1", recipient_id=f"r{i}", state=state, provider="ses", payload_hash="h"
        )
    events = FakeLedgerEvents(world.ledger)
    for rid in PROVEN:
        events.prove_not_sent(DeliveryKey(campaign_id="c1", recipient_id=rid), audit="audit-1")
    service = CampaignService(
        campaigns=world.campaigns,
        ledger=world.ledger,
        queue=world.queue,
        provider_names=["ses"],
        jobs=jobs_of(
            world.campaigns,
            unknown_outcomes=lambda accept: UnknownOutcomes(
                ledger_events=events, clock_ms=FakeClock(NOW), accept_possible_duplicates=accept
            ),
        ),
    )
    return world, service


def states(world) -> dict[str, DeliveryState]:
    return {rid: r.state for (_, rid), r in world.ledger.items.items()}


def test_only_the_unknowns_proven_not_sent_are_reopened_a_page_at_a_time_then_the_campaign_resumes(rig):
    world, service = rig

    job = service.start_resume_including_unknown("c1", older_than_s=0)

    assert job.kind is JobKind.RESUME_UNKNOWN and job.state is JobState.DONE and job.steps == 3
    assert sorted(job.listed["reopened"]) == list(PROVEN) and job.progress["reopened"] == 3
    assert {r for r, s in states(world).items() if s is DeliveryState.UNKNOWN} == {"r0", "r2", "r4"}
    republish = service.jobs.get(job.result["republish_job"])
    assert job.result["resumed"] and republish.progress["republished"] == 3
    assert service.get("c1").state is CampaignState.SENDING


def test_accepting_possible_duplicates_reopens_every_unknown_and_names_the_recipients_left(rig):
    world, service = rig

    job = service.start_resume_including_unknown(
        "c1", older_than_s=0, accept_possible_duplicates=True, recipient_ids=["r0", "r2", "r7"]
    )

    assert sorted(job.listed["reopened"]) == ["r0", "r2"] and job.listed["not_reopened"] == ["r7"]
    assert states(world)["r4"] is DeliveryState.UNKNOWN  # not named: untouched


def test_a_step_taken_again_after_its_worker_died_reopens_nobody_twice(rig):
    world, service = rig
    store = service.jobs._jobs
    advance = store.advance
    calls = {"n": 0}

    def dies_once(old, new):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("worker died after its page, before the write")
        return advance(old, new)

    store.advance = dies_once
    with pytest.raises(RuntimeError):
        service.start_resume_including_unknown("c1", older_than_s=0)
    [job_id] = [j for j in store.jobs if "resume_unknown" in j]
    store.advance = advance

    job = service.jobs.run(job_id)  # `sendonce job run ID`

    assert job.state is JobState.DONE
    assert {r for r, s in states(world).items() if s is DeliveryState.UNKNOWN} == {"r0", "r2", "r4"}
    # r3, reopened by the page whose write was lost, is pending now: not reopened again, and
    # (the one cost) not in the job's count; the resume republishes all three.
    assert job.progress["reopened"] == 2 and job.listed["reopened"] == ["r1", "r5"]
    published = [r for body in world.queue.published for r in json.loads(body)["recipients"]]
    assert sorted({r["recipient_id"] for r in published}) == list(PROVEN)


def test_a_cancelled_campaign_cannot_be_resumed_with_its_unknowns(rig):
    world, service = rig
    world.campaigns.transition(
        "c1", StateChange(to=CampaignState.CANCELLED, allowed_from=(CampaignState.PAUSED,), by="ops")
    )

    with pytest.raises(IllegalTransitionError, match="cancelled"):
        service.start_resume_including_unknown("c1")
