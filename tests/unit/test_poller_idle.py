"""The SQS poller's idle check (sendonce_local.poller.event_source): idle is two readings of an
empty queue with nothing received between them, never one reading taken while a worker receives."""

from __future__ import annotations

import threading
import time
from typing import Any

from sendonce_local.poller.event_source import EventSourcePoller

EMPTY = {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0",
         "ApproximateNumberOfMessagesDelayed": "0"}  # fmt: skip


class RacingQueue:
    """Reads empty every time; during the first reading a worker receives a message (moto
    counted it neither visible nor invisible: its visibility timeout ended between the two
    counts) and its invocation ends a moment later."""

    def __init__(self) -> None:
        self.poller: EventSourcePoller | None = None
        self.readings = 0
        self.invocation_ended = threading.Event()

    def get_queue_attributes(self, **_: Any) -> dict[str, Any]:
        self.readings += 1
        if self.readings == 1:
            poller = self.poller
            assert poller is not None
            with poller._lock:
                poller._in_flight += 1
                poller._last_activity = time.monotonic()

            def end() -> None:
                with poller._lock:
                    poller._in_flight -= 1
                    poller._last_activity = time.monotonic()
                self.invocation_ended.set()

            threading.Timer(0.2, end).start()
        return {"Attributes": dict(EMPTY)}


def test_a_receive_during_the_queue_reading_is_not_idle_until_its_invocation_ends() -> None:
    queue = RacingQueue()
    poller = EventSourcePoller(sqs_client=queue, queue_url="q", handler=lambda event, context: None)
    queue.poller = poller
    poller._last_activity = time.monotonic() - 10  # quiet for a while

    assert poller._wait_until_idle(idle_seconds=0.1, deadline=time.monotonic() + 30)

    # Idle only after the invocation that began during the first reading ended, on two more readings
    assert queue.invocation_ended.is_set()
    assert queue.readings >= 3
