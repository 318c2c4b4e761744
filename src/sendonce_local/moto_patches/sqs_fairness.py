"""SQS: a standard queue whose messages carry message groups receives as a fair queue (a
feature moto lacks, applied with the defect fixes: the campaign queue is a fair queue on AWS).

AWS (SQS Developer Guide, "How Amazon SQS fair queues work") calls a tenant noisy by either
of two measures, and both are emulated here: its share of the messages in flight, and its
share of the consumers' recent processing time. Left out: how long AWS remembers a noisy
tenant (until its backlog drains or it sends nothing for five minutes); here a tenant is
noisy exactly while one of the measures says so.

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_sqs_fairness.py.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sendonce_local.moto_patches.replacing import Replace

# AWS's two measures (SQS Developer Guide, "How Amazon SQS fair queues work"); AWS calls its
# thresholds approximate. A tenant is noisy when its share of either is more than this...
NOISY_SHARE = 0.10
# ...where for the concurrency measure it also needs at least this many of its own in flight.
NOISY_IN_FLIGHT = 30
# How far back the processing-time measure looks. AWS says "recent" and gives no figure; a
# minute is ours: at the default 2 consumers a batch takes about a second and a half
# (docs/fairness.md), so a minute holds dozens of receives of every campaign being sent,
# and a campaign nobody has processed for a minute no longer counts.
PROCESSING_WINDOW_S = 60.0


def receives_serve_quiet_groups_first(replace: Replace) -> None:
    """A standard queue whose messages carry ``MessageGroupId`` receives in plain queue order,
    where AWS makes it a fair queue.

    moto accepts ``MessageGroupId`` on a standard queue (SendMessage, SendMessageBatch) and
    returns it among the message's system attributes, but ``ReceiveMessage`` walks
    ``Queue.messages`` (the visible messages, in the order they were sent) and hands out the
    first ones. On AWS the group is a tenant: once a tenant is *noisy*, consumers get quiet
    tenants' messages first whenever any are visible, so a campaign published after another's
    thousand batches is served at once instead of after them.

    The patch orders ``Queue.messages`` of a standard queue as AWS describes it, from the
    queue's state when the receive starts. A tenant is a group; a message without one is a
    tenant of its own, so it is never noisy (its messages and time still count in the
    totals). A tenant is noisy when either:

    - its in-flight messages are more than ``NOISY_SHARE`` of all in flight *and* at least
      ``NOISY_IN_FLIGHT``; or
    - its processing time is more than ``NOISY_SHARE`` of all the queue's processing time in
      the last ``PROCESSING_WINDOW_S``. A receive's processing time runs from the receive to
      its end: DeleteMessage(Batch), or the message visible again (ChangeMessageVisibility
      to 0, or its visibility timeout running out); a message in flight counts up to now. A
      receive counts whole while it is in flight or ended within the window.

    Quiet tenants' messages come first, then noisy tenants', the one with the fewest in
    flight first, and among as many in flight the one with the smaller share of the
    processing time (AWS does not say how it orders those: the less noisy first is our
    reading; without it, at two consumers the first-published campaigns would take turns and
    later ones get a turn only when their share fell to 10 %); within a tenant, among quiet
    tenants, and between noisy tenants alike by both, queue order. With no noisy tenant the order is stock. As on AWS, noisy
    tenants' messages are neither dropped nor throttled: they wait while others go first.

    To time receives, ``Message.mark_received`` is wrapped to stamp the message with its
    latest receive (moto keeps the first one only), and ``Queue.delete_message`` to record
    a deleted message's receive in its queue's window; a returned message's receive is
    recorded when the queue next orders its messages, or folded into the message's stamp if
    it is received again first. Everything else that reads ``Queue.messages``
    (ApproximateNumberOfMessages for every message sent, a long poll's wake-up) reads its
    length only: when the visible messages are all one group's, the patch returns them as
    stock does without measuring anything. FIFO queues keep stock's order (and their own
    rule: one group in flight at a time). A purge drops its messages' unrecorded receives; a
    message moved to the dead-letter queue takes its unrecorded receive there.
    """
    from moto.core.utils import unix_time_millis
    from moto.sqs.models import Message, Queue

    stock_messages = vars(Queue)["messages"]
    stock_mark_received = vars(Message)["mark_received"]
    stock_delete_message = vars(Queue)["delete_message"]
    # One lock for the stamps on messages and every queue's window: moto's server serves
    # each request on a thread of its own.
    lock = threading.Lock()
    windows: weakref.WeakKeyDictionary[Any, ProcessingWindow] = weakref.WeakKeyDictionary()

    def window_of(queue: Any) -> ProcessingWindow:
        window = windows.get(queue)
        if window is None:
            window = windows[queue] = ProcessingWindow()
        return window

    def messages(self: Any) -> list[Any]:
        visible: list[Any] = stock_messages.fget(self)
        if self.fifo_queue or not visible:
            return visible
        first_group = visible[0].group_id
        if all(m.group_id == first_group for m in visible):
            # One tenant's messages, or only messages without a group (each quiet): queue
            # order whoever is noisy. This is the path of every SendMessage into a backlog.
            return visible
        # One clock reading for the whole queue: moto reads this property for every message
        # sent, and a reading per message would double what stock spends there.
        now = unix_time_millis()
        with lock:
            in_flight, processing = window_of(self).measure(self._messages, now)
        return fair_order(visible, noisy=noisy_tenants(in_flight, processing))

    @functools.wraps(stock_mark_received)
    def mark_received(self: Any, visibility_timeout: int | None = None) -> None:
        now = unix_time_millis()
        with lock:
            if self._sendonce_received_at is not None:
                # Received again before its queue recorded the earlier receive: it ended
                # when the message became visible again.
                end = min(now, self.visible_at)
                _, earlier = self._sendonce_ended or (end, 0.0)
                self._sendonce_ended = (end, earlier + max(0.0, end - self._sendonce_received_at))
            stock_mark_received(self, visibility_timeout)
            self._sendonce_received_at = now

    @functools.wraps(stock_delete_message)
    def delete_message(self: Any, receipt_handle: str) -> None:
        if self.fifo_queue:
            stock_delete_message(self, receipt_handle)
            return
        received = [
            m
            for m in self._messages
            if (m._sendonce_received_at is not None or m._sendonce_ended is not None)
            and m.had_receipt_handle(receipt_handle)
        ]
        stock_delete_message(self, receipt_handle)  # raises for an unknown receipt handle
        now = unix_time_millis()
        with lock:
            window = window_of(self)
            for message in received:
                window.end(message, now)

    # Unset by default on every message (instances set their own): the stamps read as None
    # on messages sent before the patch, and revert() removes the defaults.
    replace(Message, "_sendonce_received_at", None)
    replace(Message, "_sendonce_ended", None)
    replace(Message, "mark_received", mark_received)
    replace(Queue, "delete_message", delete_message)
    replace(Queue, "messages", property(messages, doc=stock_messages.__doc__))


class ProcessingWindow:
    """One standard queue's processing time per tenant over the last ``PROCESSING_WINDOW_S``.

    Ended receives are kept in the order they were recorded, each with its end, so expiry
    pops from the front and a running total per tenant is adjusted as it goes: no call
    reads the history. A receive recorded after one that ended later (a return noticed
    late) takes that one's end as its place, so it leaves the window no earlier than that.
    The caller holds the patch's lock.
    """

    def __init__(self) -> None:
        self._ended: deque[tuple[float, str | None, float]] = deque()  # (end ms, group, ms)
        self._totals: dict[str | None, float] = {}  # None: every message without a group

    def measure(self, messages: Iterable[Any], now: float) -> tuple[Counter[str | None], dict[str | None, float]]:
        """The queue's messages in flight and processing time (ms) per tenant, at ``now``."""
        self._expire(now)
        in_flight: Counter[str | None] = Counter()
        running: list[tuple[str | None, float]] = []
        for message in messages:
            if message._sendonce_ended is not None or message._sendonce_received_at is not None:
                self._record_ended(message, now)
            if not now > message.visible_at:
                in_flight[message.group_id] += 1
                if message._sendonce_received_at is not None:
                    running.append((message.group_id, now - message._sendonce_received_at))
        processing = dict(self._totals)
        for group, ms in running:
            processing[group] = processing.get(group, 0.0) + ms
        return in_flight, processing

    def end(self, message: Any, now: float) -> None:
        """``message`` is deleted at ``now``: record its receives."""
        self._expire(now)
        self._record_ended(message, now)
        if message._sendonce_received_at is not None:
            self._record(now, message.group_id, now - message._sendonce_received_at, now)
            message._sendonce_received_at = None

    def _record_ended(self, message: Any, now: float) -> None:
        """Record what of ``message``'s processing has ended: earlier receives folded into its
        stamp, and its latest receive if the message is visible again."""
        if message._sendonce_ended is not None:
            end, ms = message._sendonce_ended
            self._record(end, message.group_id, ms, now)
            message._sendonce_ended = None
        received_at = message._sendonce_received_at
        if received_at is not None and now > message.visible_at:
            self._record(message.visible_at, message.group_id, message.visible_at - received_at, now)
            message._sendonce_received_at = None

    def _record(self, end: float, group: str | None, ms: float, now: float) -> None:
        if end <= now - PROCESSING_WINDOW_S * 1000 or ms <= 0:
            return
        place = max(end, self._ended[-1][0]) if self._ended else end
        self._ended.append((place, group, ms))
        self._totals[group] = self._totals.get(group, 0.0) + ms

    def _expire(self, now: float) -> None:
        cutoff = now - PROCESSING_WINDOW_S * 1000
        while self._ended and self._ended[0][0] <= cutoff:
            _, group, ms = self._ended.popleft()
            self._totals[group] -= ms
            if self._totals[group] <= 0:
                del self._totals[group]
        if not self._ended:
            self._totals.clear()  # no rounding left behind by the subtractions


