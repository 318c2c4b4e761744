"""SQS: concurrent receives hand a visible message to one receiver (a defect fix).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_sqs_receiving.py.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

from sendonce_local.moto_patches.replacing import Replace


def receives_take_each_message_once(replace: Replace) -> None:
    """Two receives on one queue at once may both take the same visible message.

    ``SQSBackend.receive_message`` walks the queue's visible messages, checks each is
    visible, and only then marks it received (invisible for the visibility timeout), with
    no lock: ``moto_server`` serves each request on a thread of its own, so a second
    receive that checks the message between the first one's check and its mark takes it
    too. Both receivers hold it; the message is processed twice while no visibility
    timeout ran out (a CI run of the poller's test, three consumers and six messages with
    a 300 s visibility timeout, handled one of them twice).

    AWS's standard queues deliver at least once, so sendonce must bear a duplicate and
    does (the ledger); but this one is a race in moto, far more frequent on a loaded
    machine than on AWS, and it makes every local count of receives (the poller's, the
    benchmarks' requests per message) depend on the machine's load.

    The patch runs each pass of a receive over a queue's messages under a lock of that
    queue's: stock ``receive_message`` with no wait, which checks and marks the messages it
    takes and returns. A long poll's wait between passes (``Queue.wait_for_messages``,
    woken by a send) is outside the lock, as in stock, so a waiting receive holds up nobody.
    """
    from moto.core.utils import unix_time
    from moto.sqs.models import SQSBackend

    stock = vars(SQSBackend)["receive_message"]
    locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
    locks_lock = threading.Lock()

    def lock_of(queue: Any) -> threading.Lock:
        with locks_lock:
            lock = locks.get(queue)
            if lock is None:
                lock = locks[queue] = threading.Lock()
            return lock

    @functools.wraps(stock)
    def receive_message(
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        queue = self.get_queue(queue_name)  # raises for an unknown queue, as stock does
        polling_end = unix_time() + wait_seconds_timeout
        while True:
            with lock_of(queue):
                result: list[Any] = stock(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            if result or not wait_seconds_timeout or unix_time() > polling_end:
                return result
            queue.wait_for_messages(1)

    replace(SQSBackend, "receive_message", receive_message)
