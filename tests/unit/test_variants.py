"""A/B variants (issue 33): a recipient's variant from its id, the winner's rules, and the
consumer sending the test's recipients their own variant and holding the rest for the winner."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sendonce.domain.campaigns.variants import (
    HELD,
    MIN_EVENTS,
    AbTest,
    Variant,
    VariantFigures,
    assign,
    decide,
    duration_s,
    variant_for,
)
from sendonce.domain.models import (
    Campaign,
    CampaignState,
    Content,
    DeliveryKey,
    DeliveryRecord,
    DeliveryState,
    Recipient,
)
from sendonce.domain.sending.guards import payload_hash
from tests.unit.helpers import World, batch

TEST = AbTest(variants=("A", "B"), share=0.2, pick_by="opens", after_s=4 * 3600)


def people(n: int) -> list[Recipient]:
    return [Recipient(recipient_id=f"r{i}", email=f"u{i}@example.com", variables={"name": f"U{i}"}) for i in range(n)]


def ab_campaign(world: World, *, decision=None, share: float = 0.2) -> Campaign:
    campaign = Campaign(
        campaign_id="c1",
        name="A/B",
        provider=world.provider_name,
        sender="news@example.com",
        content=Content(
            subject="Hello {{ name }}",
            text="Hi {{ name }}",
            variants=(Variant(id="A", subject="A for {{ name }}"), Variant(id="B", subject="B for {{ name }}")),
        ),
        state=CampaignState.SENDING,
        ab_test=TEST.model_copy(update={"share": share}),
        decision=decision,
    )
    world.campaigns.campaigns["c1"] = campaign
    return campaign


# --- who gets which variant ---------------------------------------------------------------


def test_a_recipients_variant_comes_from_its_id_alone_and_the_test_takes_about_its_share():
    ids = [f"r{i}" for i in range(20_000)]

    first = [assign("c1", rid, TEST) for rid in ids]
    again = [assign("c1", rid, TEST) for rid in ids]

    assert first == again
    tested = [v for v in first if v is not None]
    assert 0.19 < len(tested) / len(ids) < 0.21
    assert 0.47 < tested.count("A") / len(tested) < 0.53
    # Another campaign draws its own test: not the same recipients.
    assert [assign("c2", rid, TEST) for rid in ids[:200]] != first[:200]


def test_the_rest_wait_for_the_winner_and_then_get_it_while_the_test_keeps_its_own():
    rest = next(f"r{i}" for i in range(100) if assign("c1", f"r{i}", TEST) is None)
    tested = next(f"r{i}" for i in range(100) if assign("c1", f"r{i}", TEST) is not None)
    decision = decide(TEST, {}, by="op", at_ms=1)

    assert variant_for("c1", rest, TEST, None) == HELD
    assert variant_for("c1", rest, TEST, decision) == decision.variant
    assert variant_for("c1", tested, TEST, decision) == assign("c1", tested, TEST)


# --- the winner ---------------------------------------------------------------------------


def test_the_highest_rate_of_unique_opens_per_email_sent_wins_not_the_most_opens():
    figures = {"A": VariantFigures(sent=100, opened=30), "B": VariantFigures(sent=40, opened=20)}

    decision = decide(TEST, figures, by="sendonce", at_ms=5)

    assert decision.variant == "B"
    assert "A 30/100, B 20/40" in decision.reason and decision.figures["A"].sent == 100


def test_a_tie_goes_to_the_variant_listed_first():
    figures = {"A": VariantFigures(sent=50, opened=10), "B": VariantFigures(sent=100, opened=20)}

    decision = decide(TEST.model_copy(update={"variants": ("B", "A")}), figures, by="s", at_ms=1)

    assert decision.variant == "B" and "tied with A" in decision.reason


def test_too_few_events_or_a_variant_sent_to_nobody_send_the_control():
    few = {"A": VariantFigures(sent=10, opened=1), "B": VariantFigures(sent=10, opened=MIN_EVENTS - 2)}
    unsent = {"A": VariantFigures(sent=0), "B": VariantFigures(sent=10, opened=MIN_EVENTS)}

    assert decide(TEST, few, by="s", at_ms=1).variant == "A"
    assert "too few unique opens" in decide(TEST, few, by="s", at_ms=1).reason
    assert decide(TEST, unsent, by="s", at_ms=1).variant == "A"
    assert "sent to nobody" in decide(TEST, unsent, by="s", at_ms=1).reason


def test_clicks_decide_a_test_that_picks_by_clicks():
    figures = {"A": VariantFigures(sent=10, opened=9, clicked=1), "B": VariantFigures(sent=10, opened=1, clicked=9)}

    assert decide(TEST.model_copy(update={"pick_by": "clicks"}), figures, by="s", at_ms=1).variant == "B"


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("4h", 14_400), ("2d", 172_800), (90, 90)])
def test_a_tests_length_is_minutes_hours_or_days(text, seconds):
    assert duration_s(text) == seconds


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"variants": ("A",)}, "at least 2"),
        ({"share": 0}, "greater than 0"),
        ({"share": 1}, "less than 1"),
        ({"pick_by": "revenue"}, "'opens' or 'clicks'"),
        ({"after_s": "soon"}, "a duration"),
        ({"after_s": "10s"}, "a duration"),
    ],
)
def test_a_test_out_of_bounds_is_refused_naming_the_field(fields, problem):
    with pytest.raises(ValidationError) as raised:
        AbTest(**{"variants": ("A", "B"), "share": 0.2, "pick_by": "opens", "after_s": "4h", **fields})
    assert problem in str(raised.value)


def test_two_variants_with_one_id_are_refused():
    with pytest.raises(ValidationError, match="variant id 'A' appears twice"):
        Content(subject="s", text="t", variants=(Variant(id="A", subject="x"), Variant(id="A", subject="y")))


# --- the consumer -------------------------------------------------------------------------


def test_before_the_winner_only_the_test_is_sent_each_its_own_variant_and_the_rest_stay_pending():
    world = World()
    ab_campaign(world, share=0.5)
    everyone = people(10)

    report = world.process(batch(people=everyone))

    tested = {r.recipient_id: assign("c1", r.recipient_id, world.campaigns.get("c1").ab_test) for r in everyone}
    rest = {rid for rid, v in tested.items() if v is None}
    assert rest and len(rest) < 10
    assert report.sent == 10 - len(rest) and report.awaiting_winner == len(rest) and not report.must_return
    for email in world.provider.accepted:
        rid = email.tags["recipient_id"]
        assert email.tags["variant"] == tested[rid]
        assert email.subject.startswith(f"{tested[rid]} for ")
        assert world.ledger.get(DeliveryKey(campaign_id="c1", recipient_id=rid)).variant == tested[rid]
    assert all(world.ledger.state_of("c1", rid) is None for rid in rest)  # never claimed: pending


def test_after_the_winner_the_rest_get_it_and_the_test_is_not_sent_again():
    world = World()
    ab_campaign(world, share=0.5)
    body = batch(people=people(10))
    world.process(body)
    before = len(world.provider.accepted)
    decision = decide(world.campaigns.get("c1").ab_test, {}, by="op", at_ms=1).model_copy(update={"variant": "B"})
    world.campaigns.record_decision("c1", decision)

    report = world.process(body)

    later = world.provider.accepted[before:]
    assert report.duplicates_prevented == before and report.awaiting_winner == 0
    assert later and {e.tags["variant"] for e in later} == {"B"}
    assert set(world.provider.deliveries().values()) == {1}
    assert {world.ledger.state_of("c1", f"r{i}") for i in range(10)} == {DeliveryState.SENT}


def test_a_message_of_the_rest_alone_is_acknowledged_and_settles_its_batch():
    world = World()
    ab_campaign(world, share=0.5)
    test = world.campaigns.get("c1").ab_test
    rest = [r for r in people(20) if assign("c1", r.recipient_id, test) is None][:3]
    world.campaigns.campaigns["c1"] = world.campaigns.get("c1").model_copy(update={"open_batches": 1})

    report = world.process(batch(people=rest))

    assert report.awaiting_winner == 3 and not report.must_return and world.provider.calls == 0
    assert world.campaigns.get("c1").open_batches == 0


@pytest.mark.parametrize(("claimed_for", "sent"), [("A", 1), ("B", 0)])
def test_a_recipient_claimed_for_another_variant_is_a_conflict_never_a_second_email(claimed_for, sent):
    # The claim's payload hash binds the variant: a recipient released to pending after a claim
    # for its own A (a refused request) is claimed again; one claimed for B is refused.
    world = World()
    ab_campaign(world, share=0.5)
    test = world.campaigns.get("c1").ab_test
    person = next(r for r in people(20) if assign("c1", r.recipient_id, test) == "A")
    world.ledger.items[("c1", person.recipient_id)] = DeliveryRecord(
        campaign_id="c1",
        recipient_id=person.recipient_id,
        state=DeliveryState.PENDING,
        payload_hash=payload_hash(person.email, person.variables, claimed_for),
        attempts=1,
    )

    report = world.process(batch(people=[person]))

    assert (report.sent, report.conflicts, world.provider.calls) == (sent, 1 - sent, sent)
    assert payload_hash("a@example.com", {"n": 1}) == payload_hash("a@example.com", {"n": 1}, None)  # old claims