def noisy_tenants(
    in_flight: Mapping[str | None, int], processing: Mapping[str | None, float]
) -> dict[str, tuple[int, float]]:
    """Each noisy tenant (a group: a message without one is never noisy) with its messages in
    flight and its share of the processing time, from the queue's in-flight messages and
    processing time per tenant (None: the messages without a group, counted in the totals only)."""
    all_in_flight = sum(in_flight.values())
    all_processing = sum(processing.values())
    noisy: dict[str, tuple[int, float]] = {}
    for group in set(in_flight) | set(processing):
        if group is None:
            continue
        count = in_flight.get(group, 0)
        share = processing.get(group, 0.0) / all_processing if all_processing else 0.0
        by_concurrency = count >= NOISY_IN_FLIGHT and count > NOISY_SHARE * all_in_flight
        by_processing_time = share > NOISY_SHARE
        if by_concurrency or by_processing_time:
            noisy[group] = (count, share)
    return noisy


def fair_order(visible: Sequence[Any], *, noisy: Mapping[str, tuple[int, float]]) -> list[Any]:
    """``visible`` (moto messages, in queue order) as a fair queue hands them out: quiet
    tenants' first, then each noisy tenant's, fewest in flight first and, among as many in
    flight, the smaller share of the processing time first (AWS does not say how it orders
    those; the less noisy going first is our reading)."""
    if not noisy:
        return list(visible)
    # A stable sort: queue order within a tenant, among quiet tenants, and between noisy
    # tenants alike by both measures.
    quiet = (-1, 0.0)
    return sorted(visible, key=lambda m: noisy.get(m.group_id, quiet))
