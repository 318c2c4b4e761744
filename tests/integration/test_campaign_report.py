"""`sendonce campaign report`: its aggregates in DynamoDB (moto), and its page in headless
Chromium: charts drawn, nothing fetched, no console error, and the figures it prints are the
campaign's status."""

from __future__ import annotations

import io
import random
from types import SimpleNamespace

import boto3
import pytest
from PIL import Image

from sendonce.adapters.dynamodb.report_aggregates import DynamoDBReportAggregates, increment_updates
from sendonce.domain.campaigns.report import MAX_POINTS, ReportService, build_report
from sendonce.domain.campaigns.report_data import (
    MINUTE_MS,
    OUTCOMES,
    AuditVerdict,
    Bucket,
    LedgerChange,
    Mark,
    ReportAggregates,
    increments_of,
)
from sendonce.domain.campaigns.service import DeliveryStatus
from sendonce.domain.models import CampaignState
from sendonce_ops.report_page import write
from tests.integration.operator_helpers import sendonce

pytestmark = pytest.mark.integration

T0 = 1_764_633_600_000
CHARTS = ("timeline", "rates", "outcomes", "duplicates", "feedback", "unknowns", "groups-over-time")
# What a drawn chart has in it: bars or slices, or (the rates, the groups) lines
MARKS = {"rates": "g.trace.scatter path.js-line", "groups-over-time": "g.trace.scatter path.js-line"}


def million_recipient_report():
    """A campaign of 1,000,000 recipients sent over 2,000 minutes, with a pause and a resume."""
    rng = random.Random(7)
    minutes = [
        Bucket(T0 + i * MINUTE_MS, {"sent": 480 + rng.randint(0, 40), "failed": rng.randint(0, 2)}) for i in range(2000)
    ]
    sent = sum(b.counts["sent"] for b in minutes)
    failed = sum(b.counts["failed"] for b in minutes)
    status = DeliveryStatus(
        campaign_id="big",
        state=CampaignState.COMPLETED,
        total=sent + failed + 1234,
        pending=0,
        in_progress=0,
        sent=sent,
        failed=failed,
        suppressed=1200,
        unknown=34,
        cancelled=0,
        dead_lettered=0,
    )
    aggregates = ReportAggregates(
        outcomes_per_minute=minutes,
        duplicates_prevented_per_minute=[Bucket(T0 + i * MINUTE_MS, {"prevented": i % 7}) for i in range(2000)],
        feedback_by_domain={
            f"mail{i}.example": {"delivered": 9000 - i, "bounced": i * 3, "complained": i} for i in range(40)
        },
        unknowns_settled={"sent": 7, "not_sent": 93},
        groups_per_minute={  # Google capped: held back in its busiest minutes, deferred for a while
            "google": [
                Bucket(T0 + i * MINUTE_MS, {"sent": 300, "held": 40 * (i % 3), "deferred": int(900 <= i < 960)})
                for i in range(2000)
            ],
            "microsoft": [Bucket(T0 + i * MINUTE_MS, {"sent": 120, "bounced": i % 2}) for i in range(2000)],
            "other": [Bucket(T0 + i * MINUTE_MS, {"sent": 80, "complained": int(i % 50 == 0)}) for i in range(2000)],
        },
    )
    campaign = SimpleNamespace(
        campaign_id="big", name="Winter sale <b>", subject="Hi {{name}}", provider="resend", delivery_mode="batch"
    )
    return build_report(
        campaign=campaign,
        status=status,
        aggregates=aggregates,
        marks=[Mark(T0 + 600 * MINUTE_MS, "pause", "brakes"), Mark(T0 + 700 * MINUTE_MS, "resume")],
        # two campaigns that sent beside it, for part of its minutes
        others={
            "news": [Bucket(T0 + i * MINUTE_MS, {"sent": 200}) for i in range(300, 900)],
            "alert": [Bucket(T0 + i * MINUTE_MS, {"sent": 90 + i % 20}) for i in range(1200, 1260)],
        },
        audit=AuditVerdict(T0 + 2100 * MINUTE_MS, "0 duplicates, every difference explained", 0, 2),
        now_ms=T0 + 2200 * MINUTE_MS,
    )


