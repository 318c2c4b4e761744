"""sqs_fairness.py: a standard queue whose messages carry MessageGroupId receives as an SQS fair
queue (AWS SQS Developer Guide, "How Amazon SQS fair queues work"). A tenant (a group; a message
without one is a tenant of its own, never noisy) is noisy when it holds more than 10 % of the
messages in flight and at least 30 of its own, or more than 10 % of the consumers' recent
processing time (receive to delete or return). Then quiet tenants' messages are received first;
among noisy tenants, the one with the fewest in flight first; ties, and within a tenant, in queue
order. Stock moto receives in queue order; FIFO queues are untouched.

The processing-time tests run moto on a fake clock (``clock``) that only the test moves: they
assert orders, never durations."""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from typing import Any

import boto3
import pytest

from sendonce_local import moto_patches
from sendonce_local.moto_patches.sqs_fairness import PROCESSING_WINDOW_S
from tests.integration.moto_patches.helpers import PATCHED, _calls, moto_as

pytestmark = pytest.mark.integration

HOLD_S = 600  # how long a received message stays in flight: longer than any test
# stock moto's SendMessage reads every message of the queue (its ApproximateNumberOfMessages*),
# so filling a queue is quadratic: 1,000 messages take ~9 s of CPU. The tests that need
# hundreds run with the fixes only (the speed patches touch DynamoDB only).
FIXES_ONLY = ("defects",)


class MotoClock:
    """moto's time, moved by the test only."""

    def __init__(self, start: datetime.datetime) -> None:
        self.now = start

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> MotoClock:
    """moto on a fake clock, standing still until the test advances it.

    Every time moto's SQS takes (a receive, a visibility timeout, a retention check) and every
    time the patch takes reads ``moto.core.utils.utcnow``, as freezegun would have it; on the
    real clock a processing time is whatever the shared machine made it."""
    import moto.core.utils

    fake = MotoClock(moto.core.utils.utcnow())
    monkeypatch.setattr(moto.core.utils, "utcnow", fake)
    return fake


def _queue(sqs: Any, *, fifo: bool = False) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}" + (".fifo" if fifo else "")
    attributes = {"FifoQueue": "true"} if fifo else {}
    return str(sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])


def _send(sqs: Any, url: str, tenant: str | None, n: int, *, start: int = 0) -> None:
    """``n`` messages ``<tenant>-<i>`` in group ``tenant`` (none for None: ``old-<i>``, as an
    earlier release sent them), in order."""
    for first in range(start, start + n, 10):
        entries = []
        for i in range(first, min(first + 10, start + n)):
            entry = {"Id": str(i), "MessageBody": f"{tenant or 'old'}-{i}"}
            if tenant is not None:
                entry["MessageGroupId"] = tenant
            entries.append(entry)
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert not answer.get("Failed")


def _receive(sqs: Any, url: str, n: int) -> list[dict[str, Any]]:
    """The next ``n`` messages received (fewer only when the queue has no more), each held in
    flight for HOLD_S."""
    received: list[dict[str, Any]] = []
    while len(received) < n:
        messages = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=min(10, n - len(received)),
            VisibilityTimeout=HOLD_S,
            MessageSystemAttributeNames=["MessageGroupId"],
        ).get("Messages", [])
        if not messages:
            break
        received.extend(messages)
    return received


def _bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [m["Body"] for m in messages]


def _one_noisy_tenant(sqs: Any, url: str, *, backlog: int = 100) -> None:
    """`big` holds 50 of the 55 messages in flight (5 are `small`'s), then sends `backlog` more."""
    _send(sqs, url, "small", 5)
    _send(sqs, url, "big", 50)
    assert len(_receive(sqs, url, 55)) == 55
    _send(sqs, url, "big", backlog, start=50)


# --- stock moto: queue order --------------------------------------------------------------


def test_stock_moto_receives_in_queue_order_however_many_one_group_holds_in_flight() -> None:
    with moto_as("stock"):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given a tenant with 50 of 55 in flight and 100 visible, then a quiet tenant's message
        _one_noisy_tenant(sqs, url)
        _send(sqs, url, "quiet", 1)

        # When a consumer receives, then it gets the noisy tenant's oldest: the quiet tenant
        # waits behind the other's 100
        assert _bodies(_receive(sqs, url, 1)) == ["big-50"]


# --- patched: as AWS describes a fair queue -----------------------------------------------


