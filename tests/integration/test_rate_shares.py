"""Campaigns sending at once divide the provider's rate (issue 31): the real limiter against
moto's DynamoDB, several consumers (one limiter each, as separate Lambda instances), read on
an injected clock. Each one-second slot, every consumer takes places for its campaign until
the limiter says no before the slot ends; the places each campaign got are counted per slot.
No timed assertion: time is the fake clock's."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping

import boto3
import pytest

from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.domain.sending.shares import Claimant
from sendonce_local.write_units import WriteUnitAccountant

pytestmark = pytest.mark.integration


class VirtualTime:
    """Consumers as threads on one virtual timeline: one runs at a time, and a consumer's
    sleep hands the turn to whichever consumer wakes first (ties: the lower index). So their
    requests reach DynamoDB in the order of their times, as concurrent consumers' would."""

    def __init__(self, count: int, start: float):
        self.now = [start + k * 0.001 for k in range(count)]
        self._count = count
        self._cond = threading.Condition()
        self._wake: dict[int, float] = {}
        self._turn: int | None = None

    def clock(self, k: int) -> Callable[[], float]:
        return lambda: self.now[k]

    def sleep(self, k: int, seconds: float) -> None:
        with self._cond:
            self._wake[k] = self.now[k] + max(0.0, seconds)
            self._next()
            self._cond.wait_for(lambda: self._turn == k)
            self.now[k] = self._wake.pop(k)

    def done(self, k: int) -> None:
        with self._cond:
            self._count -= 1
            self._next()

    def _next(self) -> None:
        if len(self._wake) >= self._count and self._wake:
            self._turn = min(self._wake, key=lambda j: (self._wake[j], j))
        else:
            self._turn = None
        self._cond.notify_all()


def run_slots(
    system,
    claimants: list[Claimant | None],
    *,
    rate: float,
    slots: int,
    stops: dict[str, int] | None = None,
    start: float | None = None,
    reserve: float = 0.0,
    dwell_ms: Mapping[str, int] | None = None,
    threads: int = 1,
    send_s: float | None = None,
    client=None,
) -> list[Counter[str]]:
    """Places per campaign in each of `slots` seconds: one consumer per claimant (`threads`
    threads sharing its limiter, as a Lambda instance's send threads do), each thread asking
    again `send_s` after every place, until the last slot ends (or, for a campaign in
    `stops`, until that slot starts: it paused)."""
    start = START if start is None else start
    send_s = SEND_S if send_s is None else send_s
    time_ = VirtualTime(len(claimants) * threads, start)
    end = start + slots
    places: list[tuple[str, float]] = []
    index = threading.local()

    def consumer(k: int, claimant: Claimant | None) -> list[threading.Thread]:
        limiter = DynamoDBRateLimiter(
            client=client or boto3.client("dynamodb"),
            table_name=system.resources.campaigns_table,
            rates={"resend": rate},
            reserve={"resend": reserve},
            chunk=4,
            clock=lambda: time_.now[index.k],
            sleep=lambda seconds: time_.sleep(index.k, seconds),
        )
        name = claimant.campaign_id if claimant else "-"
        stop = start + (stops or {}).get(name, slots)

        def thread(j: int) -> None:
            index.k = j
            try:
                time_.sleep(j, 0)
                while time_.now[j] < stop:
                    dwell = (dwell_ms or {}).get(name)
                    if not limiter.acquire("resend", deadline=stop - 0.001, claimant=claimant, dwell_ms=dwell):
                        break  # no place before it stops
                    places.append((name, time_.now[j]))
                    time_.sleep(j, send_s)
            finally:
                time_.done(j)

        return [threading.Thread(target=thread, args=(k * threads + t,)) for t in range(threads)]

    workers = [worker for k, c in enumerate(claimants) for worker in consumer(k, c)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    taken = [Counter[str]() for _ in range(slots)]
    for campaign, at in places:
        if start <= at < end:
            taken[int(at - start)][campaign] += 1
    return taken


START = 2_000_000_000.0
SEND_S = 0.01  # a consumer's time between a place and its next ask


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
