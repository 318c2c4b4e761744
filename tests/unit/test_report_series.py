"""The report's series no stream record carries, with in-memory fakes: duplicates prevented
(the consumer's one write per message that had any) and lifecycle marks (left beside each
move `lifecycle.apply` makes)."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

import pytest

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import AUTOMATIC_HALT, CampaignEvent
from sendonce.domain.campaigns.report import build_report
from sendonce.domain.campaigns.report_data import (
    MINUTE_MS,
    PREVENTED_WRITERS,
    Mark,
    ReportAggregates,
    minute_of,
    prevented_writer,
)
from sendonce.domain.campaigns.service import DeliveryStatus
from sendonce.domain.deliverability.group_caps import GroupPacing
from sendonce.domain.models import CampaignState
from tests.fakes import FakeCampaignStore
from tests.unit.helpers import FakeGroupCaps, World, batch, recipients

T0 = 1_764_633_600_000


class FakeReportAggregates:
    def __init__(self, fail: bool = False):
        self.added: list[tuple[str, int, dict[str, int], str]] = []  # (campaign, minute, counts, writer)
        self.fail = fail

    def aggregates(self, campaign_id: str) -> ReportAggregates:
        return ReportAggregates()

    def add_counts(self, campaign_id: str, *, at_ms: int, counts: Mapping[str, int], writer: str) -> None:
        if self.fail:
            raise ConnectionError("table unreachable")
        self.added.append((campaign_id, minute_of(at_ms), dict(counts), writer))


@pytest.fixture
def world() -> World:
    world = World()
    world.campaign()
    return world


def test_a_fresh_message_adds_nothing_and_its_redelivery_adds_its_refusals_in_one_write(world):
    aggregates = FakeReportAggregates()
    service = world.service(report_aggregates=aggregates)

    first = world.process(batch(n=5), service=service)
    assert first.sent == 5 and aggregates.added == []

    again = world.process(batch(n=5), receive_count=2, service=service)
    assert again.duplicates_prevented == 5
    assert aggregates.added == [("c1", minute_of(world.clock()), {"prevented": 5}, prevented_writer("b1"))]


def test_emails_a_group_cap_held_are_added_in_the_same_one_write_and_unheld_sends_write_nothing(world):
    aggregates, caps = FakeReportAggregates(), FakeGroupCaps()
    pacing = GroupPacing(caps={"other": 5})
    service = world.service(report_aggregates=aggregates, group_caps=caps, pacing=pacing)

    assert world.process(batch(n=3), service=service).sent == 3
    assert aggregates.added == []  # sent without waiting: nothing to add

    caps.held_s = 0.4  # the group's second was full: each request waited for the next
    held = world.process(batch(batch_id="b2", people=recipients(3, start=3)), service=service)
    assert held.sent == 3 and dict(held.held_by_cap) == {"other": 3}
    assert aggregates.added == [("c1", minute_of(world.clock()), {"g:other:held": 3}, prevented_writer("b2"))]


def test_a_failed_report_write_neither_fails_nor_returns_the_message(world):
    service = world.service(report_aggregates=FakeReportAggregates(fail=True))
    world.process(batch(n=3), service=service)

    again = world.process(batch(n=3), receive_count=2, service=service)

    assert again.duplicates_prevented == 3 and not again.must_return
    assert sum(world.provider.deliveries().values()) == 3


def test_writers_are_stable_per_batch_and_bounded():
    writers = {prevented_writer(f"b{i}") for i in range(1000)}
    assert len(writers) == PREVENTED_WRITERS
    assert prevented_writer("b7") == prevented_writer("b7")


def test_operator_and_automatic_moves_leave_marks_but_a_publish_that_keeps_the_state_does_not():
    store = FakeCampaignStore()
    World(campaigns=store).campaign(state=CampaignState.DRAFT)

    lifecycle.apply(store, "c1", CampaignEvent.PUBLISH, by="ann")
    lifecycle.apply(store, "c1", CampaignEvent.PUBLISH, by="ann")  # stays sending
    lifecycle.apply(store, "c1", CampaignEvent.HALT, by=AUTOMATIC_HALT, reason="resend: quota")
    lifecycle.apply(store, "c1", CampaignEvent.RESUME, by="ann")
    lifecycle.apply(store, "c1", CampaignEvent.BRAKE, by="sendonce (complaint brake)")

    assert store.marks == [
        ("c1", "publish", "ann"),
        ("c1", "halt", AUTOMATIC_HALT),
        ("c1", "resume", "ann"),
        ("c1", "brake", "sendonce (complaint brake)"),
    ]


def test_stored_marks_and_given_marks_are_drawn_together_in_time_order():
    campaign = SimpleNamespace(campaign_id="c1", name="n", subject=None, provider="ses", delivery_mode="single")
    status = DeliveryStatus(
        campaign_id="c1", state=CampaignState.PAUSED, total=0, pending=0, in_progress=0, sent=0, failed=0,
        suppressed=0, unknown=0, cancelled=0, dead_lettered=0,
    )  # fmt: skip
    stored = [Mark(T0 + 2 * MINUTE_MS, "pause", "checking", by="ann"), Mark(T0, "publish", by="ann")]

    report = build_report(
        campaign=campaign,
        status=status,
        aggregates=ReportAggregates(marks=stored),
        marks=[Mark(T0 + MINUTE_MS, "brake", by="sendonce")],
        now_ms=T0,
    )

    assert [m.event for m in report.marks] == ["publish", "brake", "pause"]