def open_report(page, path):
    page.page.goto(path.as_uri())
    page.page.wait_for_function(f"document.querySelectorAll('.main-svg').length >= {len(CHARTS)}", timeout=60_000)


def colours_in(png: bytes) -> int:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return len(image.getcolors(maxcolors=1 << 20) or [])


def page_figures(page) -> dict[str, str]:
    return page.page.eval_on_selector_all(
        "[data-figure]", "nodes => Object.fromEntries(nodes.map(n => [n.dataset.figure, n.textContent.trim()]))"
    )


@pytest.mark.browser
def test_a_million_recipient_report_draws_every_chart_offline_without_a_console_error(page, tmp_path):
    # Given a report of 1,000,000 recipients over 2,000 minutes, written as one page
    report = million_recipient_report()
    path = write(report, tmp_path / "big.html")

    # When headless Chromium opens it
    open_report(page, path)

    # Then each chart is drawn: an SVG with marks in it, in more than a handful of colours
    for chart in CHARTS:
        element = page.page.locator(f"#{chart}")
        assert element.locator(MARKS.get(chart, "g.point, g.slice")).count() > 0, chart
        assert colours_in(element.screenshot()) > 20, f"{chart} looks blank"
    # ... the timeline folds 2,000 minutes into at most MAX_POINTS bars per outcome (not one
    # point per recipient, nor per minute), marking the pause and the resume
    bars = page.page.locator("#timeline g.trace.bars")
    assert bars.count() == len(OUTCOMES)
    assert 0 < page.page.locator("#timeline g.trace.bars").first.locator("g.point").count() <= MAX_POINTS
    assert {"pause", "resume"} <= set(page.page.locator("#timeline .annotation-text").all_text_contents())
    # ... the rates draw this campaign beside the two others, one line each, named
    assert page.page.locator("#rates g.trace.scatter").count() == 3
    assert set(page.page.locator("#rates .legendtext").all_text_contents()) == {"news", "alert", "big (this one)"}
    # ... the campaign's name is shown as text, not markup
    assert page.page.locator("h1").text_content() == "Winter sale <b>"
    assert "Not shown" in page.page.locator("#engagement").text_content()
    # ... each mailbox group is a line in each of the five rows (sent, deferred, bounced,
    # complained, held), folded like the timeline, and the note says where Google's cap held it
    assert page.page.locator("#groups-over-time g.trace.scatter").count() == 3 * 5
    assert set(page.page.locator("#groups-over-time .legendtext").all_text_contents()) == {
        "google",
        "microsoft",
        "other",
    }
    held = sum(40 * (i % 3) for i in range(2000))
    assert page.page.locator("[data-held=google]").text_content() == f"{held:,}"
    assert page.page.locator("[data-group-total='google-deferred']").text_content() == "60"
    # ... and nothing was fetched but the page itself, nothing complained
    assert page.requests == [path.as_uri()]
    assert page.console_errors == []
    page.page.screenshot(path=str(tmp_path / "big.png"), full_page=True)


def test_aggregates_written_by_two_writers_read_back_as_one_sum(system):
    client = boto3.client("dynamodb")
    table = system.resources.campaigns_table
    changes = [LedgerChange("claimed", "sent", T0 + 5), LedgerChange("claimed", "failed", T0 + 61_000)]
    events = [LedgerChange("sent", "sent", T0 + 7, new_events=(("bounced", "a.example"),))]

    for writer, batch in (("w1", changes), ("w2", changes + events)):  # two aggregators' writers
        client.transact_write_items(TransactItems=increment_updates(table, "c1", writer, increments_of(batch)))

    aggregates = DynamoDBReportAggregates(client=client, table_name=table).aggregates("c1")
    assert aggregates.outcomes_per_minute == [Bucket(T0, {"sent": 2}), Bucket(T0 + MINUTE_MS, {"failed": 2})]
    assert aggregates.feedback_by_domain == {"a.example": {"bounced": 1}}
    assert DynamoDBReportAggregates(client=client, table_name=table).aggregates("c2") == ReportAggregates()