@pytest.mark.parametrize("profile", FIXES_ONLY)
def test_a_quiet_tenant_s_message_sent_after_a_noisy_one_s_thousand_is_received_first(profile: str) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given a tenant with 50 of the 55 messages in flight (noisy: > 10 % and >= 30) and
        # 1,000 more visible, then three messages of a quiet tenant
        _one_noisy_tenant(sqs, url, backlog=1000)
        _send(sqs, url, "quiet", 3)

        # When a consumer receives 10
        received = _receive(sqs, url, 10)

        # Then the quiet tenant's come first, in their order, then the noisy tenant's, in theirs
        assert _bodies(received) == ["quiet-0", "quiet-1", "quiet-2"] + [f"big-{i}" for i in range(50, 57)]
        assert [m["Attributes"]["MessageGroupId"] for m in received[:4]] == ["quiet"] * 3 + ["big"]


@pytest.mark.parametrize("profile", PATCHED)
def test_a_message_without_a_group_is_a_quiet_tenant_of_its_own(profile: str) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given a noisy tenant's 100 visible messages, then one sent without a group (an
        # earlier release's)
        _one_noisy_tenant(sqs, url)
        _send(sqs, url, None, 1)

        # When a consumer receives, then that one comes first, still without a group
        [first] = _receive(sqs, url, 1)
        assert first["Body"] == "old-0"
        assert "MessageGroupId" not in first.get("Attributes", {})


@pytest.mark.parametrize("profile", PATCHED)
def test_a_tenant_with_20_in_flight_is_not_noisy_by_concurrency(profile: str, clock: MotoClock) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given a tenant holding every message in flight, but only 20 of them, on a clock
        # that stands still: no processing time, so the concurrency measure alone decides
        _send(sqs, url, "big", 20)
        assert len(_receive(sqs, url, 20)) == 20
        _send(sqs, url, "big", 5, start=20)
        _send(sqs, url, "quiet", 1)

        # When a consumer receives, then the queue's order holds
        assert _bodies(_receive(sqs, url, 7)) == [f"big-{i}" for i in range(20, 25)] + ["quiet-0"]


@pytest.mark.parametrize(("others_in_flight", "noisy"), [(260, True), (280, False)])
@pytest.mark.parametrize("profile", FIXES_ONLY)
def test_30_in_flight_is_noisy_only_above_a_tenth_of_all_in_flight(
    profile: str, others_in_flight: int, noisy: bool, clock: MotoClock
) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given 30 of a tenant's messages in flight among others of many small tenants:
        # 30 of 290 is over a tenth, 30 of 310 is not (the clock stands still: no
        # processing time, the concurrency measure alone decides)
        for group in range(others_in_flight // 10):
            _send(sqs, url, f"small{group}", 10)
        _send(sqs, url, "big", 30)
        assert len(_receive(sqs, url, others_in_flight + 30)) == others_in_flight + 30
        _send(sqs, url, "big", 1, start=30)
        _send(sqs, url, "quiet", 1)

        # When a consumer receives, then the quiet tenant goes first only when `big` is noisy
        expected = ["quiet-0", "big-30"] if noisy else ["big-30", "quiet-0"]
        assert _bodies(_receive(sqs, url, 2)) == expected


@pytest.mark.parametrize("profile", PATCHED)
def test_among_noisy_tenants_the_one_with_fewest_in_flight_goes_first(profile: str) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given two noisy tenants, `a` with 60 in flight and `b` with 40 (of 100), each with
        # messages visible, `a`'s sent first; then a quiet tenant's
        _send(sqs, url, "a", 60)
        _send(sqs, url, "b", 40)
        assert len(_receive(sqs, url, 100)) == 100
        _send(sqs, url, "a", 4, start=60)
        _send(sqs, url, "b", 4, start=40)
        _send(sqs, url, "quiet", 1)

        # When a consumer receives 9, then: the quiet tenant, `b` (fewer in flight), `a`
        received = _bodies(_receive(sqs, url, 9))
        assert received == ["quiet-0"] + [f"b-{i}" for i in range(40, 44)] + [f"a-{i}" for i in range(60, 64)]


@pytest.mark.parametrize("profile", PATCHED)
def test_noisy_tenants_messages_are_delayed_never_dropped(profile: str) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given a noisy tenant's 100 visible messages and two quiet tenants' few
        _one_noisy_tenant(sqs, url)
        _send(sqs, url, "quiet", 5)
        _send(sqs, url, None, 2)

        # When consumers receive until the queue is empty
        received = _bodies(_receive(sqs, url, 1000))

        # Then every message was received once, the quiet ones first
        assert sorted(received[:7]) == sorted([f"quiet-{i}" for i in range(5)] + ["old-0", "old-1"])
        assert received[7:] == [f"big-{i}" for i in range(50, 150)]


# --- patched: the processing-time measure ------------------------------------------------


def _receive_one(sqs: Any, url: str, *, visibility_s: int = HOLD_S) -> dict[str, Any]:
    [message] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=visibility_s)["Messages"]
    return message


