"""A delivery's `last_event` against moto's server: it moves only forward, by the event's
meaning then its own time (domain/deliverability/event_order.py), whatever the order and
number of arrivals; and a campaign through the local Resend server with its webhooks
delivered newest first and twice ends with every delivery's most advanced event and exact
counts (issue 18)."""

from __future__ import annotations

import collections
import functools
import json

import boto3
import pytest

from sendonce.domain.deliverability import event_order
from sendonce.domain.deliverability.ports import AnnotationStatus, EventKind, FeedbackCounter, ProviderEvent
from sendonce.domain.models import DeliveryKey
from sendonce.handlers import events as events_handler
from sendonce.wiring.clients import clients
from sendonce.wiring.events import build_events_service
from tests.integration.test_deliverability import claim, kinds, run_campaign
from tests.integration.test_deliverability import tables as tables  # the fixture, reused

pytestmark = pytest.mark.integration


def event(kind: EventKind, event_id: str, at: str | None = "2025-05-06T10:15:00.000Z", rid: str = "r1"):
    return ProviderEvent(
        event_id=event_id, provider="ses", kind=kind, campaign_id="c1", recipient_id=rid, occurred_at=at, hard=True
    )


def item(tables, rid: str = "r1") -> dict:
    from boto3.dynamodb.types import TypeDeserializer

    ledger = tables[0]
    raw = boto3.client("dynamodb").get_item(
        TableName=ledger._table,
        Key=ledger._keys.key(DeliveryKey(campaign_id="c1", recipient_id=rid)),
        ConsistentRead=True,
    )["Item"]
    return {k: TypeDeserializer().deserialize(v) for k, v in raw.items()}


def written_before(tables, update: str, values: dict, rid: str = "r1") -> None:
    """Write a delivery's ledger item as an earlier release left it."""
    ledger = tables[0]
    boto3.client("dynamodb").update_item(
        TableName=ledger._table,
        Key=ledger._keys.key(DeliveryKey(campaign_id="c1", recipient_id=rid)),
        UpdateExpression=update,
        ExpressionAttributeValues=values,
    )


def test_a_sent_event_arriving_after_the_delivery_does_not_move_last_event_back(tables):
    # The defect of issue 18: `last_event` went from delivered back to sent.
    ledger, events, _, _ = tables
    claim(ledger, "r1")

    delivered = events.annotate(event(EventKind.DELIVERED, "d", at="2025-05-06T10:15:01.000Z"))
    late_sent = events.annotate(event(EventKind.SENT, "s", at="2025-05-06T10:15:00.000Z"))

    assert (delivered.status, late_sent.status) == (AnnotationStatus.APPLIED, AnnotationStatus.APPLIED)
    recorded = item(tables)
    assert recorded["last_event"] == "delivered"
    # the event's own time, as its order key holds it (2025-05-06T10:15:01Z)
    assert event_order.time_of(recorded["last_event_order"]) == 1_746_526_501_000
    assert kinds(recorded) == ["delivered", "sent"]  # the late event is still recorded


def test_a_counted_event_behind_the_last_event_is_recorded_and_counted_once(tables):
    ledger, events, _, _ = tables
    claim(ledger, "r1")
    events.annotate(event(EventKind.COMPLAINED, "c", at="2025-05-06T12:00:00.000Z"), counter=FeedbackCounter.COMPLAINTS)

    # A hard bounce stamped earlier arrives after the complaint, twice.
    results = [
        events.annotate(
            event(EventKind.BOUNCED, "b", at="2025-05-06T10:16:00.000Z"), counter=FeedbackCounter.HARD_BOUNCES
        )
        for _ in range(2)
    ]

    assert [r.status for r in results] == [AnnotationStatus.APPLIED, AnnotationStatus.DUPLICATE]
    assert item(tables)["last_event"] == "complained"
    assert kinds(item(tables)) == ["bounced", "complained"]
    feedback = events.feedback("c1")
    assert (feedback.complaints, feedback.hard_bounces) == (1, 1)


def test_within_a_meaning_the_later_event_wins_in_either_order(tables):
    ledger, events, _, _ = tables
    claim(ledger, "r1")
    claim(ledger, "r2")
    soft = ("soft", "2025-05-06T10:16:00.000Z")
    hard = ("hard", "2025-05-06T10:17:00.000Z")

    for rid, order in (("r1", (soft, hard)), ("r2", (hard, soft))):
        for event_id, at in order:
            events.annotate(event(EventKind.BOUNCED, f"{rid}-{event_id}", at=at, rid=rid))

    # 2025-05-06T10:17:00Z, the hard bounce's own time, in both
    assert {event_order.time_of(item(tables, rid)["last_event_order"]) for rid in ("r1", "r2")} == {1_746_526_620_000}


