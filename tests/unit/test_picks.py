"""An A/B campaign's pick (campaigns/picks.py): the test's end scheduled at the start, the
first decision standing whoever picks later, and the rest sent the winner by one job."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.campaigns.scheduling import Firing
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.variants import AbTest, Variant, VariantFigures, assign
from sendonce.domain.errors import IllegalTransitionError, InvalidCampaignError
from sendonce.domain.models import Campaign, CampaignState, Content, Recipient
from tests.fakes import FakeScheduler
from tests.unit.helpers import World

TEST = AbTest(variants=("A", "B"), share=0.5, pick_by="opens", after_s=3_600)
NOW = 1_900_000_000_000


def ab_draft(campaign_id: str = "c1") -> Campaign:
    return Campaign(
        campaign_id=campaign_id,
        name="A/B",
        provider="resend",
        sender="news@example.com",
        content=Content(
            subject="Hi", text="Hello", variants=(Variant(id="A", subject="A"), Variant(id="B", subject="B"))
        ),
        ab_test=TEST,
    )


def people(n: int) -> list[Recipient]:
    return [Recipient(recipient_id=f"r{i}", email=f"u{i}@example.com") for i in range(n)]


@pytest.fixture
def world() -> World:
    return World()


def service(world: World, figures=None, scheduler=None) -> CampaignService:
    return CampaignService(
        campaigns=world.campaigns,
        ledger=world.ledger,
        queue=world.queue,
        provider_names=["resend"],
        clock_ms=lambda: NOW,
        scheduler=scheduler,
        variant_figures=(lambda campaign: figures) if figures is not None else None,
    )


def republished(world: World, prefix: str = "p") -> list[str]:
    bodies = [json.loads(b) for b in world.queue.published]
    return sorted(r["recipient_id"] for b in bodies if b["batch_id"].startswith(prefix) for r in b["recipients"])


def test_publishing_starts_the_test_and_schedules_its_pick_at_its_end(world):
    scheduler = FakeScheduler()
    svc = service(world, scheduler=scheduler)
    svc.create(ab_draft())

    svc.publish("c1", people(4))
    svc.publish("c1", people(6))  # a second publish to a campaign already sending: the test's end stays

    assert scheduler.picks == {"c1": NOW + 3_600_000}


def test_a_scheduled_ab_campaigns_pick_is_set_by_its_publish_and_moves_with_its_start(world):
    scheduler = FakeScheduler()
    svc = service(world, scheduler=scheduler)
    svc.create(ab_draft())

    svc.publish("c1", people(4), send_at_ms=NOW + 600_000)
    first = dict(scheduler.picks)
    svc.reschedule("c1", NOW + 900_000)

    assert first == {"c1": NOW + 600_000 + 3_600_000}
    assert scheduler.picks == {"c1": NOW + 900_000 + 3_600_000}


def test_a_pick_by_hand_records_the_winner_and_republishes_exactly_the_pending(world):
    svc = service(world)
    svc.create(ab_draft())
    svc.publish("c1", people(8))

    result = svc.pick("c1", "B", reason="B reads better")

    rest = sorted(r.recipient_id for r in people(8) if assign("c1", r.recipient_id, TEST) is None)
    assert result.decided_now and result.variant == "B" and result.job_id == "c1-pick"
    decision = world.campaigns.get("c1").decision
    assert (decision.variant, decision.reason, decision.at_ms) == ("B", "B reads better", NOW)
    # Nothing was claimed in this world: everyone is pending, so all are republished; the
    # consumer sends the test its own variants and the rest B.
    assert set(rest) <= set(republished(world)) and republished(world) == sorted(r.recipient_id for r in people(8))


def test_the_first_decision_stands_whoever_picks_later_and_the_rest_are_published_once(world):
    svc = service(world, figures={"A": VariantFigures(sent=5, opened=9), "B": VariantFigures(sent=5, opened=1)})
    svc.create(ab_draft())
    svc.publish("c1", people(8))
    first = svc.pick("c1", "B")
    messages = len(world.queue.published)

    by_figures = svc.pick("c1")
    fired = svc.pick_on_schedule(Firing("c1", NOW, variant_pick=True))

    assert first.decided_now and not by_figures.decided_now and fired["picked"] is False
    assert world.campaigns.get("c1").decision.variant == "B" == by_figures.variant == fired["variant"]
    assert len(world.queue.published) == messages  # the job is the campaign's, started once


def test_the_scheduled_pick_decides_by_the_figures(world):
    svc = service(world, figures={"A": VariantFigures(sent=5, opened=2), "B": VariantFigures(sent=5, opened=9)})
    svc.create(ab_draft())
    svc.publish("c1", people(4))

    fired = svc.pick_on_schedule(Firing("c1", NOW, variant_pick=True))

    assert fired["picked"] is True and fired["variant"] == "B" and "A 2/5, B 9/5" in fired["reason"]


def test_a_pick_is_refused_before_the_start_after_a_cancel_for_an_unknown_variant_or_without_a_test(world):
    svc = service(world)
    svc.create(ab_draft())
    plain = ab_draft("plain").model_copy(update={"ab_test": None, "content": Content(subject="s", text="t")})
    svc.create(plain)
    svc.publish("plain", people(1))

    with pytest.raises(IllegalTransitionError, match="draft"):
        svc.pick("c1", "A")
    svc.publish("c1", people(2))
    with pytest.raises(InvalidCampaignError, match="'C' is not one of A, B"):
        svc.pick("c1", "C")
    with pytest.raises(IllegalTransitionError, match="no A/B test"):
        svc.pick("plain", "A")
    svc.cancel("c1")
    with pytest.raises(IllegalTransitionError, match="cancelled"):
        svc.pick("c1", "A")
    assert world.campaigns.get("c1").decision is None
    assert svc.pick_on_schedule(Firing("c1", NOW, variant_pick=True))["picked"] is False


def test_a_pick_on_a_paused_campaign_is_recorded_and_its_rest_wait_for_the_resume(world):
    svc = service(world)
    svc.create(ab_draft())
    svc.publish("c1", people(4))
    svc.pause("c1")

    result = svc.pick("c1", "A")

    assert result.decided_now and world.campaigns.get("c1").state is CampaignState.PAUSED


def test_a_firing_carries_its_pick_instant_through_the_event_and_back():
    firing = Firing("c1", NOW, execution_id="x", variant_pick=True)

    event = firing.as_event()

    assert "pick_at" in event and Firing.from_event(event) == firing
