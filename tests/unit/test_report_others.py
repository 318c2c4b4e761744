"""The report's rate beside the other campaigns': which campaigns are read (from the listing,
by their times), what of theirs is kept (their sends within this campaign's minutes), and the
page's figure of it."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping

import pytest

from sendonce.domain.campaigns.report import MAX_OTHERS, ReportService
from sendonce.domain.campaigns.report_data import MINUTE_MS, Bucket, ReportAggregates
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.models import Campaign, CampaignState, Content
from sendonce_ops.report_page import render
from tests.unit.helpers import World

T0 = 1_764_633_600_000  # 2025-12-02 00:00 UTC


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


def minute(k: int) -> int:
    return T0 + k * MINUTE_MS


class FakeReportAggregates:
    """Each campaign's per-minute outcomes, and which campaigns were read."""

    def __init__(self, sent: dict[str, dict[int, int]]):
        self.sent = sent
        self.read: list[str] = []

    def aggregates(self, campaign_id: str) -> ReportAggregates:
        self.read.append(campaign_id)
        minutes = sorted(self.sent.get(campaign_id, {}).items())
        return ReportAggregates(outcomes_per_minute=[Bucket(m, {"sent": n, "failed": 1}) for m, n in minutes])

    def add_counts(self, campaign_id: str, *, at_ms: int, counts: Mapping[str, int], writer: str) -> None:
        raise AssertionError("a report writes nothing")


def add(world: World, campaign_id: str, state: CampaignState, *, created: int, changed: int) -> None:
    world.campaigns.campaigns[campaign_id] = Campaign(
        campaign_id=campaign_id,
        name=f"Campaign {campaign_id}",
        provider="resend",
        sender="news@example.com",
        content=Content(subject="Hi", text="Hello"),
        state=state,
        created_at=iso(created),
        updated_at=iso(changed),
    )


def reports(world: World, aggregates: FakeReportAggregates) -> ReportService:
    campaigns = CampaignService(
        campaigns=world.campaigns, ledger=world.ledger, queue=world.queue, provider_names=["ses", "resend"]
    )
    return ReportService(campaigns=campaigns, aggregates=aggregates, clock=lambda: minute(60))


@pytest.fixture
def world() -> World:
    # c1 sent in minutes 0..2; c2 overlapped it (minutes -5..1, completed at 1:30); c3
    # finished an hour before; c4 is a draft; c5 was created after c1's last minute.
    world = World()
    add(world, "c1", CampaignState.COMPLETED, created=minute(-1), changed=minute(3))
    add(world, "c2", CampaignState.COMPLETED, created=minute(-10), changed=minute(1) + 30_000)
    add(world, "c3", CampaignState.COMPLETED, created=minute(-120), changed=minute(-60))
    add(world, "c4", CampaignState.DRAFT, created=minute(-30), changed=minute(-30))
    add(world, "c5", CampaignState.SENDING, created=minute(10), changed=minute(10))
    return world


SENT = {
    "c1": {minute(0): 10, minute(1): 20, minute(2): 30},
    "c2": {minute(-5): 5, minute(0): 4, minute(1): 6},
    "c3": {minute(-90): 50, minute(-61): 50},
    "c5": {minute(11): 7},
}


def test_an_overlapping_campaigns_sends_within_this_ones_minutes_are_kept_and_no_other_campaign_is_read(world):
    aggregates = FakeReportAggregates(SENT)

    report = reports(world, aggregates).report("c1")

    # c2's minute -5 is before c1 sent: clipped; minutes 0 and 1 are its 4 and 6 sends
    assert report.others == {"c2": [Bucket(minute(0), {"sent": 4}), Bucket(minute(1), {"sent": 6})]}
    assert report.others_left_out == 0
    # the draft, the campaign long finished and the one created afterwards are never read
    assert aggregates.read == ["c1", "c2"]
    assert [b.counts["sent"] for b in report.timeline] == [10, 20, 30]


def test_a_campaign_that_has_not_sent_reads_no_other(world):
    aggregates = FakeReportAggregates({"c2": SENT["c2"]})

    report = reports(world, aggregates).report("c1")

    assert report.others == {} and aggregates.read == ["c1"]


def test_at_most_max_others_are_read_the_most_recent_and_the_rest_counted(world):
    sent = {"c1": SENT["c1"]}
    for k in range(MAX_OTHERS + 2):  # o0 .. o9, all sending through c1's minutes
        add(world, f"o{k}", CampaignState.SENDING, created=minute(-100 + k), changed=minute(-100 + k))
        sent[f"o{k}"] = {minute(1): k + 1}
    aggregates = FakeReportAggregates(sent)

    report = reports(world, aggregates).report("c1")

    # c2 overlaps too (11 in all): the 8 most recently created (c2, then o9 .. o3) are
    # drawn, o0 .. o2 left out
    assert report.others_left_out == 3
    assert set(aggregates.read) == {"c1", "c2", *(f"o{k}" for k in range(3, 10))}
    assert report.others["o9"] == [Bucket(minute(1), {"sent": 10})]
    assert "3 more campaigns" in render(report)


def charts(html: str) -> dict:
    found = re.search(r"const figures = (\{.*?\});\n", html, re.S)
    assert found
    return json.loads(found.group(1))


def test_the_page_draws_both_campaigns_rates_on_the_timelines_axis(world):
    report = reports(world, FakeReportAggregates(SENT)).report("c1")

    html = render(report)

    assert "Rate beside the other campaigns sending at the time" in html
    rates = charts(html)["rates"]
    lines = {trace["name"]: trace for trace in rates["data"]}
    assert set(lines) == {"c2", "c1 (this one)"}
    assert lines["c1 (this one)"]["y"] == [10, 20, 30]  # one-minute bars: sent per minute
    assert lines["c2"]["y"] == [4, 6, 0]  # nothing in minute 2: zero, not a line across it
    assert lines["c2"]["x"] == lines["c1 (this one)"]["x"]
    assert lines["c1 (this one)"]["line"]["width"] > lines["c2"]["line"]["width"]
    assert rates["layout"]["xaxis"]["range"] == charts(html)["duplicates"]["layout"]["xaxis"]["range"]


def test_with_no_other_campaign_the_figure_says_so(world):
    report = reports(world, FakeReportAggregates({"c1": SENT["c1"]})).report("c1")

    rates = charts(render(report))["rates"]

    assert rates["data"] == []
    assert [a["text"] for a in rates["layout"]["annotations"]] == ["no other campaign sent at the same time"]