def _delete(sqs: Any, url: str, message: dict[str, Any]) -> None:
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def _process_one_at_a_time(sqs: Any, url: str, clock: MotoClock, n: int) -> list[str]:
    """What one consumer taking a message at a time (the event source's batch size 1),
    holding it a second and deleting it, receives ``n`` times."""
    received = []
    for _ in range(n):
        message = _receive_one(sqs, url)
        clock.advance(1)
        _delete(sqs, url, message)
        received.append(message["Body"])
    return received


@pytest.mark.parametrize(
    ("profile", "first"), [("stock", ["L-0", "L-1", "L-2"])] + [(p, ["L-0", "S-0", "L-1"]) for p in PATCHED]
)
def test_a_group_holding_the_processing_time_is_noisy_so_a_small_campaign_goes_next(
    profile: str, first: list[str], clock: MotoClock
) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given a large campaign's 20 batches, then a small one's 2
        _send(sqs, url, "L", 20)
        _send(sqs, url, "S", 2)

        # When one consumer works through the queue a message at a time
        received = _process_one_at_a_time(sqs, url, clock, 22)

        # Then (patched) after L's first, L holds all the processing time (noisy) and S none
        # (quiet): S's first comes next. Then both hold a share (both noisy), neither has a
        # message in flight: queue order. Stock moto keeps queue order throughout.
        assert received[:3] == first
        assert sorted(received) == sorted([f"L-{i}" for i in range(20)] + ["S-0", "S-1"])
        if profile == "stock":
            assert received == [f"L-{i}" for i in range(20)] + ["S-0", "S-1"]


def _process_two_at_a_time(sqs: Any, url: str, clock: MotoClock) -> list[str]:
    """What two consumers taking a message at a time receive until the queue is empty: each
    second, the one holding the older message deletes it and receives the next."""
    held = [_receive_one(sqs, url)]
    clock.advance(1)
    held.append(_receive_one(sqs, url))
    received = [m["Body"] for m in held]
    while held:
        clock.advance(1)
        _delete(sqs, url, held.pop(0))
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=HOLD_S).get("Messages")
        if messages:
            held.append(messages[0])
            received.append(messages[0]["Body"])
    return received


@pytest.mark.parametrize("profile", ("stock", *PATCHED))
def test_two_consumers_alternate_among_four_groups(profile: str, clock: MotoClock) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given four campaigns' 10 batches each, published one after another
        groups = "abcd"
        for group in groups:
            _send(sqs, url, group, 10)

        # When two consumers work through the queue (two messages in flight)
        received = _process_two_at_a_time(sqs, url, clock)
        assert sorted(received) == sorted(f"{g}-{i}" for g in groups for i in range(10))
        if profile == "stock":
            # Then stock moto serves them in queue order: each campaign after the last
            assert received == [f"{g}-{i}" for g in groups for i in range(10)]
            return

        # Then each campaign's first batch is among the first four received: a receive serves
        # the quiet ones (no processing time yet) before those holding a share
        assert received[:4] == ["a-0", "b-0", "c-0", "d-0"]
        # ...and then they take turns: each holds a share of the processing time, and the one
        # the other consumer holds a batch of goes after those with none in flight (a campaign
        # whose share fell to 10 % goes before them all, being quiet). No campaign is received
        # twice in a row while another has batches left.
        left = dict.fromkeys(groups, 10)
        for before, after in zip(received, received[1:], strict=False):
            left[before[0]] -= 1
            others_left = sum(n for g, n in left.items() if g != before[0])
            assert after[0] != before[0] or not others_left, received
        # ...and evenly: among noisy campaigns with as many in flight, the smaller share of the
        # processing time goes first, so in every 8 receives each campaign has about two
        for start in range(0, 32, 8):
            window = Counter(r[0] for r in received[start : start + 8])
            assert set(window) == set(groups) and max(window.values()) - min(window.values()) <= 1, received


