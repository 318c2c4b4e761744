"""Campaigns sending at once divide the provider's rate (issue 31): the real limiter against
moto's DynamoDB, several consumers (one limiter each, as separate Lambda instances), read on
an injected clock. Each one-second slot, every consumer takes places for its campaign until
the limiter says no before the slot ends; the places each campaign got are counted per slot.
No timed assertion: time is the fake clock's."""

from __future__ import annotations

from collections import Counter

import boto3
import pytest

from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.domain.sending.shares import Claimant
from sendonce_local.limiter_run import run_consumers
from sendonce_local.write_units import WriteUnitAccountant

pytestmark = pytest.mark.integration


def run_slots(system, claimants: list[Claimant | None], *, client=None, **options) -> list[Counter[str]]:
    """`run_consumers` on the system's campaigns table (options: its keyword arguments)."""
    return run_consumers(client or boto3.client("dynamodb"), system.resources.campaigns_table, claimants, **options)


def total(slots: list[Counter[str]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for got in slots:
        out.update(got)
    return out


def test_two_campaigns_of_equal_weight_take_equal_shares(system):
    slots = run_slots(system, [Claimant("big"), Claimant("small")], rate=8, slots=12)

    steady = total(slots[2:])  # from the third slot each consumer knows the other is sending
    assert steady["big"] == steady["small"] == 4 * 10
    assert all(sum(got.values()) <= 8 for got in slots)


def test_weights_two_to_one_give_shares_two_to_one(system):
    slots = run_slots(system, [Claimant("heavy", weight=2), Claimant("light", weight=1)], rate=9, slots=12)

    steady = total(slots[2:])
    assert (steady["heavy"], steady["light"]) == (60, 30)


def test_weights_two_to_one_hold_at_a_rate_they_do_not_divide_with_two_consumers_each(system):
    heavy, light = Claimant("heavy", weight=2), Claimant("light", weight=1)
    slots = run_slots(system, [heavy, heavy, light, light], rate=4, slots=20)

    steady = total(slots[2:])  # 2.67 and 1.33 places a slot: 48 and 24 over 18 slots (45:27 before)
    assert (steady["heavy"], steady["light"]) == (48, 24)


def test_a_high_priority_campaign_goes_first_and_normal_ones_keep_their_floor(system):
    claimants: list[Claimant | None] = [Claimant("news"), Claimant("promo"), Claimant("urgent", priority="high")]
    slots = run_slots(system, claimants, rate=10, slots=22)

    steady = total(slots[2:])
    assert steady["urgent"] == 9 * 20  # the rate less the normal campaigns' floor (10 %)
    assert steady["news"] > 0 and steady["promo"] > 0  # nobody starves
    assert steady["news"] + steady["promo"] == 20


def test_max_rate_caps_a_campaign_and_the_rest_goes_to_the_others(system):
    slots = run_slots(system, [Claimant("capped", max_rate=2), Claimant("other")], rate=8, slots=12)

    steady = total(slots[2:])
    assert steady["capped"] == 2 * 10 and steady["other"] == 6 * 10


def test_a_campaign_that_stops_asking_leaves_its_share_to_the_others_at_once(system):
    slots = run_slots(system, [Claimant("stays"), Claimant("pauses")], rate=8, slots=10, stops={"pauses": 4})

    assert slots[3] == Counter({"stays": 4, "pauses": 4})
    # From the slot it stopped in, the other takes the whole rate: within the slot, once
    # shares are among those that asked in it (SHARES_BIND_S), and from the next one wholly.
    assert slots[4]["stays"] >= 6 and [got["stays"] for got in slots[5:]] == [8] * 5


def test_a_campaign_with_a_share_under_one_place_a_second_still_sends(system):
    # Ten normal campaigns share the 10 % floor of 10/s beside a high-priority one: 0.1
    # places a second each. Each still sends, in the slots its share gives it.
    normal = [Claimant(f"n{i}") for i in range(10)]
    slots = run_slots(system, [*normal, Claimant("urgent", priority="high")], rate=10, slots=62)

    steady = total(slots[2:])
    assert steady["urgent"] == 9 * 60
    assert sum(steady[c.campaign_id] for c in normal) == 60
    assert all(steady[c.campaign_id] > 0 for c in normal), steady


def test_sends_without_a_campaign_stay_within_the_total_rate(system):
    slots = run_slots(system, [Claimant("c"), None], rate=6, slots=8)
    assert all(sum(got.values()) <= 6 for got in slots)
    assert total(slots)["c"] > 0 and total(slots)["-"] > 0


def test_a_consumer_with_many_threads_reserves_a_second_of_places_in_one_write(system):
    # Two Lambda instances of 8 send threads each, 40 ms a send (200 a second each), two
    # campaigns at 300 a second: the rate binds. Each instance asks for as many places as it
    # used in the last second, so the limiter's key takes far under the scale rule's 0.1
    # write units a send: 0.02 (4 places a reservation took 0.29).
    client = boto3.client("dynamodb")
    accountant = WriteUnitAccountant(boto3.client("dynamodb"))
    accountant.attach(client)
    slots = run_slots(system, [Claimant("a"), Claimant("b")], rate=300, slots=6, threads=8, send_s=0.04, client=client)

    steady = total(slots[1:])
    assert steady["a"] + steady["b"] >= 0.9 * 300 * 5 and abs(steady["a"] - steady["b"]) <= 0.1 * steady["a"]
    assert all(sum(got.values()) <= 300 for got in slots)
    (limiter,) = [k for k in accountant.hottest(n=None) if k.partition == "limiter#resend"]
    assert limiter.units / sum(total(slots).values()) <= 0.03, (limiter, total(slots))


def test_a_share_the_slot_item_showed_spent_is_not_asked_for_again_in_that_slot(system):
    # Resend's 5/s less one in reserve, six instances of one thread for four campaigns (two
    # campaigns have two instances): each second an instance whose campaign's place its
    # sibling took learns it from the refused write's answer, and does not ask again in the
    # slot's second part. 1.6 writes a send; 2.7 when it asked again.
    client = boto3.client("dynamodb")
    accountant = WriteUnitAccountant(boto3.client("dynamodb"))
    accountant.attach(client)
    claimants: list[Claimant | None] = [Claimant(f"c{k % 4}") for k in range(6)]
    slots = run_slots(system, claimants, rate=5, reserve=1, slots=10, send_s=0.2, client=client)

    sends = sum(total(slots).values())
    assert sends >= 36 and all(sum(got.values()) <= 4 for got in slots)
    (limiter,) = [k for k in accountant.hottest(n=None) if k.partition == "limiter#resend"]
    assert limiter.writes / sends <= 2.0, (limiter, sends)


def test_the_slot_item_says_who_is_sending_how_and_how_long_their_messages_waited(system):
    limiter = DynamoDBRateLimiter(
        client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table, rates={"resend": 8}
    )
    assert limiter.acquire("resend", claimant=Claimant("c1", weight=3, max_rate=2.5), dwell_ms=1234)
    items = boto3.client("dynamodb").query(
        TableName=system.resources.campaigns_table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :s)",
        ExpressionAttributeValues={":pk": {"S": "limiter#resend"}, ":s": {"S": "slot#"}},
    )["Items"]
    (item,) = [i for i in items if "w#c1" in i]
    assert item["w#c1"]["S"] == "3:normal:2.5" and item["d#c1"]["N"] == "1234"
    assert int(item["n#c1"]["N"]) >= 1 and Claimant.decode("c1", item["w#c1"]["S"]) == Claimant("c1", 3, "normal", 2.5)
