"""Opens and clicks (issue 33, item 1): recorded apart from the ledger, once per recipient by
meaning and time, for a campaign that tracks them. The real adapter against moto, and the
whole path: the consumer sends through the local Resend server, whose opened and clicked
webhooks (Svix-signed, newest first, each delivered twice) reach the real events function."""

from __future__ import annotations

import threading
from collections import Counter

import boto3
import pytest

from sendonce.adapters.dynamodb.engagement import DynamoDBEngagement, EngagementRaceError, engagement_key
from sendonce.adapters.dynamodb.report_aggregates import DynamoDBReportAggregates
from sendonce.domain.campaigns.report import ReportService
from sendonce.domain.campaigns.report_data import MINUTE_MS, Bucket
from sendonce.domain.models import Campaign, Content, Tracking

pytestmark = pytest.mark.integration

MINUTE0 = 1_900_000_020_000  # a minute's start
T0 = MINUTE0 + 20_000  # 20 s into it


def store(system) -> DynamoDBEngagement:
    return DynamoDBEngagement(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table)


def per_minute(system, campaign_id: str = "c1") -> list[Bucket]:
    client = boto3.client("dynamodb")
    aggregates = DynamoDBReportAggregates(client=client, table_name=system.resources.campaigns_table)
    return aggregates.aggregates(campaign_id).engagement_per_minute


def test_a_first_open_counts_once_a_repeat_never_and_an_earlier_one_moves_it_to_its_minute(system):
    engagement = store(system)

    assert engagement.record("c1", "r1", "opened", T0 + 2 * MINUTE_MS) == "first"
    assert engagement.record("c1", "r1", "opened", T0 + 2 * MINUTE_MS) == "repeat"  # the same event again
    assert engagement.record("c1", "r1", "opened", T0 + 5 * MINUTE_MS) == "repeat"  # a later open
    assert per_minute(system) == [Bucket(MINUTE0 + 2 * MINUTE_MS, {"opened": 1})]

    assert engagement.record("c1", "r1", "opened", T0) == "earlier"  # arrived late: moves to its minute
    assert engagement.record("c1", "r1", "clicked", T0 + 1) == "first"
    assert engagement.record("c1", "r2", "opened", T0 + 10) == "first"
    assert per_minute(system) == [Bucket(MINUTE0, {"opened": 2, "clicked": 1})]

    key, _ = engagement_key("c1", "r1")
    item = boto3.client("dynamodb").get_item(TableName=system.resources.campaigns_table, Key=key)["Item"]
    assert {name: value["N"] for name, value in item.items() if "N" in value} == {
        "opened": str(T0),
        "clicked": str(T0 + 1),
    }  # the recipient's id in the key; no address, no agent, no link


def test_racing_events_of_one_recipient_leave_the_earliest_counted_once(system):
    engagement = store(system)
    times = [T0 + i * 7_000 for i in range(12)]  # over two minutes
    start = threading.Barrier(len(times))
    results: list[str] = []

    def open_at(at_ms: int) -> None:
        start.wait()
        # An event that lost to the others ATTEMPTS times in a row is raised for its source to
        # deliver again (EventBridge, the webhook's sender): as the source would, once more.
        for _ in range(20):
            try:
                results.append(engagement.record("c2", "r1", "opened", at_ms))
                return
            except EngagementRaceError:
                continue
        results.append("lost 100 races")

    threads = [threading.Thread(target=open_at, args=(at,)) for at in reversed(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert Counter(results)["first"] == 1 and len(results) == len(times)
    assert per_minute(system, "c2") == [Bucket(MINUTE0, {"opened": 1})]


def report_of(system):
    aggregates = DynamoDBReportAggregates(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table)
    return ReportService(campaigns=system.operator, aggregates=aggregates, clock=lambda: 0).report("c1")


def tracked_campaign(system, tracking: Tracking | None) -> None:
    system.operator.create(
        Campaign(
            campaign_id="c1",
            name="Tracked",
            provider="resend",
            ledger_shards=4,
            sender=f"news@{system.domain}",
            content=Content(subject="Hello {{ name }}", html='<p><a href="https://example.com/x">x</a></p>'),
            tracking=tracking,
        )
    )


def send_and_engage(system, deliverability, tracking: Tracking | None, n: int = 40) -> dict[str, set[str]]:
    """Send `n` recipients with the local Resend server opening (half), clicking (a fifth) and
    opening again (half the openers), its webhooks newest first and each delivered twice;
    the addresses it said opened and clicked."""
    resend = system.resend
    resend.set_engagement([{"subject_contains": "*", "opens": 0.5, "clicks": 0.2, "reopens": 0.5}])
    resend.set_webhook_disorder(out_of_order=True, copies=2)
    try:
        tracked_campaign(system, tracking)
        system.operator.publish("c1", system.recipients(n))
        system.poller().run_until_idle(idle_seconds=1, max_seconds=60)
        assert resend.wait_for_webhooks(60)
    finally:
        resend.set_engagement(None)
        resend.set_webhook_disorder(out_of_order=False, copies=1)
    said: dict[str, set[str]] = {"email.opened": set(), "email.clicked": set()}
    for hook in resend.webhook_deliveries():
        if hook.type in said and hook.recipient and hook.recipient.endswith("@" + system.domain):
            said[hook.type].add(hook.recipient)
    return said


def test_a_tracking_campaign_counts_each_opener_and_clicker_once_and_its_ledger_holds_none(system, deliverability):
    said = send_and_engage(system, deliverability, Tracking(opens=True, clicks=True))
    assert said["email.opened"] and said["email.clicked"] <= said["email.opened"]

    report = report_of(system)

    assert report.engagement == {"opened": len(said["email.opened"]), "clicked": len(said["email.clicked"])}
    assert sum(b.counts.get("opened", 0) for b in report.engagement_over_time) == len(said["email.opened"])
    # The ledger never saw them: its items carry the delivery's events only.
    items = [deliverability.ledger_item("c1", f"r{i}") for i in range(40)]
    assert {e["k"] for item in items for e in item.get("provider_events", [])} == {"sent", "delivered"}


def test_a_campaign_that_does_not_track_records_no_open_and_says_why(system, deliverability):
    said = send_and_engage(system, deliverability, None, n=12)
    assert said["email.opened"]  # the provider sent them all the same

    report = report_of(system)

    assert report.engagement is None and "does not track" in (report.engagement_off_reason or "")
    assert report.engagement_over_time == []
