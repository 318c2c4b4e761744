"""sqs_fairness.py: a standard queue whose messages carry MessageGroupId receives as an SQS fair
queue (AWS SQS Developer Guide, "How Amazon SQS fair queues work"): once a tenant (a group; a
message without one is a tenant of its own) holds more than 10 % of the messages in flight and
at least 30 of its own, quiet tenants' messages are received first; among noisy tenants, the one
with the fewest in flight first; within a tenant, queue order. Stock moto receives in queue
order; FIFO queues are untouched."""

from __future__ import annotations

import uuid
from typing import Any

import boto3
import pytest

from sendonce_local import moto_patches
from tests.integration.moto_patches.helpers import PATCHED, moto_as

pytestmark = pytest.mark.integration

HOLD_S = 600  # how long a received message stays in flight: longer than any test
# stock moto's SendMessage reads every message of the queue (its ApproximateNumberOfMessages*),
# so filling a queue is quadratic: 1,000 messages take ~9 s of CPU. The tests that need
# hundreds run with the fixes only (the speed patches touch DynamoDB only).
FIXES_ONLY = ("defects",)


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
def test_a_tenant_with_20_in_flight_is_not_noisy_so_queue_order_holds(profile: str) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given a tenant holding every message in flight, but only 20 of them
        _send(sqs, url, "big", 20)
        assert len(_receive(sqs, url, 20)) == 20
        _send(sqs, url, "big", 5, start=20)
        _send(sqs, url, "quiet", 1)

        # When a consumer receives, then the queue's order holds
        assert _bodies(_receive(sqs, url, 7)) == [f"big-{i}" for i in range(20, 25)] + ["quiet-0"]


@pytest.mark.parametrize(("others_in_flight", "noisy"), [(260, True), (280, False)])
@pytest.mark.parametrize("profile", FIXES_ONLY)
def test_30_in_flight_is_noisy_only_above_a_tenth_of_all_in_flight(
    profile: str, others_in_flight: int, noisy: bool
) -> None:
    with moto_as(profile):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        # Given 30 of a tenant's messages in flight among others of many small tenants:
        # 30 of 290 is over a tenth, 30 of 310 is not
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
    # Given the fixes applied, then reverted
    moto_patches.apply()
    moto_patches.revert()

    with moto_as("stock"):
        sqs = boto3.client("sqs")
        url = _queue(sqs)
        _one_noisy_tenant(sqs, url)
        _send(sqs, url, "quiet", 1)

        # Then receives are in queue order again
        assert _bodies(_receive(sqs, url, 1)) == ["big-50"]
