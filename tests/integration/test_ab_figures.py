"""An A/B campaign's figures per variant (issue 33) on moto: kept as more numbers of the
report's minute items, in the writes that already count the same sends, opens and clicks
(no item, write or key more), read back as each variant's figures and the rest's; and the
whole path: the real consumer sends the test, the real aggregator counts it per variant from
the ledger's stream, the events function counts opens per variant once each whatever their
order, the pick reads those figures, and the status and the report show them."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter

import boto3
import pytest

from sendonce.adapters.dynamodb.engagement import DynamoDBEngagement, EngagementRaceError
from sendonce.adapters.dynamodb.report_aggregates import (
    MINUTE,
    DynamoDBReportAggregates,
    increment_updates,
    writer_partition,
)
from sendonce.domain.campaigns.ab_results import variant_figures_of
from sendonce.domain.campaigns.report import ReportService
from sendonce.domain.campaigns.report_data import (
    MINUTE_MS,
    REST,
    Bucket,
    LedgerChange,
    increments_of,
    variant_count,
)
from sendonce.domain.campaigns.variants import AbTest, Variant, VariantFigures, assign
from sendonce.domain.models import Campaign, Content, DeliveryState, Tracking
from sendonce.domain.sending.shards import shard_of
from tests.integration.test_counters import counted, operator, streams  # noqa: F401 - counted: a fixture

pytestmark = pytest.mark.integration

MINUTE0 = 1_900_000_020_000  # a minute's start
T0 = MINUTE0 + 20_000
TEST = AbTest(variants=("A", "B"), share=0.5, pick_by="opens", after_s=3_600)


def aggregates_of(table: str) -> DynamoDBReportAggregates:
    return DynamoDBReportAggregates(client=boto3.client("dynamodb"), table_name=table)


def minute_counts(table: str, campaign_id: str, recipient_id: str) -> dict[int, dict[str, int]]:
    """The numbers of the recipient's writer's minute items, by minute."""
    writer = f"w{shard_of(recipient_id, 64)}"
    items = boto3.client("dynamodb").query(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": writer_partition(campaign_id, writer)}},
    )["Items"]
    return {
        int(item["sk"]["S"][len(MINUTE) :].split("#")[0]): {k: int(v["N"]) for k, v in item.items() if "N" in v}
        for item in items
        if item["sk"]["S"].startswith(MINUTE)
    }


def test_an_open_counts_once_for_its_variant_and_an_earlier_one_moves_it_with_the_total(system):
    table = system.resources.campaigns_table
    engagement = DynamoDBEngagement(client=boto3.client("dynamodb"), table_name=table)

    # A test recipient of variant A opens late, again, then its earlier open arrives
    assert engagement.record("ab", "r1", "opened", T0 + 2 * MINUTE_MS, variant="A") == "first"
    assert engagement.record("ab", "r1", "opened", T0 + 2 * MINUTE_MS, variant="A") == "repeat"
    assert engagement.record("ab", "r1", "opened", T0 + 5 * MINUTE_MS, variant="A") == "repeat"
    assert engagement.record("ab", "r1", "opened", T0, variant="A") == "earlier"
    assert engagement.record("ab", "r1", "clicked", T0 + 1, variant="A") == "first"
    # One of the rest (it got the winner) opens too
    assert engagement.record("ab", "r2", "opened", T0 + 10, variant=REST) == "first"

    found = aggregates_of(table).aggregates("ab")
    assert found.variants == {"A": VariantFigures(opened=1, clicked=1), REST: VariantFigures(opened=1)}
    assert found.engagement_per_minute == [Bucket(MINUTE0, {"opened": 2, "clicked": 1})]  # as before
    # ... and per minute: the first's minute, not the later one it was first counted in
    assert found.variants_per_minute == {
        "A": [Bucket(MINUTE0, {"opened": 1, "clicked": 1})],
        REST: [Bucket(MINUTE0, {"opened": 1})],
    }
    # The variant's count moved with the total, in the same items: the later minute holds 0 of both.
    minutes = minute_counts(table, "ab", "r1")
    assert minutes[MINUTE0 + 2 * MINUTE_MS] == {"opened": 0, variant_count("A", "opened"): 0}
    assert minutes[MINUTE0][variant_count("A", "opened")] == 1


def test_racing_opens_of_one_recipient_count_once_for_its_variant(system):
    engagement = DynamoDBEngagement(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table)
    times = [T0 + i * 7_000 for i in range(10)]  # over two minutes, newest first
    start = threading.Barrier(len(times))
    results: list[str] = []

    def open_at(at_ms: int) -> None:
        start.wait()
        # An event that lost to the others ATTEMPTS times in a row is raised for its source to
        # deliver again (EventBridge, the webhook's sender): as the source would, once more.
        for _ in range(20):
            try:
                results.append(engagement.record("ab2", "r1", "opened", at_ms, variant="B"))
                return
            except EngagementRaceError:
                continue
        results.append("lost 100 races")

    threads = [threading.Thread(target=open_at, args=(at,)) for at in reversed(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert Counter(results)["first"] == 1
    assert aggregates_of(system.resources.campaigns_table).aggregates("ab2").variants == {"B": VariantFigures(opened=1)}


def test_sends_per_variant_ride_in_the_aggregators_writes_and_the_figures_function_sums_writers_and_minutes(system):
    client = boto3.client("dynamodb")
    table = system.resources.campaigns_table
    sends = [
        LedgerChange("claimed", "sent", T0, variant="A"),
        LedgerChange("claimed", "sent", T0 + MINUTE_MS, variant="B"),
        LedgerChange("claimed", "failed", T0 + 2, variant="B"),  # not sent: not counted
    ]
    for writer, batch in (("w1", sends), ("w2", sends + [LedgerChange("claimed", "sent", T0 + 3, variant=REST)])):
        updates = increment_updates(table, "ab", writer, increments_of(batch))
        assert len(updates) == 2  # one item a minute, as without variants
        client.transact_write_items(TransactItems=updates)
    engagement = DynamoDBEngagement(client=client, table_name=table)
    engagement.record("ab", "r1", "opened", T0 + 5, variant="A")
    engagement.record("ab", "r2", "clicked", T0 + 6, variant="B")
    store = aggregates_of(table)

    figures = variant_figures_of(store)(Campaign.model_construct(campaign_id="ab"))

    assert figures == {
        "A": VariantFigures(sent=2, opened=1),
        "B": VariantFigures(sent=2, clicked=1),
        REST: VariantFigures(sent=1),
    }
    # Per minute, summed over the writers: each send in its minute, the open and the click in theirs
    assert store.aggregates("ab").variants_per_minute == {
        "A": [Bucket(MINUTE0, {"sent": 2, "opened": 1})],
        "B": [Bucket(MINUTE0, {"clicked": 1}), Bucket(MINUTE0 + MINUTE_MS, {"sent": 2})],
        REST: [Bucket(MINUTE0, {"sent": 1})],
    }
    # The outcomes are as they were: variant counts are no outcome of the timeline.
    assert store.aggregates("ab").outcomes_per_minute == [
        Bucket(MINUTE0, {"sent": 3, "failed": 2}),
        Bucket(MINUTE0 + MINUTE_MS, {"sent": 2}),
    ]


def test_the_fullest_minute_item_of_an_ab_campaign_stays_one_write_unit(system):
    """Every number a minute item can hold, at once: the longest campaign id, every outcome,
    every mailbox group's sends and events, and five variants with the longest ids plus the
    rest, each sent, opened and clicked. Under 1 KB, each ADD to it costs one write unit, as
    the per-key figures assume (32-character variant ids took it to 1,340 bytes)."""
    from sendonce.domain.campaigns.report_data import OUTCOMES, group_count_of, variant_count_of
    from sendonce.domain.deliverability.mailbox_groups import MailboxGroups
    from sendonce.domain.sending.shards import shard_of
    from sendonce_local.write_units import item_size

    client = boto3.client("dynamodb")
    table = system.resources.campaigns_table
    campaign_id = "c" * 100  # ID_PATTERN's longest
    variants = [f"{letter}2345678" for letter in "ABCDE"]  # VARIANT_ID_PATTERN's longest
    groups = MailboxGroups().names
    # One writer's item: recipients of one writer, so the events function adds to it too
    recipients = [r for r in (f"r{i}" for i in range(10_000)) if shard_of(r, 64) == 7][: len(variants) + 1]
    changes = [LedgerChange("claimed", state, T0) for state in OUTCOMES]
    events = (("delivered", "x.example"), ("delivery_delayed", "x.example"), ("bounced", "x.example"), ("complained", "x.example"))  # fmt: skip
    changes += [LedgerChange("claimed", "sent", T0, new_events=events, mailbox_group=g) for g in groups]
    changes += [LedgerChange("claimed", "sent", T0, variant=v) for v in [*variants, REST]]
    client.transact_write_items(TransactItems=increment_updates(table, campaign_id, "w7", increments_of(changes)))
    engagement = DynamoDBEngagement(client=client, table_name=table)
    for recipient, variant in zip(recipients, [*variants, REST], strict=True):
        engagement.record(campaign_id, recipient, "opened", T0, variant=variant)
        engagement.record(campaign_id, recipient, "clicked", T0, variant=variant)

    item = client.get_item(
        TableName=table,
        Key={"pk": {"S": writer_partition(campaign_id, "w7")}, "sk": {"S": f"{MINUTE}{MINUTE0:013d}#w7"}},
    )["Item"]

    named = [variant_count_of(name) for name in item if variant_count_of(name)]
    assert len(named) == 3 * (len(variants) + 1)  # every variant's sent, opened, clicked
    assert len([name for name in item if group_count_of(name)]) == 4 * len(groups)
    assert {"opened", "clicked", *OUTCOMES} <= set(item)
    assert item_size(item) <= 1024, item_size(item)


# --- the whole path ---------------------------------------------------------------------------


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat().replace("+00:00", "Z")


def test_an_ab_campaigns_variants_are_counted_from_its_sends_and_opens_and_shown_by_its_status_and_report(counted):  # noqa: F811
    from sendonce.domain.deliverability.ports import EventKind, ProviderEvent
    from sendonce.settings import EventsSettings
    from sendonce.wiring.clients import clients
    from sendonce.wiring.events import build_events_service
    from sendonce_local.resources import create_suppressions_table

    # Given an A/B campaign that tracks opens, published to 40 recipients
    service = operator(counted)
    service.create(
        Campaign(
            campaign_id="ab",
            name="A/B",
            provider="resend",
            ledger_shards=4,
            sender=f"news@{counted.domain}",
            content=Content(
                subject="Hello {{ name }}",
                html="<p>Hi {{ name }}</p>",
                variants=(Variant(id="A", subject="A: hello"), Variant(id="B", subject="B: hello")),
            ),
            tracking=Tracking(opens=True, clicks=True),
            ab_test=TEST,
        )
    )
    people = counted.recipients(40)
    service.publish("ab", people, batch_size=10)
    test_of = {p.recipient_id: assign("ab", p.recipient_id, TEST) for p in people}
    in_test = Counter(v for v in test_of.values() if v is not None)
    rest = [r for r, v in test_of.items() if v is None]
    assert in_test["A"] and in_test["B"] and rest

    # When the consumers send the test and the aggregator counts the ledger's stream
    counted.poller(concurrency=1, batch_size=1).run_until_idle(idle_seconds=1.0, max_seconds=120)
    streams(counted).drain()

    # Then each variant's sends are its test emails, and the rest, held, are none yet
    results = service.ab_results("ab")
    assert results is not None and results.awaiting_winner
    assert {v.variant: v.figures.sent for v in results.variants} == dict(in_test)
    assert results.rest.figures == VariantFigures()

    # When opens arrive (late ones first, each twice), and a click
    suppressions = f"{counted.resources.campaigns_table}-suppressions"
    create_suppressions_table(boto3.client("dynamodb"), suppressions)
    events = build_events_service(
        EventsSettings(
            ledger_table=counted.resources.ledger_table,
            campaigns_table=counted.resources.campaigns_table,
            suppressions_table=suppressions,
        ),
        clients(),
    )
    openers = [r for r, v in test_of.items() if v == "B"][:3] + [r for r, v in test_of.items() if v == "A"][:1]
    now = T0
    for n, recipient_id in enumerate(openers):
        for at in (now + 4 * MINUTE_MS, now, now + 4 * MINUTE_MS):  # late one, earlier one, a repeat
            event = ProviderEvent(
                event_id=f"o-{recipient_id}-{at}-{n}",
                provider="resend",
                kind=EventKind.OPENED,
                campaign_id="ab",
                recipient_id=recipient_id,
                occurred_at=iso(at),
            )
            events.apply(event)
    clicked = ProviderEvent(
        event_id="c-1", provider="resend", kind=EventKind.CLICKED, campaign_id="ab", recipient_id=openers[0]
    )
    assert events.apply(clicked).engagement == "first"

    # Then each opener counts once, for its variant
    results = service.ab_results("ab")
    assert {v.variant: (v.figures.opened, v.figures.clicked) for v in results.variants} == {"A": (1, 0), "B": (3, 1)}

    # When the operator picks B: the rest are sent it, and counted apart from the test
    picked = service.pick("ab", "B")
    assert picked.decided_now and picked.decision.figures["B"] == VariantFigures(sent=in_test["B"], opened=3, clicked=1)
    counted.poller(concurrency=1, batch_size=1).run_until_idle(idle_seconds=1.0, max_seconds=120)
    streams(counted).drain()

    results = service.ab_results("ab")
    assert results is not None and not results.awaiting_winner and results.decision.variant == "B"
    assert results.rest.figures.sent == len(rest)
    assert {v.variant: v.figures.sent for v in results.variants} == dict(in_test)  # the test's alone
    assert service.status("ab").sent == len(people)
    assert {r.variant for r in service.records("ab") if r.state is DeliveryState.SENT} == {"A", "B"}

    # And the report shows the same
    report = ReportService(
        campaigns=service, aggregates=aggregates_of(counted.resources.campaigns_table), clock=lambda: now
    ).report("ab")
    assert report.variants is not None and report.variants.as_dict() == results.as_dict()
