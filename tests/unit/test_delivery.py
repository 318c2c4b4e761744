"""DeliveryService with the real Powertools guard over an in-memory ledger and provider."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.errors import (
    AmbiguousProviderError,
    HaltProviderError,
    PermanentProviderError,
    RetryableProviderError,
)
from sendonce.domain.models import CampaignState, DeliveryKey, DeliveryState, Recipient
from tests.unit.helpers import World, batch, recipients


@pytest.fixture
def world() -> World:
    w = World()
    w.campaign()
    return w


def test_fresh_batch_sends_each_recipient_once_and_a_redelivery_sends_nothing(world):
    body = batch(n=5)

    first = world.process(body)
    second = world.process(body)

    assert first.sent == 5 and not first.must_return
    assert second.sent == 0 and second.duplicates_prevented == 5
    assert set(world.provider.deliveries().values()) == {1}
    assert len(world.provider.deliveries()) == 5
    assert {world.ledger.state_of("c1", f"r{i}") for i in range(5)} == {DeliveryState.SENT}


def test_the_provider_gets_the_delivery_key_and_rendered_escaped_content(world):
    people = [Recipient(recipient_id="r1", email="a@example.com", variables={"name": "<b>Ann</b>"})]

    world.process(batch(people=people))

    email = world.provider.accepted[0]
    assert email.idempotency_key == DeliveryKey(campaign_id="c1", recipient_id="r1").idempotency_key
    assert email.html == "<p>Hi &lt;b&gt;Ann&lt;/b&gt;</p>"
    assert email.subject == "Hello <b>Ann</b>"
    assert email.tags == {"campaign_id": "c1", "recipient_id": "r1"}


@pytest.mark.parametrize(
    "body, reason_part",
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"schema_version": 1, "campaign_id": "c1", "batch_id": "b1"}), "recipients: Field required"),
        (
            json.dumps(
                {
                    "schema_version": 1,
                    "campaign_id": "c1",
                    "batch_id": "b1",
                    "recipients": [{"recipient_id": f"r{i}", "email": "x@example.com"} for i in range(101)],
                }
            ),
            "at most 100",
        ),
        (json.dumps({"schema_version": 2, "campaign_id": "c1", "batch_id": "b1", "recipients": []}), "schema_version"),
    ],
)
def test_poison_messages_go_to_the_dead_letter_queue_with_a_reason_and_are_acknowledged(world, body, reason_part):
    report = world.process(body)

    assert report.poison_reason and reason_part in report.poison_reason
    assert not report.must_return
    assert world.queue.dead_letters == [(body, report.poison_reason)]
    assert world.provider.calls == 0


def test_a_message_for_an_unknown_campaign_is_poison(world):
    report = world.process(batch(campaign_id="nope"))
    assert "does not exist" in report.poison_reason
    assert world.provider.calls == 0


def test_an_invalid_address_fails_that_recipient_only(world):
    people = recipients(3) + [Recipient(recipient_id="bad", email="not-an-address", variables={"name": "x"})]

    report = world.process(batch(people=people))

    assert report.sent == 3 and report.failed == 1
    record = world.ledger.get(DeliveryKey(campaign_id="c1", recipient_id="bad"))
    assert record.state is DeliveryState.FAILED and record.reason == "invalid email address"
    assert "not-an-address" not in world.provider.deliveries()


def test_a_missing_template_variable_fails_the_recipient_with_the_variable_named(world):
    people = [Recipient(recipient_id="r1", email="a@example.com", variables={})]

    report = world.process(batch(people=people))

    assert report.failed == 1
    assert "'name' is undefined" in world.ledger.get(DeliveryKey(campaign_id="c1", recipient_id="r1")).reason


@pytest.mark.parametrize("state", [CampaignState.PAUSED, CampaignState.DRAFT])
def test_a_campaign_that_is_not_sending_sends_nothing_and_acknowledges(world, state):
    world.campaign(state=state)

    report = world.process(batch(n=3))

    assert report.skipped_state is state and not report.must_return
    assert world.provider.calls == 0
    assert world.ledger.items == {}  # recipients stay pending for resume


def test_a_cancelled_campaign_cancels_the_batch_recipients(world):
    world.campaign(state=CampaignState.CANCELLED)

    report = world.process(batch(n=3))

    assert report.cancelled == 3 and world.provider.calls == 0
    assert world.ledger.state_of("c1", "r0") is DeliveryState.CANCELLED


def test_throttling_is_retried_with_backoff_and_then_sent(world):
    world.provider.script["user0@example.com"] = [RetryableProviderError("429", retry_after=0.5)]

    report = world.process(batch(n=1))

    assert report.sent == 1
    assert len(world.sleeps) == 1 and 0.4 <= world.sleeps[0] <= 0.6


def test_throttling_that_persists_releases_the_recipient_and_returns_the_message(world):
    world.provider.script["user0@example.com"] = [RetryableProviderError("429")] * 3

    report = world.process(batch(n=2))

    assert report.must_return and report.returning == 1 and report.sent == 1
    assert world.ledger.state_of("c1", "r0") is DeliveryState.PENDING
    again = world.process(batch(n=2), receive_count=2)
    assert again.sent == 1 and again.duplicates_prevented == 1 and not again.must_return
    assert world.provider.deliveries()["user0@example.com"] == 1


def test_a_permanent_error_fails_the_recipient_and_is_never_retried(world):
    world.provider.script["user0@example.com"] = [PermanentProviderError("422 validation_error")]

    report = world.process(batch(n=1))
    again = world.process(batch(n=1), receive_count=2)

    assert report.failed == 1 and not report.must_return
    assert again.duplicates_prevented == 1
    assert world.provider.calls == 1
    assert world.ledger.state_of("c1", "r0") is DeliveryState.FAILED


def test_a_halt_pauses_the_campaign_and_leaves_the_rest_pending(world):
    world.provider.script["user0@example.com"] = [HaltProviderError("daily_quota_exceeded")]

    report = world.process(batch(n=1), service=world.service(send_concurrency=1))

    campaign = world.campaigns.get("c1")
    assert campaign.state is CampaignState.PAUSED
    assert "daily_quota_exceeded" in campaign.state_reason and campaign.state_changed_by.startswith("sendonce")
    assert not report.must_return
    assert world.ledger.state_of("c1", "r0") is DeliveryState.PENDING


def test_a_halt_stops_later_recipients_of_the_same_batch(world):
    world.provider.script["user0@example.com"] = [HaltProviderError("suspended")]

    world.process(batch(n=10), service=world.service(send_concurrency=1))

    assert world.provider.calls == 1
    assert all(world.ledger.state_of("c1", f"r{i}") in (None, DeliveryState.PENDING) for i in range(10))


def test_resend_ambiguous_outcome_is_retried_with_the_same_key_without_a_duplicate(world):
    world.provider.accept_then_raise["user0@example.com"] = AmbiguousProviderError("read timeout")

    first = world.process(batch(n=1))
    second = world.process(batch(n=1), receive_count=2)

    assert first.must_return
    assert second.sent == 1
    assert world.provider.deliveries()["user0@example.com"] == 1
    record = world.ledger.get(DeliveryKey(campaign_id="c1", recipient_id="r0"))
    assert record.state is DeliveryState.SENT and record.maybe_sent_at_ms is not None


def test_ses_ambiguous_outcome_is_unknown_and_never_resent(world):
    world.provider_name = "ses"
    world.campaign()
    world.provider.accept_then_raise["user0@example.com"] = AmbiguousProviderError("read timeout")

    first = world.process(batch(n=1))
    second = world.process(batch(n=1), receive_count=2)

    assert first.unknown == 1 and not first.must_return
    assert second.duplicates_prevented == 1
    assert world.provider.deliveries()["user0@example.com"] == 1
    assert world.ledger.state_of("c1", "r0") is DeliveryState.UNKNOWN


def test_ses_consumer_lost_after_in_flight_leaves_the_delivery_unknown_not_resent(world):
    world.provider_name = "ses"
    world.campaign()
    from sendonce.domain.models import DeliveryRequest

    request = DeliveryRequest(
        campaign_id="c1",
        recipient_id="r0",
        batch_id="b1",
        email="user0@example.com",
        variables={"name": "User 0"},
        provider="ses",
        provider_idempotent=False,
        owner="dead",
    )
    world.ledger.claim(
        request, payload_hash=_hash(world, request), lease_until_ms=world.clock() + 1000, now_ms=world.clock()
    )
    world.ledger.mark_in_flight(request.key, owner="dead", now_ms=world.clock())
    world.clock.advance(5_000)

    report = world.process(batch(n=1))

    assert report.unknown == 1 and world.provider.calls == 0
    assert world.ledger.state_of("c1", "r0") is DeliveryState.UNKNOWN


def test_ses_consumer_lost_after_claim_before_send_is_sent_by_the_next_consumer(world):
    world.provider_name = "ses"
    world.campaign()
    from sendonce.domain.models import DeliveryRequest

    request = DeliveryRequest(
        campaign_id="c1",
        recipient_id="r0",
        batch_id="b1",
        email="user0@example.com",
        variables={"name": "User 0"},
        provider="ses",
        provider_idempotent=False,
        owner="dead",
    )
    world.ledger.claim(
        request, payload_hash=_hash(world, request), lease_until_ms=world.clock() + 1000, now_ms=world.clock()
    )
    world.clock.advance(5_000)

    report = world.process(batch(n=1))

    assert report.sent == 1
    assert world.provider.deliveries()["user0@example.com"] == 1


def test_a_live_claim_held_elsewhere_returns_the_message(world):
    from sendonce.domain.models import DeliveryRequest

    request = DeliveryRequest(
        campaign_id="c1",
        recipient_id="r0",
        batch_id="b1",
        email="user0@example.com",
        variables={"name": "User 0"},
        provider="resend",
        provider_idempotent=True,
        owner="other",
    )
    world.ledger.claim(
        request, payload_hash=_hash(world, request), lease_until_ms=world.clock() + 60_000, now_ms=world.clock()
    )

    report = world.process(batch(n=2))

    assert report.returning == 1 and report.sent == 1 and report.must_return
    assert "user0@example.com" not in world.provider.deliveries()


def test_the_same_recipient_with_different_content_is_a_conflict_not_a_send(world):
    world.process(batch(n=1))
    changed = [Recipient(recipient_id="r0", email="someone-else@example.com", variables={"name": "User 0"})]

    report = world.process(batch(people=changed, batch_id="b2"))

    assert report.conflicts == 1 and world.provider.calls == 1


def test_no_claim_is_taken_when_the_time_budget_is_below_the_safety_margin(world):
    report = world.process(batch(n=3), remaining_ms=5_000)

    assert report.returning == 3 and report.must_return
    assert world.ledger.items == {} and world.provider.calls == 0


def test_on_the_last_receive_unsent_recipients_are_marked_dead_lettered_with_the_error(world):
    world.provider.script["user0@example.com"] = [RetryableProviderError("503 service_unavailable")] * 3

    report = world.process(batch(n=2), receive_count=5)

    assert report.must_return and report.dead_lettered == 1
    record = world.ledger.get(DeliveryKey(campaign_id="c1", recipient_id="r0"))
    assert record.state is DeliveryState.DEAD_LETTERED and "503" in record.reason
    # A redrive later sends it, once.
    again = world.process(batch(n=2), receive_count=1)
    assert again.sent == 1 and world.provider.deliveries()["user0@example.com"] == 1


def test_a_cancelled_campaigns_last_receive_dead_letters_first_so_a_crash_leaves_nobody_pending(world):
    """Found by the explorer (tests/model/explore): a consumer that died on the last receive
    of a cancelled campaign's message, after closing one recipient, left the other pending
    behind a message SQS then moved to the DLQ."""
    world.campaign(state=CampaignState.CANCELLED)

    class Died(BaseException):
        pass

    closed = []
    original = world.ledger.close_as_read

    def close_as_read(*args, **kwargs):
        if closed:
            raise Died  # the Lambda ends here: nothing of ours catches it
        closed.append(original(*args, **kwargs))
        return closed[-1]

    world.ledger.close_as_read = close_as_read
    with pytest.raises(Died):
        world.process(batch(n=2), receive_count=5)

    assert world.ledger.state_of("c1", "r0") is DeliveryState.CANCELLED
    assert world.ledger.state_of("c1", "r1") is DeliveryState.DEAD_LETTERED
    # A redrive of the message closes it as cancelled.
    world.ledger.close_as_read = original
    world.process(batch(n=2), receive_count=1)
    assert world.ledger.state_of("c1", "r1") is DeliveryState.CANCELLED


def test_without_the_ledger_the_redelivered_batch_is_sent_twice(world):
    """The mechanism matters: the same two deliveries through a guard that does not claim."""

    class NoGuard:
        def send_once(self, request, send):
            from sendonce.domain.sending.ports import GuardResult

            return GuardResult(kind="sent", provider_message_id=send().provider_message_id)

    world.providers["resend"] = type(world.provider)("resend", honours_keys=False)  # a provider without keys
    service = world.service(guard=NoGuard())
    world.process(batch(n=3), service=service)
    world.process(batch(n=3), service=service)

    assert set(world.provider.deliveries().values()) == {2}


def _hash(world, request):
    from sendonce.domain.sending.guards import payload_hash

    return payload_hash(request.email, request.variables)
