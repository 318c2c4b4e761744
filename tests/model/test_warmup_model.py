"""The model's warm-up rules (tests/model/warmup.py), replayed deterministically: u1's
domain may send 2 on the first day and 3 on the second; the cap pauses u1 each day, the next
day's opening resumes it with exactly its remaining recipients, and nobody is sent twice or
left behind across the day boundaries. With the pause reverted (mutant 14) the invariant that
nobody is pending without a message while u1 sends fails."""

from __future__ import annotations

import pytest

from sendonce.domain.deliverability import warmup
from sendonce.domain.models import CampaignState
from tests.model.mutants import MUTANTS
from tests.model.test_delivery_model import ResendBatch, ResendSingle, SesSingle, one_machine
from tests.model.warmup import WARM_DAILY


@pytest.fixture(params=[ResendSingle, ResendBatch, SesSingle], ids=lambda m: m.__name__)
def model(request, monkeypatch):
    yield from one_machine(request.param, monkeypatch, frozenset({"warmup"}))


def sent_of_u1(model) -> dict[str, int]:
    return {rid: n for (campaign, rid), n in model.provider.accepted.items() if campaign == "u1" and n}


def test_each_days_cap_pauses_u1_and_the_next_opening_sends_exactly_the_rest(model):
    model.u1_publish(size=7)
    model.rig.drain()
    u1 = model.store.get("u1")
    first_day = sum(sent_of_u1(model).values())

    assert first_day <= WARM_DAILY[0] and u1.state is CampaignState.PAUSED
    assert u1.state_reason.startswith(f"warm-up: {WARM_DAILY[0]} of {WARM_DAILY[0]} today (warm.example); opens ")
    model.nobody_of_u1_is_left_pending_while_it_sends()

    model.u1_next_day_opens(past=0, times=2, operator=None)  # the opening fires twice: one resume
    model.rig.drain()
    model.no_day_sends_more_of_u1_than_its_cap()
    assert sum(sent_of_u1(model).values()) <= WARM_DAILY[0] + WARM_DAILY[1]
    assert model.store.get("u1").state is CampaignState.PAUSED

    model.u1_next_day_opens(past=1, times=1, operator=None)  # the ramp has ended: no cap
    model.rig.drain()
    assert sent_of_u1(model) == {f"u1r{i}": 1 for i in range(7)}  # everyone once
    assert model.store.get("u1").state is CampaignState.COMPLETED
    model.no_day_sends_more_of_u1_than_its_cap()


def test_an_operators_pause_over_the_warm_up_pause_is_not_resumed_by_the_opening(model):
    model.u1_publish(size=4)
    model.rig.drain()
    model.operator.pause("u1", reason="operator holds it")

    model.u1_next_day_opens(past=0, times=1, operator=None)

    assert (model.store.get("u1").state, model.store.get("u1").state_reason) == (
        CampaignState.PAUSED,
        "operator holds it",
    )


def test_without_the_pause_a_days_cap_leaves_recipients_behind_mutant_14(model):
    with MUTANTS["14 a warm-up day's cap stops the batch but does not pause the campaign"]():
        model.u1_publish(size=5)
        model.rig.drain()
        assert model.store.get("u1").state is CampaignState.SENDING
        with pytest.raises(AssertionError, match="u1 sending with nobody to bring"):
            model.nobody_of_u1_is_left_pending_while_it_sends()


def test_the_reason_names_the_opening_it_waits_for():
    opens = warmup.next_day_ms(1_796_634_000_000)
    reason = warmup.pause_reason("warm.example", 2_000, opens)
    assert reason == "warm-up: 2,000 of 2,000 today (warm.example); opens 2026-12-08T00:00:00Z"
    assert warmup.waits_for(reason, opens) and not warmup.waits_for(reason, opens + warmup.DAY_MS)


def test_a_throttle_retry_asks_again_on_the_place_already_taken_and_counts_once(model):
    """Found by the deep profile (SesSingle, `make verify` of 609600a): the provider said
    "too fast" to u1's email and the consumer asked again within the same call, on the one
    place it had taken; the model counted each ask as an email and saw 4 on a day of cap 2
    while the day's item said 2. A retry is the same email (the same object), counted once."""
    model.u1_publish(size=7)
    first = next(m for m in model.queue.messages if '"campaign_id":"u1"' in m.body)
    model.provider.script.append("rate_limited")  # the first ask refused, its retry accepted
    model._process(first)
    model.rig.drain()

    assert not model.provider.script  # the refusal was met, and the retry made
    assert sum(sent_of_u1(model).values()) == WARM_DAILY[0] == sum(model.u1_sent_by_day.values())
    model.no_day_sends_more_of_u1_than_its_cap()


def test_a_consumer_that_ignores_the_cap_fails_the_days_invariant(model, monkeypatch):
    """The check can fail: with no warm-up places taken, the first day sends past its cap."""
    monkeypatch.setattr(model.consumer._sender, "_warmup_budget", None)
    model.u1_publish(size=7)
    model.rig.drain()
    with pytest.raises(AssertionError, match="emails asked of the provider on .* cap 2"):
        model.no_day_sends_more_of_u1_than_its_cap()
