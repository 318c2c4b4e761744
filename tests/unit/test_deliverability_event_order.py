"""The order of a delivery's events (domain/deliverability/event_order.py): `last_event` is
the most advanced event by meaning, then by its own time, whatever the order of arrival; and
counters count each event once, in any order and with any repetition."""

from __future__ import annotations

import itertools

import hypothesis
import pytest
from hypothesis import strategies as st

from sendonce.adapters.providers.descriptor import event_readers
from sendonce.adapters.providers.registry import registered
from sendonce.adapters.providers.ses.events import parse_ses_event
from sendonce.domain.deliverability import event_order
from sendonce.domain.deliverability.engagement import ENGAGEMENT
from sendonce.domain.deliverability.ports import EventKind, ProviderEvent
from sendonce.domain.deliverability.provider_events import ProviderEventService
from sendonce.domain.models import DeliveryRecord, DeliveryState
from tests.fakes import FakeCampaignStore, FakeLedger, FakeLedgerEvents, FakeSuppressions, ses_event


def event(kind: EventKind, at: str | None = "2025-05-06T10:15:00.000Z", event_id: str | None = None) -> ProviderEvent:
    return ProviderEvent(
        event_id=event_id or f"svix:{kind.value}-{at}",
        provider="resend",
        kind=kind,
        campaign_id="c1",
        recipient_id="r1",
        occurred_at=at,
        hard=kind is EventKind.BOUNCED,
    )


def test_every_event_kind_has_a_rank():
    # A new kind must be placed in the order on purpose, not fall through; opens and clicks
    # never reach the ledger (deliverability/engagement.py), so they have none.
    assert set(event_order.RANKS) == set(EventKind) - ENGAGEMENT


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        (EventKind.SENT, EventKind.DELIVERY_DELAYED),
        (EventKind.DELIVERY_DELAYED, EventKind.DELIVERED),
        (EventKind.SENT, EventKind.DELIVERED),
        # An asynchronous bounce: accepted by the receiving server, returned later.
        (EventKind.DELIVERED, EventKind.BOUNCED),
        (EventKind.DELIVERED, EventKind.FAILED),
        (EventKind.SENT, EventKind.REJECTED),
        (EventKind.SENT, EventKind.PROVIDER_SUPPRESSED),
        (EventKind.DELIVERED, EventKind.COMPLAINED),
        (EventKind.BOUNCED, EventKind.COMPLAINED),
        (EventKind.DELIVERED, EventKind.UNSUBSCRIBED),
    ],
)
def test_a_more_advanced_meaning_wins_even_when_it_is_stamped_earlier(earlier, later):
    advanced = event(later, at="2025-05-06T10:00:00.000Z")
    behind = event(earlier, at="2025-05-06T11:00:00.000Z")

    assert event_order.order_key(advanced) > event_order.order_key(behind)
    assert event_order.most_advanced([advanced, behind]) == event_order.most_advanced([behind, advanced]) == advanced


def test_within_a_rank_the_events_own_time_decides_not_its_arrival():
    soft = event(EventKind.BOUNCED, at="2025-05-06T10:00:00.000Z", event_id="svix:a")
    hard = event(EventKind.BOUNCED, at="2025-05-06T10:00:00.001Z", event_id="svix:b")

    assert event_order.most_advanced([hard, soft]) is hard
    assert event_order.most_advanced([soft, hard]) is hard


def test_events_at_one_instant_are_ordered_by_kind_and_id_so_arrival_does_not_matter():
    first = event(EventKind.COMPLAINED, event_id="svix:1")
    second = event(EventKind.COMPLAINED, event_id="svix:2")
    unsubscribed = event(EventKind.UNSUBSCRIBED, event_id="unsubscribe:c1:r1")

    for order in itertools.permutations([first, second, unsubscribed]):
        assert event_order.most_advanced(list(order)) is unsubscribed
    # Same kind, same instant: the id (its digest) decides, whichever arrives first
    winner = max((first, second), key=lambda e: event_order.id_digest(e.event_id))
    assert event_order.most_advanced([second, first]) is event_order.most_advanced([first, second]) is winner


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2025-05-06T10:15:00.120Z", 1746526500120),
        ("2025-05-06T10:15:00.120+00:00", 1746526500120),
        ("2025-05-06T12:15:00.120+02:00", 1746526500120),
        ("2025-05-06T10:15:00.120", 1746526500120),  # no zone: UTC
        ("2025-05-06 10:15:00.120456+00", 1746526500120),
        ("yesterday", None),
        ("", None),
        (None, None),
    ],
)
def test_an_events_own_time_is_read_from_iso_8601_or_not_at_all(text, ms):
    assert event_order.occurred_ms(event(EventKind.SENT, at=text)) == ms