@pytest.mark.parametrize(
    ("profile", "expected"), [("stock", ["g-1", "old-1", "h-0"])] + [(p, ["old-1", "h-0", "g-1"]) for p in PATCHED]
)
def test_a_message_without_a_group_is_never_noisy_by_processing_time(
    profile: str, expected: list[str], clock: MotoClock
) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given messages without a group (an earlier release's) and of groups g and h
        _send(sqs, url, None, 1)
        _send(sqs, url, "g", 2)
        _send(sqs, url, None, 1, start=1)
        _send(sqs, url, "h", 1)
        # ...where a message without a group took 10 s of processing and g's first 5 s:
        # together, messages without a group hold two thirds of the processing time
        for hold_s in (10, 5):
            message = _receive_one(sqs, url)
            clock.advance(hold_s)
            _delete(sqs, url, message)

        # When a consumer receives 3
        received = _bodies(_receive(sqs, url, 3))

        # Then (patched) the one without a group is a quiet tenant of its own: it keeps its
        # place in queue order among the quiet (before h's), and g (noisy) goes last
        assert received == expected


@pytest.mark.parametrize(("idle_s", "expected"), [(PROCESSING_WINDOW_S - 1, "S-0"), (PROCESSING_WINDOW_S + 1, "L-1")])
@pytest.mark.parametrize("profile", PATCHED)
def test_a_group_whose_processing_time_left_the_window_is_quiet_again(
    profile: str, idle_s: float, expected: str, clock: MotoClock
) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given L's first message processed (L noisy: all the processing time), then nothing
        # processed for a while
        _send(sqs, url, "L", 5)
        _send(sqs, url, "S", 1)
        assert _process_one_at_a_time(sqs, url, clock, 1) == ["L-0"]
        clock.advance(idle_s)

        # When a consumer receives, then S goes first while L's processing is within the
        # window; once it has left, nobody is noisy: queue order
        assert _receive_one(sqs, url)["Body"] == expected


@pytest.mark.parametrize(("after_s", "expected"), [(10, "S-0"), (2 + PROCESSING_WINDOW_S + 1, "L-0")])
@pytest.mark.parametrize("returned_by", ["visibility timeout", "ChangeMessageVisibility"])
@pytest.mark.parametrize("profile", PATCHED)
def test_a_message_made_visible_again_stops_its_processing_time(
    profile: str, returned_by: str, after_s: float, expected: str, clock: MotoClock
) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        _send(sqs, url, "L", 2)
        _send(sqs, url, "S", 1)
        # Given L's first message received and returned to the queue 2 s later, undeleted
        if returned_by == "visibility timeout":
            _receive_one(sqs, url, visibility_s=2)
        else:
            message = _receive_one(sqs, url)
            clock.advance(2)
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
        clock.advance(after_s - (0 if returned_by == "visibility timeout" else 2))

        # When a consumer receives: its 2 s still count 10 s after the receive (L noisy: S
        # first); a window after the return they no longer do (nobody noisy: queue order,
        # L's first again). Counted up to now, L would still be noisy.
        assert _receive_one(sqs, url)["Body"] == expected


@pytest.mark.parametrize("profile", PATCHED)
def test_sends_into_one_group_s_backlog_measure_nothing(profile: str) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given one group's backlog, one of it in flight
        _send(sqs, url, "big", 100)
        _receive(sqs, url, 1)

        # When more of the group's messages are sent (moto reads Queue.messages for each)
        calls = _calls(lambda: _send(sqs, url, "big", 50, start=100))

        # Then the property was read, but no share was measured
        assert calls["moto/sqs/models.py:messages"] >= 50
        assert not [name for name in calls if name.endswith("sqs_fairness.py:measure")]


# --- what the patch leaves alone ----------------------------------------------------------


def _fifo_with_40_of_one_group_in_flight(sqs: Any) -> str:
    """A FIFO queue: group `a`'s 45 messages then group `b`'s 2, with 40 of `a`'s in flight.
    A FIFO receive never hands out a group's messages while others of it are in flight, so
    the 40 are put in flight in moto's model, as a visibility change would."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import sqs_backends

    url = _queue(sqs, fifo=True)
    for tenant, n in (("a", 45), ("b", 2)):
        for i in range(n):
            sqs.send_message(
                QueueUrl=url, MessageBody=f"{tenant}-{i}", MessageGroupId=tenant, MessageDeduplicationId=f"{tenant}{i}"
            )
    queue = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_queue(url.rsplit("/", 1)[1])
    for message in queue._messages[:40]:
        message.change_visibility(HOLD_S)
    return url


@pytest.mark.parametrize("profile", ("stock", *PATCHED))
def test_fifo_queues_receive_as_stock_moto_does(profile: str) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        # Given a FIFO queue where group `a` holds 40 of the 40 messages in flight (noisy,
        # were it a standard queue)
        url = _fifo_with_40_of_one_group_in_flight(sqs)

        # When a consumer receives, then it gets `a`'s next first, as stock moto orders them
        assert _bodies(_receive(sqs, url, 10)) == [f"a-{i}" for i in range(40, 45)] + ["b-0", "b-1"]


def test_reverting_puts_back_queue_order() -> None:
    from moto.sqs.models import Message, Queue

    stock = {owner: dict(vars(owner)) for owner in (Message, Queue)}
    # Given the fixes applied, then reverted
    moto_patches.apply()
    moto_patches.revert()

    # Then moto's messages and queues are stock's again, attribute for attribute
    assert {owner: dict(vars(owner)) for owner in (Message, Queue)} == stock

    with moto_as("stock"):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        _one_noisy_tenant(sqs, url)
        _send(sqs, url, "quiet", 1)

        # Then receives are in queue order again
        assert _bodies(_receive(sqs, url, 1)) == ["big-50"]
