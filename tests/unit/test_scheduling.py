"""Scheduled sends with in-memory fakes: the time an operator writes, the lifecycle rows, and
what publish --at, reschedule, unschedule, cancel and a schedule's firings do."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.scheduling import Firing, iso, parse_instant, parse_send_at, start_holder
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.spec import CampaignSpec
from sendonce.domain.errors import IllegalTransitionError, InvalidCampaignError
from sendonce.domain.jobs import work as jobs_work
from sendonce.domain.models import Campaign, CampaignState, Content
from tests.fakes import FakeCampaignStore, FakeJobQueue, FakeLedger, FakeQueue, FakeScheduler
from tests.unit.helpers import jobs_of, recipients

C = CampaignState
NOW = parse_instant("2026-12-01T12:00:00Z")
MINUTE = 60_000


class Clock:
    def __init__(self, ms: int):
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def scheduler() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def queue() -> FakeQueue:
    return FakeQueue()


@pytest.fixture
def store() -> FakeCampaignStore:
    return FakeCampaignStore()


@pytest.fixture
def service(store, queue, scheduler, clock) -> CampaignService:
    svc = CampaignService(
        campaigns=store,
        ledger=FakeLedger(),
        queue=queue,
        provider_names=["ses", "resend"],
        operator="ann",
        clock_ms=clock,
        scheduler=scheduler,
    )
    svc.create(_campaign())
    return svc


def _campaign(campaign_id: str = "c1", **extra) -> Campaign:
    return Campaign(
        campaign_id=campaign_id,
        name="n",
        provider="resend",
        sender="a@example.com",
        content=Content(subject="s", text="t"),
        **extra,
    )


def _queued(queue: FakeQueue) -> list[str]:
    return [r["recipient_id"] for body in queue.published for r in json.loads(body)["recipients"]]


# --- the time an operator writes ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "utc"),
    [
        ("2026-12-02T09:00:00+01:00", "2026-12-02T08:00:00Z"),
        ("2026-12-02T09:00:00Z", "2026-12-02T09:00:00Z"),
        ("2026-12-02T09:00:00-05:30", "2026-12-02T14:30:00Z"),
        ("2026-12-02 09:00:00.750+00:00", "2026-12-02T09:00:00Z"),  # to the second
    ],
)
def test_an_instant_with_its_offset_is_read_to_the_second(text, utc):
    assert iso(parse_instant(text)) == utc


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("2026-12-02T09:00:00", "has no UTC offset"),
        ("tomorrow at nine", "is not an ISO 8601 time"),
        ("2026-02-30T09:00:00Z", "is not an ISO 8601 time"),
    ],
)
def test_an_instant_without_an_offset_or_not_a_time_is_refused_by_name(text, says):
    with pytest.raises(InvalidCampaignError, match=f"^send_at: .*{says}"):
        parse_instant(text)


def test_a_time_in_the_past_or_now_is_refused_naming_both_times():
    with pytest.raises(
        InvalidCampaignError, match=r"2026-12-01T11:59:59Z is in the past \(now is 2026-12-01T12:00:00Z\)"
    ):
        parse_send_at("2026-12-01T12:59:59+01:00", now_ms=NOW)
    with pytest.raises(InvalidCampaignError, match="in the past"):
        parse_send_at("2026-12-01T12:00:00Z", now_ms=NOW)
    assert parse_send_at("2026-12-01T12:00:01Z", now_ms=NOW) == NOW + 1000
    with pytest.raises(InvalidCampaignError, match="more than 366 days ahead"):
        parse_send_at("2027-12-03T12:00:00Z", now_ms=NOW)


def test_the_spec_carries_send_at_and_refuses_one_without_an_offset():
    base = {"id": "c2", "name": "n", "subject": "s", "from": "a@example.com", "text": "t", "provider": "ses"}
    assert CampaignSpec.model_validate({**base, "send_at": "2026-12-02T09:00:00+01:00"}).to_campaign().send_at_ms == (
        parse_instant("2026-12-02T08:00:00Z")
    )
    with pytest.raises(ValueError, match="has no UTC offset"):
        CampaignSpec.model_validate({**base, "send_at": "2026-12-02T09:00:00"})


# --- the lifecycle rows ---------------------------------------------------------------


def test_the_lifecycle_table_has_the_scheduled_state_and_its_events():
    rows = {(t.event, t.source, t.target, t.by) for t in lifecycle.TRANSITIONS}
    assert {
        (CampaignEvent.SCHEDULE, C.DRAFT, C.SCHEDULED, "operator"),
        (CampaignEvent.PUBLISH, C.SCHEDULED, C.SCHEDULED, "operator"),
        (CampaignEvent.RESCHEDULE, C.SCHEDULED, C.SCHEDULED, "operator"),
        (CampaignEvent.UNSCHEDULE, C.SCHEDULED, C.DRAFT, "operator"),
        (CampaignEvent.START, C.SCHEDULED, C.SENDING, "sendonce"),
        (CampaignEvent.CANCEL, C.SCHEDULED, C.CANCELLED, "operator"),
    } <= rows
    assert not lifecycle.can(CampaignEvent.PAUSE, C.SCHEDULED)
    assert not lifecycle.can(CampaignEvent.RESUME, C.SCHEDULED)
    assert not lifecycle.can(CampaignEvent.START, C.DRAFT)


# --- publish --at, reschedule, unschedule, cancel ---------------------------------------


def test_publish_at_records_every_recipient_enqueues_none_and_sets_the_schedule(service, queue, scheduler, store):
    at = NOW + 10 * MINUTE
    report = service.publish("c1", recipients(25), batch_size=2, send_at_ms=at)

    campaign = service.get("c1")
    assert (campaign.state, campaign.send_at_ms, campaign.publishing_until_ms) == (C.SCHEDULED, at, None)
    assert queue.published == []
    assert (report.accepted, report.batches_recorded, report.messages_sent) == (25, 13, 0)
    assert report.send_at == iso(at)
    assert scheduler.schedules == {"c1": at}
    assert service.status("c1").pending == 25  # recorded: status counts them
    assert all(not enqueued for _, enqueued in store.batches("c1"))


def test_publishing_more_to_a_scheduled_campaign_records_them_for_the_start(service, queue):
    service.publish("c1", recipients(3), send_at_ms=NOW + MINUTE)
    service.publish("c1", recipients(5))

    assert queue.published == []
    assert service.get("c1").state is C.SCHEDULED
    assert service.status("c1").total == 5


def test_a_spec_send_at_schedules_the_publish_and_a_past_one_is_refused(service, scheduler, clock):
    service.create(_campaign("c2", send_at_ms=NOW + MINUTE))
    service.publish("c2", recipients(2))
    assert service.get("c2").state is C.SCHEDULED
    assert scheduler.schedules["c2"] == NOW + MINUTE

    service.create(_campaign("c3", send_at_ms=NOW + MINUTE))
    clock.ms += 2 * MINUTE
    with pytest.raises(InvalidCampaignError, match="in the past"):
        service.publish("c3", recipients(2))
    assert service.get("c3").state is C.DRAFT


def test_a_past_time_is_refused_before_anything_is_recorded(service, store):
    with pytest.raises(InvalidCampaignError, match="in the past"):
        service.publish("c1", recipients(2), send_at_ms=NOW - 1000)
    assert (service.get("c1").state, list(store.batches("c1"))) == (C.DRAFT, [])


def test_only_a_draft_is_scheduled(service):
    service.publish("c1", recipients(2))
    with pytest.raises(IllegalTransitionError, match="is sending; only a draft can be scheduled"):
        service.publish("c1", recipients(2), send_at_ms=NOW + MINUTE)


def test_reschedule_moves_the_time_and_a_firing_for_the_old_one_starts_nothing(service, queue, scheduler):
    service.publish("c1", recipients(3), send_at_ms=NOW + MINUTE)
    service.reschedule("c1", NOW + 5 * MINUTE)
    assert scheduler.schedules == {"c1": NOW + 5 * MINUTE}

    stale = service.start_scheduled(Firing("c1", NOW + MINUTE))
    assert not stale.started
    assert "scheduled for 2026-12-01T12:05:00Z, not 2026-12-01T12:01:00Z" in stale.reason
    assert queue.published == []

    started = service.start_scheduled(Firing("c1", NOW + 5 * MINUTE))
    assert started.started and started.batches_enqueued == 1
    assert sorted(_queued(queue)) == ["r0", "r1", "r2"]


def test_unschedule_goes_back_to_draft_and_the_next_publish_sends_the_recorded_recipients(service, queue, scheduler):
    service.publish("c1", recipients(3), send_at_ms=NOW + MINUTE)
    draft = service.unschedule("c1")
    assert (draft.state, draft.send_at_ms, scheduler.schedules) == (C.DRAFT, None, {})

    assert not service.start_scheduled(Firing("c1", NOW + MINUTE)).started
    assert queue.published == []

    report = service.publish("c1", recipients(4)[3:])  # one more, sent now with the three kept
    assert service.get("c1").state is C.SENDING
    assert sorted(_queued(queue)) == ["r0", "r1", "r2", "r3"]
    assert report.messages_sent == 2


def test_cancel_before_the_firing_deletes_the_schedule_and_the_firing_starts_nothing(service, queue, scheduler):
    service.publish("c1", recipients(3), send_at_ms=NOW + MINUTE)
    service.cancel("c1")
    assert scheduler.schedules == {}
    closing = list(queue.published)  # cancel publishes the recorded recipients so consumers close them

    result = service.start_scheduled(Firing("c1", NOW + MINUTE))
    assert (result.started, result.reason) == (False, "campaign is cancelled; nothing started")
    assert queue.published == closing
    assert all(json.loads(b)["batch_id"].startswith("x") for b in closing)


# --- firings --------------------------------------------------------------------------


def test_a_schedule_that_fires_twice_enqueues_the_recorded_batches_once(service, queue):
    service.publish("c1", recipients(5), batch_size=2, send_at_ms=NOW + MINUTE)

    first = service.start_scheduled(Firing("c1", NOW + MINUTE, execution_id="e1"))
    second = service.start_scheduled(Firing("c1", NOW + MINUTE, execution_id="e2"))

    assert (first.started, first.batches_enqueued) == (True, 3)
    assert (second.started, second.batches_enqueued, second.reason) == (False, 0, "already started by this schedule")
    assert sorted(_queued(queue)) == ["r0", "r1", "r2", "r3", "r4"]
    campaign = service.get("c1")
    assert (campaign.state, campaign.state_changed_by, campaign.publishing_until_ms) == (
        C.SENDING,
        lifecycle.AUTOMATIC,
        None,
    )


def test_a_repeat_firing_finishes_what_an_interrupted_one_left(service, queue, store):
    service.publish("c1", recipients(5), batch_size=1, send_at_ms=NOW + MINUTE)
    # The first firing took `start` and died before enqueueing anything.
    service._take_start("c1", NOW + MINUTE, start_holder(NOW + MINUTE))

    again = service.start_scheduled(Firing("c1", NOW + MINUTE))

    assert (again.started, again.batches_enqueued) == (False, 5)
    assert sorted(_queued(queue)) == ["r0", "r1", "r2", "r3", "r4"]
    assert service.get("c1").publishing_until_ms is None


def test_a_firing_for_a_paused_or_unknown_state_says_so(service):
    service.publish("c1", recipients(2), send_at_ms=NOW + MINUTE)
    service.start_scheduled(Firing("c1", NOW + MINUTE))
    service.pause("c1")
    result = service.start_scheduled(Firing("c1", NOW + MINUTE))
    assert (result.started, result.reason) == (False, "campaign is paused; nothing started")


def test_a_firing_event_round_trips_and_a_bad_one_is_refused():
    firing = Firing("c1", NOW, execution_id="x")
    assert Firing.from_event(firing.as_event()) == firing
    with pytest.raises(InvalidCampaignError):
        Firing.from_event({"campaign_id": "c1", "send_at": "2026-12-01T12:00:00"})
    with pytest.raises(InvalidCampaignError):
        Firing.from_event(["c1"])


def test_without_a_scheduler_send_at_is_refused(store, queue, clock):
    svc = CampaignService(campaigns=store, ledger=FakeLedger(), queue=queue, provider_names=["resend"], clock_ms=clock)
    svc.create(_campaign())
    with pytest.raises(InvalidCampaignError, match="no scheduler"):
        svc.publish("c1", recipients(1), send_at_ms=NOW + MINUTE)


# --- settings and names ---------------------------------------------------------------


def test_the_api_settings_take_the_three_scheduler_values_together():
    from sendonce.domain.errors import SettingsError
    from sendonce.settings import ApiSettings

    base = {
        "SENDONCE_LEDGER_TABLE": "ledger",
        "SENDONCE_CAMPAIGNS_TABLE": "campaigns",
        "SENDONCE_QUEUE_URL": "https://sqs.example/q",
        "SENDONCE_DEAD_LETTER_QUEUE_URL": "https://sqs.example/d",
    }
    assert ApiSettings.from_env(base).scheduler_group is None
    with pytest.raises(SettingsError, match="go together"):
        ApiSettings.from_env({**base, "SENDONCE_SCHEDULER_GROUP": "g"})
    full = ApiSettings.from_env(
        {
            **base,
            "SENDONCE_SCHEDULER_GROUP": "g",
            "SENDONCE_SCHEDULER_ROLE_ARN": "arn:aws:iam::123456789012:role/r",
            "SENDONCE_SCHEDULED_START_FUNCTION_ARN": "arn:aws:lambda:us-east-1:123456789012:function:f",
        }
    )
    assert full.scheduler_group == "g"


def test_a_schedule_name_fits_64_characters_and_stays_unique():
    from sendonce.adapters.scheduler import at_expression, schedule_name

    assert schedule_name("spring-2026") == "spring-2026"
    long_a, long_b = "a" * 99 + "1", "a" * 99 + "2"
    assert len(schedule_name(long_a)) == 64 and schedule_name(long_a) != schedule_name(long_b)
    assert at_expression(parse_instant("2026-12-02T09:00:00+01:00")) == "at(2026-12-02T08:00:00)"


def test_a_time_given_to_the_millisecond_is_kept_to_the_second_so_its_firing_matches(service, queue, scheduler):
    # Regression (found by the model check): a caller of the service may pass any epoch ms;
    # the schedule and its firing carry whole seconds, so a finer send_at could never start.
    service.publish("c1", recipients(2), send_at_ms=NOW + MINUTE + 750)
    assert service.get("c1").send_at_ms == scheduler.schedules["c1"] == NOW + MINUTE

    firing = Firing.from_event(Firing("c1", scheduler.schedules["c1"]).as_event())
    assert service.start_scheduled(firing).started


def test_reschedule_keeps_the_time_to_the_second(service, scheduler):
    service.publish("c1", recipients(1), send_at_ms=NOW + MINUTE)
    service.reschedule("c1", NOW + 2 * MINUTE + 1)
    assert service.get("c1").send_at_ms == scheduler.schedules["c1"] == NOW + 2 * MINUTE


def test_enqueueing_the_recorded_batches_stops_when_the_campaign_is_cancelled(service, queue):
    service.publish("c1", recipients(3), batch_size=1, send_at_ms=NOW + MINUTE)
    service.cancel("c1")
    closing = list(queue.published)

    # The lease renewal is refused: nothing more is sent, and the job's page says why it stopped.
    assert service._enqueue_recorded_page("c1", "a-publisher", None, 100) == (0, None, "campaign is cancelled")
    assert queue.published == closing


# --- the start as a job (issue 17: nothing O(recipients) in one invocation) ----------------


@pytest.fixture
def queued_service(store, queue, scheduler, clock, monkeypatch):
    """The service as deployed: its jobs on a jobs queue, a step per message; two batch
    records a step, so that five batches take three steps."""
    monkeypatch.setattr(jobs_work, "PAGE_RECORDED_BATCHES", 2)
    job_queue = FakeJobQueue()
    svc = CampaignService(
        campaigns=store,
        ledger=FakeLedger(),
        queue=queue,
        provider_names=["resend"],
        operator="ann",
        clock_ms=clock,
        scheduler=scheduler,
        jobs=jobs_of(store, queue=job_queue, clock=str),
    )
    svc.create(_campaign())
    return svc, job_queue


def test_a_firing_starts_a_job_and_enqueues_nothing_itself(queued_service, queue):
    service, job_queue = queued_service
    service.publish("c1", recipients(5), batch_size=1, send_at_ms=NOW + MINUTE)

    fired = service.start_scheduled(Firing("c1", NOW + MINUTE))

    job_id = f"c1-start-{NOW + MINUTE}"
    assert (fired.started, fired.batches_enqueued, fired.job_id) == (True, 0, job_id)
    assert queue.published == [] and job_queue.submitted == [job_id]
    assert service.get("c1").publishing_until_ms is not None  # the start's lease holds until the job ends
    steps = 0
    while (moved := service.jobs.work(job_id)) is not None and not moved.done:
        steps += 1
    job = service.jobs.get(job_id)
    assert (job.state.value, job.steps, job.progress["enqueued"], job.result) == ("done", 3, 5, {"enqueued": 5})
    assert sorted(_queued(queue)) == ["r0", "r1", "r2", "r3", "r4"]
    assert service.get("c1").publishing_until_ms is None  # its last step ended the lease


def test_a_start_step_taken_again_enqueues_no_batch_twice(queued_service, queue):
    """A worker that died after its page but before moving the job on: the message comes
    back and the same page is read again; its batches are marked, so none goes out twice.
    A firing repeated meanwhile finds the job and submits it again; it starts nothing new."""
    service, job_queue = queued_service
    service.publish("c1", recipients(5), batch_size=1, send_at_ms=NOW + MINUTE)
    fired = service.start_scheduled(Firing("c1", NOW + MINUTE))
    store = service.jobs._jobs
    before = store.get(fired.job_id)
    service.jobs.step(fired.job_id)
    store.jobs[fired.job_id] = before  # the step's write never happened
    assert len(queue.published) == 2

    again = service.start_scheduled(Firing("c1", NOW + MINUTE))
    assert (again.started, again.job_id, job_queue.submitted) == (False, fired.job_id, [fired.job_id] * 2)
    service.jobs.run(fired.job_id)

    assert sorted(_queued(queue)) == ["r0", "r1", "r2", "r3", "r4"]  # each once
    # The job counts what its recorded steps enqueued: the lost step's two are not among them.
    assert service.jobs.get(fired.job_id).progress["enqueued"] == 3


def test_a_publish_after_an_unschedule_enqueues_the_recorded_batches_as_a_job(queued_service, queue):
    service, job_queue = queued_service
    service.publish("c1", recipients(3), batch_size=1, send_at_ms=NOW + MINUTE)
    service.unschedule("c1")

    report = service.publish("c1", recipients(4)[3:], batch_size=1)

    assert _queued(queue) == ["r3"]  # its own recipient; the recorded ones are the job's
    (job_id,) = job_queue.submitted
    assert job_id.startswith("c1-enqueue-") and service.get("c1").publishing_until_ms is not None
    service.jobs.run(job_id)
    assert sorted(_queued(queue)) == ["r0", "r1", "r2", "r3"] and report.messages_sent == 1
    assert service.get("c1").publishing_until_ms is None
