"""sqs_receiving.py: two receives at once never both take one visible message (defect fix).

The race is made to happen, not waited for: the first receive is held inside its marking of
the message as received until the second receive reaches the same point (stock moto) or a
guard runs out (patched moto, where the second waits for the first's pass)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import boto3
import pytest

from tests.integration.moto_patches.helpers import moto_as

pytestmark = pytest.mark.integration


def _receive_twice_at_once(sqs: Any, url: str) -> list[list[str]]:
    """Two receives of one message each, the first held inside its mark until the second
    reaches a mark too (or half a second passes); the bodies each receive took."""
    from moto.sqs.models import Message

    stock_mark = Message.mark_received
    second_marking = threading.Event()

    def mark_received(self: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "first":
            # Stock moto lets the second receive in at once; the patch keeps it out until
            # this pass ends. Half a second tells the two apart on a loaded machine.
            second_marking.wait(0.5)
        else:
            second_marking.set()
        return stock_mark(self, *args, **kwargs)

    taken: dict[str, list[str]] = {}

    def receive(name: str) -> None:
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=0, VisibilityTimeout=300)
        taken[name] = [m["Body"] for m in answer.get("Messages", [])]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Message, "mark_received", mark_received)
        first = threading.Thread(target=receive, args=("first",), name="first")
        second = threading.Thread(target=receive, args=("second",), name="second")
        first.start()
        second.start()
        first.join(30)
        second.join(30)
    assert not first.is_alive() and not second.is_alive()
    return [taken["first"], taken["second"]]


@pytest.mark.parametrize(("profile", "takers"), [("stock", 2), ("defects", 1), ("speed", 1)])
def test_two_receives_at_once_take_a_visible_message_once_with_the_fixes(profile: str, takers: int) -> None:
    with moto_as(profile):
        # Given a standard queue holding one message
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName=f"q-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="m-1")

        # When two consumers receive at once, the second checking the message while the
        # first is marking it received
        taken = _receive_twice_at_once(sqs, url)

        # Then stock moto hands it to both (no visibility timeout ran out); patched moto to one
        assert sum(bodies == ["m-1"] for bodies in taken) == takers
        assert all(bodies in ([], ["m-1"]) for bodies in taken)


def test_a_long_poll_waits_outside_the_lock_and_takes_a_message_sent_meanwhile() -> None:
    with moto_as("defects"):
        # Given an empty queue and a receive long-polling it
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName=f"q-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        taken: list[list[str]] = []
        poll = threading.Thread(
            target=lambda: taken.append(
                [m["Body"] for m in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20).get("Messages", [])]
            )
        )
        poll.start()

        # When another receive comes meanwhile, it is answered (empty) without waiting for the poll
        assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []
        assert poll.is_alive()

        # And a message sent meanwhile ends the poll with that message
        sqs.send_message(QueueUrl=url, MessageBody="late")
        poll.join(30)
        assert taken == [["late"]]