def test_an_item_recorded_before_order_keys_is_compared_by_meaning(tables):
    ledger, events, _, _ = tables
    claim(ledger, "r1")
    written_before(
        tables,
        "SET last_event = :d, last_event_at = :at",
        {":d": {"S": "delivered"}, ":at": {"S": "2025-05-06T10:15:01.000+00:00"}},
    )

    events.annotate(event(EventKind.SENT, "s"))
    assert item(tables)["last_event"] == "delivered"
    events.annotate(event(EventKind.BOUNCED, "b"))
    assert item(tables)["last_event"] == "bounced"


def test_a_campaign_whose_webhooks_arrive_newest_first_and_twice_ends_with_each_most_advanced_event(
    system, deliverability
):
    # Given Resend delivering each email's webhooks newest first, every one of them twice
    # (and brakes that stay out of the way: the campaign must send all 12 to count them)
    deliverability.events_api.handler = functools.partial(
        events_handler.lambda_handler,
        service=build_events_service(
            deliverability.events_settings.model_copy(update={"brake_min_sent": 1000}), clients()
        ),
    )
    system.resend.set_webhook_disorder(out_of_order=True, copies=2)
    bouncing, complaining = {"r2", "r5"}, {"r3", "r7", "r8"}
    system.resend.bounce([f"user{r[1:]}@{system.domain}" for r in bouncing])
    system.resend.complain([f"user{r[1:]}@{system.domain}" for r in complaining])

    # When a campaign of 12 is sent
    run_campaign(system, 12)
    assert system.resend.wait_for_webhooks(30)

    # Then they did arrive out of order and twice
    arrivals = collections.defaultdict(list)
    for request in deliverability.events_api.requests:
        payload = json.loads(request["body"])
        arrivals[payload["data"]["tags"]["recipient_id"]].append(payload["type"])
    assert arrivals["r0"][0] == "email.delivered" and arrivals["r3"][0] == "email.complained"
    assert collections.Counter(arrivals["r0"]) == {"email.delivered": 2, "email.sent": 2}
    assert all(h.attempts == [200, 200] for h in system.resend.webhook_deliveries())
    # and every delivery's last event is its most advanced one, recorded once each
    expected = {
        f"r{i}": "bounced" if f"r{i}" in bouncing else "complained" if f"r{i}" in complaining else "delivered"
        for i in range(12)
    }
    items = {rid: deliverability.ledger_item("c1", rid) for rid in expected}
    assert {rid: i["last_event"] for rid, i in items.items()} == expected
    for rid, recorded in items.items():
        assert len(recorded["provider_events"]) == len(set(recorded["provider_event_ids"])) == len(arrivals[rid]) // 2
    # and the counters the brakes read are exact
    feedback = deliverability.ledger_events.feedback("c1")
    assert (feedback.sent, feedback.hard_bounces, feedback.complaints) == (12, 2, 3)


def test_an_event_recorded_by_its_id_before_digests_is_not_recorded_again(tables):
    # Given a bounce recorded as earlier releases did: its whole id in provider_event_ids
    ledger, events, _, _ = tables
    claim(ledger, "r1")
    written_before(
        tables,
        "SET provider_events = :events, last_event = :b ADD provider_event_ids :ids",
        {
            ":events": {"L": [{"M": {"event": {"S": "bounced"}, "id": {"S": "ses:b-1"}}}]},
            ":b": {"S": "bounced"},
            ":ids": {"SS": ["ses:b-1"]},
        },
    )

    # When the provider delivers it again, counted, to a release that records digests
    again = events.annotate(event(EventKind.BOUNCED, "ses:b-1"), counter=FeedbackCounter.HARD_BOUNCES)
    fresh = events.annotate(event(EventKind.COMPLAINED, "ses:c-1"), counter=FeedbackCounter.COMPLAINTS)

    # Then it is a duplicate, neither appended nor counted; a new event is, by its digest
    assert (again.status, fresh.status) == (AnnotationStatus.DUPLICATE, AnnotationStatus.APPLIED)
    recorded = item(tables)
    assert kinds(recorded) == ["bounced", "complained"]
    assert recorded["provider_event_ids"] == {"ses:b-1", event_order.id_digest("ses:c-1")}
    feedback = events.feedback("c1")
    assert (feedback.hard_bounces, feedback.complaints) == (0, 1)