def test_counts_per_mailbox_group_ride_in_the_minute_items_of_two_writers_and_a_consumer(system):
    client = boto3.client("dynamodb")
    table = system.resources.campaigns_table
    aggregates = DynamoDBReportAggregates(client=client, table_name=table)
    sends = [LedgerChange("claimed", "sent", T0 + 5, mailbox_group="google")]
    late = [LedgerChange("sent", "sent", T0 + 3 * MINUTE_MS, (("delivery_delayed", "gmail.com"),), "google")]
    for writer, batch in (("w1", sends), ("w2", sends + late)):
        client.transact_write_items(TransactItems=increment_updates(table, "c1", writer, increments_of(batch)))
    aggregates.add_counts("c1", at_ms=T0 + 9, counts={"prevented": 1, "g:google:held": 4}, writer="consumer-3")

    found = aggregates.aggregates("c1")

    assert found.groups_per_minute == {
        "google": [Bucket(T0, {"sent": 2, "held": 4}), Bucket(T0 + 3 * MINUTE_MS, {"deferred": 1})]
    }
    # The outcomes are as they were: a minute of a group's events alone adds no bar of outcomes.
    assert found.outcomes_per_minute == [Bucket(T0, {"sent": 2})]
    assert found.duplicates_prevented_per_minute == [Bucket(T0, {"prevented": 1})]


@pytest.mark.browser
def test_the_figures_on_the_page_are_the_campaigns_status(system, page, tmp_path):
    # Given a campaign sent through the real consumer
    system.campaign()
    system.operator.publish("c1", system.recipients(12))
    system.poller().run_until_idle(idle_seconds=1, max_seconds=60)
    status = system.operator.status("c1")
    assert status.sent == 12

    # When its report is written by the command an operator runs, and opened
    reports = ReportService(
        campaigns=system.operator,
        aggregates=DynamoDBReportAggregates(
            client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table
        ),
        clock=lambda: T0,
    )
    path = write(reports.report("c1"), tmp_path / "c1.html")
    open_report(page, path)

    # Then every figure it prints is the status's
    shown = page_figures(page)
    expected = {**status.as_dict(), "remaining": status.pending + status.in_progress}
    for name in ("total", "sent", "failed", "suppressed", "unknown", "dead_lettered", "cancelled", "remaining"):
        assert shown[name].replace(",", "") == str(expected[name]), name
    assert shown["state"] == status.state.value
    assert page.console_errors == [] and page.requests == [path.as_uri()]


def test_the_command_writes_the_page(system, tmp_path):
    system.campaign()
    system.operator.publish("c1", system.recipients(3))
    out = tmp_path / "r.html"

    result = sendonce(system, "campaign", "report", "c1", "--out", str(out))

    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1_000_000  # plotly.js inlined: the page needs no network
    assert f"{out}: 3 recipients, 0 sent" in result.output


def test_an_unknown_campaign_is_a_clear_error(system, tmp_path):
    result = sendonce(system, "campaign", "report", "nope", "--out", str(tmp_path / "r.html"))
    assert result.exit_code != 0 and "nope" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "r.html").exists()


