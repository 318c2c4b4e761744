"""Opens and clicks (issue 33), recorded only for a campaign that asks (Campaign.tracking).

An engagement event never touches the ledger: a ledger item stays under 1 KB whatever a
recipient does, and the ledger's writes stay the protocol's. What is kept instead is a
recipient's *first* open and *first* click (EngagementStore), and the campaign's unique opens
and clicks per minute, counted in the minute of that first one. Providers send these events
unordered and more than once, so each counts once by its meaning and time: a repeat (the
same event again, or a later open) changes nothing; an earlier one moves the recipient's
first to its own minute. Opens are an estimate: a mail client that fetches images ahead of
the reader (Apple Mail Privacy Protection) opens every email, and neither SES's nor Resend's
events mark such opens, so none is counted apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from sendonce.domain.deliverability.event_order import occurred_ms
from sendonce.domain.deliverability.ports import EngagementStore, EventKind, ProviderEvent
from sendonce.domain.errors import CampaignNotFoundError
from sendonce.domain.models import Tracking

ENGAGEMENT = frozenset({EventKind.OPENED, EventKind.CLICKED})
ESTIMATE_NOTE = (
    "opens are an estimate: mail clients that fetch images ahead of the reader (Apple Mail Privacy"
    " Protection) open every email, and the providers' events do not mark them"
)
CACHED_CAMPAIGNS = 256  # a campaign's tracking never changes: kept per process


@dataclass(frozen=True)
class Engaged:
    """What an engagement event did: "first", "earlier", "repeat", "not_tracked" (the campaign
    does not record that kind), or "no_campaign"."""

    status: str

    @property
    def counted(self) -> bool:
        return self.status in ("first", "earlier")


class EngagementRecorder:
    def __init__(
        self,
        *,
        store: EngagementStore,
        tracking_of: Callable[[str], Tracking | None],
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ):
        """`tracking_of`: a campaign's tracking (None: none; raises CampaignNotFoundError)."""
        self._store = store
        self._clock_ms = clock_ms
        # A campaign's tracking never changes: read once per campaign and process (a campaign
        # not found is not kept: lru_cache keeps no exception).
        self._tracking_for = lru_cache(maxsize=CACHED_CAMPAIGNS)(tracking_of)

    def record(self, event: ProviderEvent, campaign_id: str, recipient_id: str) -> Engaged:
        try:
            tracking = self._tracking_for(campaign_id)
        except CampaignNotFoundError:
            return Engaged("no_campaign")
        if tracking is None or not tracking.records(event.kind.value):
            return Engaged("not_tracked")
        at_ms = occurred_ms(event) or self._clock_ms()
        return Engaged(self._store.record(campaign_id, recipient_id, event.kind.value, at_ms))
