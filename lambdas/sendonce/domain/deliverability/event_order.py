"""Which of a delivery's events is its `last_event`: by meaning, then by time, never by arrival.

Resend's webhooks (Svix) and SES's events (EventBridge) arrive at least once and in no
particular order: a `sent` can arrive after the `delivered` it preceded, and a retry can
arrive hours after newer events. So a delivery's `last_event` is the most advanced event
recorded for it, by this rank (higher wins):

    0  sent                the provider accepted the email
    1  delivery_delayed    the receiving server deferred it; the provider is still trying
    2  delivered           the receiving server accepted it
    3  bounced, failed, rejected, provider_suppressed
                           it did not reach the mailbox, or came back. A bounce can follow a
                           delivery (an asynchronous bounce: the receiving server accepted
                           the email and returned it later, which SES and Resend both report
                           as a bounce after the delivery), never the other way round, so a
                           late `delivered` or `sent` must not hide it
    4  complained, unsubscribed
                           the recipient's own answer: it can only come after the email
                           reached them, and it is what suppression and the brakes act on

Within a rank the event's own time (`occurred_at`) decides, then its kind and id, so two
events give the same answer whichever arrives first. Opens and clicks never reach the
ledger (deliverability/engagement.py keeps them apart), so they have no rank.

`order_key` turns this into one string whose byte order is the event order, so that a
store can keep the key beside `last_event` and move it only forward with one comparison.
It names the event by `id_digest` (16 characters), not by its id (Svix's and SES's run to
40-70): the key rides on every delivered recipient's ledger item, which must stay under
1 KB so that each event's write costs one write unit (issue 35).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from types import MappingProxyType

from sendonce.domain.deliverability.ports import EventKind, ProviderEvent

RANKS = MappingProxyType(
    {
        EventKind.SENT: 0,
        EventKind.DELIVERY_DELAYED: 1,
        EventKind.DELIVERED: 2,
        EventKind.BOUNCED: 3,
        EventKind.FAILED: 3,
        EventKind.REJECTED: 3,
        EventKind.PROVIDER_SUPPRESSED: 3,
        EventKind.COMPLAINED: 4,
        EventKind.UNSUBSCRIBED: 4,
    }
)
_MS_DIGITS = 15  # epoch milliseconds up to the year 33658


def id_digest(event_id: str) -> str:
    """A provider event's id in 16 URL-safe characters (96 bits of its SHA-256): what a
    store keeps to recognise the event again (a collision between two events of one
    delivery would take some 2^48 of them)."""
    return base64.urlsafe_b64encode(hashlib.sha256(event_id.encode()).digest()[:12]).decode()


def rank(kind: EventKind) -> int:
    return RANKS[kind]


def occurred_ms(event: ProviderEvent) -> int | None:
    """The event's own time in epoch milliseconds (UTC when it names no zone); None when it
    carries none or one that is not ISO 8601."""
    if not event.occurred_at:
        return None
    try:
        moment = dt.datetime.fromisoformat(event.occurred_at.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return max(0, int(moment.timestamp() * 1000))


def time_of(order: str) -> int:
    """The event's own time (epoch ms; 0: it carried none) that an `order_key` holds."""
    return int(order.split(".")[1])


def order_key(event: ProviderEvent) -> str:
    """A string that sorts (as bytes) in event order: rank, own time, kind, id. An event
    without a readable time sorts before every timed event of its rank."""
    ms = occurred_ms(event) or 0
    return f"{rank(event.kind)}.{ms:0{_MS_DIGITS}d}.{event.kind.value}.{id_digest(event.event_id)}"


def kinds_not_above(kind: EventKind) -> tuple[EventKind, ...]:
    """The kinds an event of `kind` may replace when only the previous kind is known (an
    item recorded before order keys existed): those of its rank or below."""
    return tuple(k for k, r in RANKS.items() if r <= rank(kind))


def most_advanced(events: list[ProviderEvent]) -> ProviderEvent | None:
    """The event that `last_event` names once all of `events` are recorded, in any order."""
    return max(events, key=order_key, default=None)
