"""The model's A/B rules (tests/model/variants.py), replayed deterministically on every
machine: v1's test recipients are sent their own variant, the rest nothing until the winner,
then the winner; a recipient claimed and crashed before the pick is replayed after it with its
own variant, never the winner; and with the variant read from the campaign's state (mutant 15)
the invariant fails."""

from __future__ import annotations

import pytest

from sendonce.domain.campaigns.variants import assign
from sendonce.domain.models import CampaignState
from tests.model.edges import LEASE_MS
from tests.model.mutants import MUTANTS
from tests.model.test_delivery_model import ResendBatch, ResendSingle, SesSingle, one_machine
from tests.model.variants import V1_RECIPIENTS, V1_TEST

MUTANT_15 = "15 an A/B recipient's variant chosen from the campaign's state at send time"


@pytest.fixture(params=[ResendSingle, ResendBatch, SesSingle], ids=lambda m: m.__name__)
def model(request, monkeypatch):
    yield from one_machine(request.param, monkeypatch, frozenset({"variants"}))


def variants_of_v1(model) -> dict[str, list]:
    return {rid: v for (campaign, rid), v in model.provider.accepted_variants.items() if campaign == "v1"}


def test_the_test_first_each_its_own_variant_then_the_winner_to_the_rest(model):
    model.v1_publish(start=0, size=V1_RECIPIENTS)
    model.rig.drain()
    own = {f"v1r{i}": assign("v1", f"v1r{i}", V1_TEST) for i in range(V1_RECIPIENTS)}
    test = {rid: v for rid, v in own.items() if v is not None}

    assert variants_of_v1(model) == {rid: [v] for rid, v in test.items()}
    assert model.store.get("v1").state is CampaignState.SENDING  # the rest wait
    model.each_of_v1_gets_one_email_of_its_own_variant()

    model.v1_pick(how="schedule", times=2, operator=None, before=False)  # the test's end fires twice
    model.rig.drain()
    winner = model.store.get("v1").decision.variant
    assert variants_of_v1(model) == {rid: [v or winner] for rid, v in own.items()}
    model.each_of_v1_gets_one_email_of_its_own_variant()
    assert model.store.get("v1").state is CampaignState.COMPLETED


def test_a_test_recipient_claimed_before_the_pick_is_replayed_after_it_with_its_own_variant(model):
    # A consumer takes v1's first message and dies after the provider accepted (Resend) or
    # after the in-flight mark (SES); B is picked; the message comes back after the lease.
    model.v1_publish(start=0, size=2)
    message = next(m for m in model.queue.messages if '"campaign_id":"v1"' in m.body)
    point = {"resend": ("send", 1, True), "ses": ("send", 1, False)}[model.provider_name]
    if model.mode == "batch":
        point = ("send_batch", 1, True)
    model._process(message, crash_at=point)
    model.v1_pick(how="B", times=1, operator=None, before=False)
    model.clock.advance(LEASE_MS + model.queue.visibility_ms + 1)
    model.rig.drain()

    model.each_of_v1_gets_one_email_of_its_own_variant()
    for rid, sent in variants_of_v1(model).items():
        assert sent == [assign("v1", rid, V1_TEST)]


def test_with_the_variant_read_from_the_campaigns_state_a_test_recipient_gets_the_winner_mutant_15(model):
    with MUTANTS[MUTANT_15]():
        model.v1_publish(start=0, size=V1_RECIPIENTS)
        model.v1_pick(how="B", times=1, operator=None, before=False)
        model.rig.drain()
        with pytest.raises(AssertionError, match="was sent variant"):
            model.each_of_v1_gets_one_email_of_its_own_variant()
