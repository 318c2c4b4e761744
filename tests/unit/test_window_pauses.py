"""Send windows wired (domain/campaigns/window_pauses.py), with in-memory fakes: a consumer
reading a sending campaign outside its window pauses it with the reason and sets the next
opening's schedule; the opening's firing resumes only that pause, once, and republishes."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.scheduling import Firing, iso, parse_instant
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.windows import SendWindow
from sendonce.domain.models import Campaign, CampaignState, Content
from tests.fakes import FakeScheduler
from tests.unit.helpers import World, recipients

C = CampaignState
OFFICE = SendWindow.model_validate(
    {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "to": "17:00", "tz": "Europe/Berlin"}
)
SATURDAY = parse_instant("2026-12-05T10:00:00+01:00")
MONDAY_OPENING = parse_instant("2026-12-07T09:00:00+01:00")
WAITING = "window: opens 2026-12-07T09:00+01:00"


class Setup:
    def __init__(self, now_ms: int):
        self.world = World()
        self.world.clock.now_ms = now_ms
        self.scheduler = FakeScheduler()
        self.operator = CampaignService(
            campaigns=self.world.campaigns,
            ledger=self.world.ledger,
            queue=self.world.queue,
            provider_names=["resend", "ses"],
            operator="ann",
            clock_ms=self.world.clock,
            scheduler=self.scheduler,
        )
        self.consumer = self.world.service(scheduler=self.scheduler)
        self.automatic = CampaignService(
            campaigns=self.world.campaigns,
            ledger=self.world.ledger,
            queue=self.world.queue,
            provider_names=["resend", "ses"],
            operator=lifecycle.AUTOMATIC,
            clock_ms=self.world.clock,
        )

    def publish(self, n: int, window: SendWindow | None = OFFICE) -> None:
        self.operator.create(
            Campaign(
                campaign_id="c1",
                name="n",
                provider="resend",
                sender="news@example.com",
                content=Content(subject="Hello {{ name }}", text="Hi {{ name }}"),
                window=window,
            )
        )
        self.operator.publish("c1", iter(recipients(n)), batch_size=5)

    def consume_all(self) -> None:
        while self.world.queue.published:
            body = self.world.queue.published.pop(0)
            self.world.process(body, service=self.consumer)

    def state(self) -> tuple[CampaignState, str | None, str | None]:
        c = self.world.campaigns.get("c1")
        return c.state, c.state_reason, c.state_changed_by

    def opening(self, at_ms: int = MONDAY_OPENING):
        return self.automatic.open_window(Firing(campaign_id="c1", send_at_ms=at_ms, window_opening=True))


def test_a_consumer_outside_the_window_pauses_the_campaign_with_the_reason_and_sets_the_next_opening():
    setup = Setup(SATURDAY)
    setup.publish(7)

    setup.consume_all()

    assert setup.world.provider.accepted == []
    assert setup.state() == (C.PAUSED, WAITING, lifecycle.AUTOMATIC)
    assert setup.scheduler.openings == {"c1": {MONDAY_OPENING}}
    assert setup.operator.status("c1").pending == 7


def test_inside_the_window_the_consumer_sends():
    setup = Setup(parse_instant("2026-12-07T10:00:00+01:00"))
    setup.publish(3)
    setup.consume_all()
    assert len(setup.world.provider.accepted) == 3
    assert setup.scheduler.openings == {}


def test_the_opening_resumes_once_and_every_remaining_recipient_is_sent_once():
    setup = Setup(SATURDAY)
    setup.publish(7)
    setup.consume_all()

    setup.world.clock.now_ms = MONDAY_OPENING
    first = setup.opening()
    assert first.started and first.reason.startswith("resumed: window opened at 2026-12-07T09:00+01:00")
    assert setup.state()[0] is C.SENDING
    republished = list(setup.world.queue.published)
    assert sorted(r["recipient_id"] for b in republished for r in json.loads(b)["recipients"]) == [
        f"r{i}" for i in range(7)
    ]

    # A repeated firing (EventBridge Scheduler's retry) resumes nothing more and starts no second job
    again = setup.opening()
    assert not again.started and again.reason.startswith("already resumed by this opening")
    assert setup.world.queue.published == republished

    setup.consume_all()
    assert setup.world.provider.deliveries() == {f"user{i}@example.com": 1 for i in range(7)}
    assert setup.state()[0] is C.COMPLETED


def test_a_firing_for_another_opening_resumes_nothing():
    setup = Setup(SATURDAY)
    setup.publish(2)
    setup.consume_all()
    other = parse_instant("2026-12-08T09:00:00+01:00")
    result = setup.opening(other)
    assert not result.started
    assert result.reason == f"campaign is paused ({WAITING}), not window: opens 2026-12-08T09:00+01:00; nothing resumed"
    assert setup.state()[0] is C.PAUSED


def test_an_operator_pause_is_not_resumed_by_the_window():
    setup = Setup(parse_instant("2026-12-04T16:00:00+01:00"))  # Friday, open
    setup.publish(2)
    setup.operator.pause("c1", reason="legal review")

    setup.world.clock.now_ms = MONDAY_OPENING
    result = setup.opening()

    assert not result.started and "legal review" in result.reason
    assert setup.state() == (C.PAUSED, "legal review", "ann")


def test_pausing_a_window_paused_campaign_makes_the_pause_the_operators():
    setup = Setup(SATURDAY)
    setup.publish(2)
    setup.consume_all()
    assert setup.state()[1] == WAITING

    setup.operator.pause("c1", reason="hold it")
    assert setup.state() == (C.PAUSED, "hold it", "ann")

    setup.world.clock.now_ms = MONDAY_OPENING
    assert not setup.opening().started
    assert setup.state()[0] is C.PAUSED
    assert setup.world.provider.accepted == []


def test_a_campaign_without_a_window_is_never_paused_by_one():
    setup = Setup(SATURDAY)
    setup.publish(2, window=None)
    setup.consume_all()
    assert len(setup.world.provider.accepted) == 2
    result = setup.opening()
    assert not result.started and result.reason == "campaign has no send window; nothing resumed"


def test_the_pause_before_the_autumn_change_waits_for_the_opening_in_winter_time():
    # Friday 2026-10-23 18:00 CEST; summer time ends on Sunday: Monday 09:00 is 08:00Z, not 07:00Z.
    setup = Setup(parse_instant("2026-10-23T18:00:00+02:00"))
    setup.publish(1)
    setup.consume_all()
    assert setup.state()[1] == "window: opens 2026-10-26T09:00+01:00"
    [opening] = setup.scheduler.openings["c1"]
    assert iso(opening) == "2026-10-26T08:00:00Z"


def test_the_window_rows_of_the_lifecycle():
    assert lifecycle.sources(CampaignEvent.WINDOW_CLOSE) == [C.SENDING]
    assert lifecycle.sources(CampaignEvent.WINDOW_OPEN) == [C.PAUSED]
    # pause from sending, and over a pause (taking it over): one write that records who and why
    assert lifecycle.writes(CampaignEvent.PAUSE) == [(C.PAUSED, [C.SENDING, C.PAUSED], False)]


@pytest.mark.parametrize("text", ["17:00", 1020])  # YAML 1.1 reads an unquoted 17:00 as 1020
def test_a_yaml_clock_reads_as_written(text):
    window = SendWindow.model_validate({"days": ["mon"], "from": "09:00", "to": text, "tz": "UTC"})
    assert window.closes == "17:00"


def test_a_window_openings_firing_says_so_in_its_event():
    firing = Firing(campaign_id="c1", send_at_ms=MONDAY_OPENING, execution_id="x", window_opening=True)
    event = firing.as_event()
    assert event == {"campaign_id": "c1", "window_opens_at": "2026-12-07T08:00:00Z", "execution_id": "x"}
    assert Firing.from_event(event) == firing
    start = Firing.from_event({"campaign_id": "c1", "send_at": "2026-12-07T08:00:00Z"})
    assert not start.window_opening and start.send_at_ms == MONDAY_OPENING
