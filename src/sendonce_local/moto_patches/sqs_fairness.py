"""SQS: a standard queue whose messages carry message groups receives as a fair queue (a
feature moto lacks, applied with the defect fixes: the campaign queue is a fair queue on AWS).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_sqs_fairness.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from sendonce_local.moto_patches.replacing import Replace

# AWS's concurrency measure (SQS Developer Guide, "How Amazon SQS fair queues work"): a
# tenant is noisy when its in-flight messages are more than this share of all in flight...
NOISY_SHARE = 0.10
# ...and at least this many of its own are in flight.
NOISY_IN_FLIGHT = 30


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
    queue's state when the receive starts: a tenant (a group; a message without one is a
    tenant of its own, so never noisy) is noisy when its in-flight messages are more than
    ``NOISY_SHARE`` of all in flight *and* at least ``NOISY_IN_FLIGHT``; quiet tenants'
    messages come first, then noisy tenants', the one with the fewest in flight first;
    within a tenant, and among quiet tenants, queue order. With no noisy tenant the order is
    stock. Everything else that reads the property (ApproximateNumberOfMessages, a long
    poll's wake-up) reads its length only. FIFO queues keep stock's order (and their own
    rule: one group in flight at a time).

    Left out: AWS's second measure, a tenant's share of the consumers' processing time (it
    would need receive-to-delete times kept per tenant over a window; a backlogged campaign
    is noisy by the concurrency measure alone), and its memory (a tenant stays noisy until
    its backlog drains or it sends nothing for five minutes): here a tenant is noisy exactly
    while its in-flight count says so. As on AWS, noisy tenants' messages are neither dropped
    nor throttled: they wait while quiet tenants' go first.
    """
    from moto.core.utils import unix_time_millis
    from moto.sqs.models import Queue

    stock = vars(Queue)["messages"]

    def messages(self: Any) -> list[Any]:
        visible: list[Any] = stock.fget(self)
        if self.fifo_queue or not visible:
            return visible
        # In flight: not visible (``Message.visible``), read against one clock reading. moto
        # reads this property for every message sent (ApproximateNumberOfMessages), and a
        # clock reading per message would double what stock spends there.
        now = unix_time_millis()
        return fair_order(visible, in_flight=(m for m in self._messages if not now > m.visible_at))

    replace(Queue, "messages", property(messages, doc=stock.__doc__))


def fair_order(visible: Sequence[Any], *, in_flight: Iterable[Any]) -> list[Any]:
    """``visible`` (moto messages, in queue order) as a fair queue hands them out, given the
    messages in flight: quiet tenants' first, then each noisy tenant's, fewest in flight first."""
    counts: Counter[str] = Counter()
    total = 0  # messages without a group count here too: each is a tenant of its own
    for message in in_flight:
        total += 1
        if message.group_id is not None:
            counts[message.group_id] += 1
    noisy = {
        group: count for group, count in counts.items() if count >= NOISY_IN_FLIGHT and count > NOISY_SHARE * total
    }
    if not noisy:
        return list(visible)
    # A stable sort: queue order within a tenant, among quiet tenants, and between noisy
    # tenants with as many in flight.
    return sorted(visible, key=lambda m: noisy.get(m.group_id, -1))
