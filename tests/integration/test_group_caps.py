"""Caps per mailbox-provider group (issue 32, item 1): the real adapter against moto's
DynamoDB, several consumers (one adapter each, as separate Lambda instances) on an injected
clock, and the consumer in batch mode against the local Resend server. No timed assertion:
time is the fake clock's, or what the Resend server recorded."""

from __future__ import annotations

import json
from collections import Counter

import boto3
import pytest

from sendonce.adapters.dynamodb.group_caps import DynamoDBGroupCaps
from sendonce.adapters.dynamodb.limiter_state import DECREASE, RECOVERY_PER_SECOND
from sendonce.domain.deliverability.ports import GroupPlaces
from sendonce.domain.models import Campaign, Content, DeliveryState, Recipient

pytestmark = pytest.mark.integration

STEP_S = 0.05


class Clock:
    def __init__(self, start: float = 1_900_000_000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


def adapters(system, n: int, clock: Clock, **options) -> list[DynamoDBGroupCaps]:
    client = boto3.client("dynamodb")
    return [
        DynamoDBGroupCaps(
            client=client, table_name=system.resources.campaigns_table, clock=clock, sleep=clock.sleep, **options
        )
        for _ in range(n)
    ]


def run(consumers, asks: list[GroupPlaces], clock: Clock, slots: int) -> list[Counter[str]]:
    """Every STEP_S each consumer asks for its places (never waiting: deadline now); the
    emails granted per campaign, per one-second slot."""
    start = int(clock.now)
    granted: list[Counter[str]] = [Counter() for _ in range(slots)]
    while clock.now < start + slots:
        for consumer, ask in zip(consumers, asks, strict=True):
            at = int(clock.now) - start
            if consumer.take(ask, deadline=clock.now):
                granted[at][ask.campaign_id] += ask.count
        clock.now += STEP_S
    return granted


def places(campaign_id: str, count: int, cap: float | None = 10, campaign_cap: float | None = None) -> GroupPlaces:
    return GroupPlaces(group="google", count=count, campaign_id=campaign_id, cap=cap, campaign_cap=campaign_cap)


def test_a_group_cap_binds_every_campaign_and_every_consumer_and_is_used_whole(system):
    clock = Clock()
    consumers = adapters(system, 4, clock)

    granted = run(consumers, [places("a", 2), places("a", 2), places("b", 2), places("b", 1)], clock, slots=6)

    per_slot = [sum(g.values()) for g in granted]
    assert per_slot == [10] * 6  # never above the cap, and nothing left unused while asked for
    assert all(g["a"] > 0 and g["b"] > 0 for g in granted)


def test_a_campaigns_own_cap_holds_under_the_deployments_and_the_rest_goes_to_the_others(system):
    clock = Clock()
    consumers = adapters(system, 2, clock)

    granted = run(consumers, [places("capped", 1, campaign_cap=3), places("other", 1)], clock, slots=5)

    assert [g["capped"] for g in granted] == [3] * 5
    assert [g["other"] for g in granted] == [7] * 5


def test_a_deferral_slows_that_group_for_every_consumer_and_not_another(system):
    clock = Clock()
    first, second = adapters(system, 2, clock)
    run([first, second], [places("a", 1), places("b", 1)], clock, slots=1)

    first.deferred("google")
    first.deferred("google")  # within a second: one cut, not two
    clock.now = int(clock.now) + 3  # past the other consumer's copy of the shared factor
    granted = run([first, second], [places("a", 1), places("b", 1)], clock, slots=1)

    # 10 x 0.7, recovered by 0.05 a second since: 8 here, from either consumer.
    assert sum(granted[0].values()) == first.in_force(10, "google") == int(10 * (DECREASE + 3 * RECOVERY_PER_SECOND))
    assert first.factor("google") < 1.0 and first.factor("microsoft") == 1.0
    yahoo = GroupPlaces(group="yahoo", count=1, campaign_id="a", cap=10, campaign_cap=None)
    assert sum(1 for _ in range(20) if second.take(yahoo, deadline=clock.now)) == 10


def test_a_request_larger_than_the_cap_in_force_takes_its_places_over_several_seconds(system):
    clock = Clock(1_900_000_000.1)
    (consumer,) = adapters(system, 1, clock)

    taken = consumer.take(places("a", 25, cap=10), deadline=clock.now + 10)

    assert 2 <= clock.now - 1_900_000_000 < 3  # 10 + 10 + 5: granted in the third second
    assert taken and taken.held_s == pytest.approx(clock.now - 1_900_000_000.1, abs=0.001)  # the report's "held"
    clock.now = int(clock.now) + 1.1
    assert consumer.take(places("a", 5, cap=10), deadline=clock.now).held_s == 0.0  # a second with room


def test_one_by_one_sends_reserve_a_few_places_a_write(system):
    clock = Clock()
    (consumer,) = adapters(system, 1, clock, chunk=4)

    granted = run([consumer], [places("a", 1, cap=40)], clock, slots=3)

    sent = sum(sum(g.values()) for g in granted)
    assert 3 * 16 <= sent <= 3 * 17  # one ask every 50 ms, in the first 800 ms of each second
    assert consumer.requests <= sent / 3  # writes (and the factor's reads) per place


def test_batch_mode_never_mixes_groups_and_paces_the_capped_one(system, monkeypatch):
    """A batch of 40, 60 % Google: the Google members go in send groups of half the cap, the
    others in one; the Resend server receives no Google email above the cap in any
    second."""
    monkeypatch.setenv("SENDONCE_PACING", json.dumps({"google": 8}))
    people = [
        Recipient(
            recipient_id=f"r{i}",
            email=f"user{i}@gmail.com" if i % 5 < 3 else f"user{i}@{system.domain}",
            variables={"name": f"U{i}"},
        )
        for i in range(40)
    ]
    system.operator.create(
        Campaign(
            campaign_id="c1",
            name="Paced",
            provider="resend",
            delivery_mode="batch",
            sender=f"news@{system.domain}",
            content=Content(subject="Hi {{ name }}", text="Hi {{ name }}"),
        )
    )
    system.operator.publish("c1", people)

    system.poller(timeout_s=90).run_until_idle(idle_seconds=2, max_seconds=240)

    accepted = system.resend.accepted()
    assert sorted(a for e in accepted for a in e.recipients) == sorted(p.email for p in people)  # each once
    by_request: dict[str, set[str]] = {}
    for email in accepted:
        by_request.setdefault(email.idempotency_key or email.id, set()).add(email.to[0].rpartition("@")[2])
    assert all(len(domains) == 1 for domains in by_request.values())  # no request mixes groups
    google = [e for e in accepted if e.to[0].endswith("@gmail.com")]
    sizes = Counter(e.idempotency_key for e in google)
    assert len(google) == 24 and set(sizes.values()) == {4}  # half the cap of 8
    per_second = Counter(int(e.accepted_at) for e in google)
    assert max(per_second.values()) <= 8
    assert {r.state for r in system.operator.records("c1")} == {DeliveryState.SENT}