def ab_report(decision):
    """An A/B campaign's report: B opened more in the test; picked (`decision`) or awaited."""
    from sendonce.domain.campaigns.report_data import REST
    from sendonce.domain.campaigns.variants import AbTest, VariantFigures
    from sendonce.domain.models import Tracking

    campaign = SimpleNamespace(
        campaign_id="ab",
        name="A/B",
        subject="Hi",
        provider="resend",
        delivery_mode="single",
        tracking=Tracking(opens=True, clicks=True),
        ab_test=AbTest(variants=("A", "B"), share=0.2, pick_by="opens", after_s="4h"),
        decision=decision,
    )
    status = DeliveryStatus(
        campaign_id="ab",
        state=CampaignState.SENDING,
        total=1000,
        pending=0,
        in_progress=0,
        sent=1000,
        failed=0,
        suppressed=0,
        unknown=0,
        cancelled=0,
        dead_lettered=0,
    )
    aggregates = ReportAggregates(
        outcomes_per_minute=[Bucket(T0, {"sent": 1000})],
        engagement_per_minute=[Bucket(T0, {"opened": 400, "clicked": 30})],
        variants={
            "A": VariantFigures(sent=100, opened=20, clicked=3),
            "B": VariantFigures(sent=100, opened=35, clicked=2),
            REST: VariantFigures(sent=800 if decision else 0, opened=345 if decision else 0, clicked=25),
        },
        # The same per minute: the test sent at T0, its opens then and an hour later; the rest
        # sent the winner four hours in, and opened it then and an hour later
        variants_per_minute={
            "A": [Bucket(T0, {"sent": 100, "opened": 10}), Bucket(T0 + 60 * MINUTE_MS, {"opened": 10, "clicked": 3})],
            "B": [Bucket(T0, {"sent": 100, "opened": 20}), Bucket(T0 + 60 * MINUTE_MS, {"opened": 15, "clicked": 2})],
            REST: [
                Bucket(T0 + 240 * MINUTE_MS, {"sent": 800, "opened": 300, "clicked": 20}),
                Bucket(T0 + 300 * MINUTE_MS, {"opened": 45, "clicked": 5}),
            ]
            if decision
            else [],
        },
    )
    return build_report(campaign=campaign, status=status, aggregates=aggregates, now_ms=T0 + MINUTE_MS)


@pytest.mark.browser
def test_an_ab_campaigns_page_shows_each_variants_figures_and_the_winner(page, tmp_path):
    from sendonce.domain.campaigns.variants import Decision

    # Given the report of an A/B campaign whose winner, B, was picked by its schedule
    decision = Decision(variant="B", by="schedule", at_ms=T0 + 240 * MINUTE_MS, reason="highest rate of unique opens")
    path = write(ab_report(decision), tmp_path / "ab.html")

    # When headless Chromium opens it
    open_report(page, path)

    # Then each variant's and the rest's figures are printed, the winner's row marked, and why
    cells = page.page.eval_on_selector_all(
        "[data-variant]", "nodes => Object.fromEntries(nodes.map(n => [n.dataset.variant, n.textContent.trim()]))"
    )
    assert cells == {
        "A-sent": "100",
        "A-opened": "20",
        "A-clicked": "3",
        "B-sent": "100",
        "B-opened": "35",
        "B-clicked": "2",
        "rest-sent": "800",
        "rest-opened": "345",
        "rest-clicked": "25",
    }
    rows = page.page.locator("#variants tbody tr")
    assert rows.nth(1).get_attribute("class") == "winner" and "35.0%" in rows.nth(1).text_content()
    assert "(winner)" in rows.nth(1).text_content() and "(winner)" not in rows.nth(0).text_content()
    assert page.page.locator("[data-winner]").text_content() == "B"
    assert "picked by schedule" in page.page.locator("#decision").text_content()
    # ... and the rate the pick compares is drawn over time: a line per variant and the rest's,
    # each point unique opens so far per email sent so far, the pick marked where it was taken
    chart = page.page.locator("#variants-over-time")
    assert chart.locator("g.trace.scatter path.js-line").count() == 3
    assert chart.locator(".legendtext").all_text_contents() == ["A", "B", "the rest (sent the winner)"]
    assert chart.locator(".annotation-text").all_text_contents() == ["B picked"]
    last_rates = page.page.evaluate(
        "() => document.getElementById('variants-over-time').data.map(t => t.y.filter(y => y !== null).at(-1))"
    )
    assert last_rates == [20.0, 35.0, 100 * 345 / 800]
    # every rate known is a marker drawn (a variant sent in one bar only is still seen)
    known = page.page.evaluate(
        "() => document.getElementById('variants-over-time').data.map(t => t.y.filter(y => y !== null).length)"
    )
    assert chart.locator("g.points path.point").count() == sum(known) > 0
    assert colours_in(chart.screenshot()) > 20
    # ... and on the timeline, and among the moves, as the campaign's other moves are
    assert "pick B" in page.page.locator("#timeline .annotation-text").all_text_contents()
    assert "pick B\tschedule\thighest rate of unique opens" in page.page.locator("#marks").inner_text()
    assert page.console_errors == [] and page.requests == [path.as_uri()]