def test_an_event_without_a_time_sorts_before_a_timed_event_of_its_rank_only():
    untimed_delivered = event(EventKind.DELIVERED, at=None)

    assert event_order.order_key(untimed_delivered) < event_order.order_key(event(EventKind.DELIVERED))
    assert event_order.order_key(untimed_delivered) > event_order.order_key(event(EventKind.SENT))


def test_an_item_without_an_order_key_is_compared_by_rank():
    assert set(event_order.kinds_not_above(EventKind.SENT)) == {EventKind.SENT}
    assert set(event_order.kinds_not_above(EventKind.DELIVERED)) == {
        EventKind.SENT,
        EventKind.DELIVERY_DELAYED,
        EventKind.DELIVERED,
    }
    assert EventKind.DELIVERED in event_order.kinds_not_above(EventKind.BOUNCED)
    assert EventKind.BOUNCED not in event_order.kinds_not_above(EventKind.DELIVERED)


# --- applied through the service, in every order --------------------------------------


def service() -> tuple[ProviderEventService, FakeLedgerEvents]:
    ledger = FakeLedger()
    for rid in ("r1", "r2"):
        ledger.items[("c1", rid)] = DeliveryRecord(
            campaign_id="c1", recipient_id=rid, state=DeliveryState.SENT, provider="resend", provider_message_id="m"
        )
    events = FakeLedgerEvents(ledger)
    return (
        ProviderEventService(
            ledger_events=events,
            suppressions=FakeSuppressions(),
            campaigns=FakeCampaignStore(),
            event_readers=event_readers(registered()),
        ),
        events,
    )


SES_LIFE = ["send", "delivery_delay", "delivery", "complaint"]


@pytest.mark.parametrize("order", list(itertools.permutations(SES_LIFE)), ids="-".join)
def test_ses_events_in_any_order_leave_the_complaint_last_and_count_once(order):
    svc, events = service()

    for name in order:
        svc.handle_event("aws.ses", ses_event(name))
        svc.handle_event("aws.ses", ses_event(name))  # EventBridge delivers at least once

    assert events.last_events[("c1", "r1")].kind is EventKind.COMPLAINED
    assert events.feedback("c1") == events.feedback("c1").__class__(sent=1, complaints=1, hard_bounces=0)
    assert len(events.annotations[("c1", "r1")]) == 4


def test_a_delivery_delay_stamped_after_the_delivery_does_not_replace_it():
    # The fixtures' delay is stamped 10:25, ten minutes after the delivery: the rank decides.
    delay, delivery = parse_ses_event(ses_event("delivery_delay")), parse_ses_event(ses_event("delivery"))
    assert delay and delivery and delay.occurred_at > delivery.occurred_at

    assert event_order.most_advanced([delivery, delay]) is delivery


_KINDS = [EventKind.SENT, EventKind.DELIVERY_DELAYED, EventKind.DELIVERED, EventKind.BOUNCED, EventKind.COMPLAINED]
_lives = st.lists(
    st.tuples(
        st.sampled_from(_KINDS),
        st.sampled_from(["r1", "r2"]),
        st.integers(min_value=0, max_value=5).map(lambda s: f"2025-05-06T10:15:0{s}.000Z"),
    ),
    min_size=1,
    max_size=8,
    unique=True,
)


@hypothesis.settings(max_examples=150, derandomize=True, deadline=None)
@hypothesis.given(life=_lives, data=st.data())
def test_any_arrival_order_with_repeats_gives_the_most_advanced_event_and_exact_counts(life, data):
    # Given each delivery's events, with ids, delivered in a drawn order and some twice
    sent_events = [
        ProviderEvent(
            event_id=f"svix:{i}",
            provider="resend",
            kind=kind,
            campaign_id="c1",
            recipient_id=rid,
            occurred_at=at,
            hard=True,
        )
        for i, (kind, rid, at) in enumerate(life)
    ]
    arrivals = data.draw(st.permutations(sent_events + data.draw(st.lists(st.sampled_from(sent_events), max_size=4))))
    svc, events = service()

    # When they are applied in that order
    for arriving in arrivals:
        svc.apply(arriving)

    # Then each delivery's last event is the most advanced of its own, and counts are exact
    for rid in ("r1", "r2"):
        own = [e for e in sent_events if e.recipient_id == rid]
        assert events.last_events.get(("c1", rid)) == event_order.most_advanced(own)
    feedback = events.feedback("c1")
    assert feedback.sent == sum(e.kind is EventKind.SENT for e in sent_events)
    assert feedback.complaints == sum(e.kind is EventKind.COMPLAINED for e in sent_events)
    assert feedback.hard_bounces == sum(e.kind is EventKind.BOUNCED for e in sent_events)
