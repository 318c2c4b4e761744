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

An A/B campaign's opens and clicks count for the recipient's variant too (its test variant
from its id, or the rest's, who got the winner: report_data.variant_key), in the same write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from sendonce.domain.campaigns.report_data import variant_key
from sendonce.domain.campaigns.variants import AbTest
from sendonce.domain.deliverability.event_order import occurred_ms
from sendonce.domain.deliverability.ports import EngagementStore, EventKind, ProviderEvent
from sendonce.domain.errors import CampaignNotFoundError
from sendonce.domain.models import Campaign, Tracking

ENGAGEMENT = frozenset({EventKind.OPENED, EventKind.CLICKED})
ESTIMATE_NOTE = (
    "opens are an estimate: mail clients that fetch images ahead of the reader (Apple Mail Privacy"
    " Protection) open every email, and the providers' events do not mark them"
)
CACHED_CAMPAIGNS = 256  # a campaign's tracking and A/B test never change: kept per process


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
        campaign_of: Callable[[str], Campaign],
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ):
        """`campaign_of`: a campaign (raises CampaignNotFoundError); only its tracking and its
        A/B test are kept."""
        self._store = store
        self._clock_ms = clock_ms
        # A campaign's tracking and A/B test never change: read once per campaign and process
        # (a campaign not found is not kept: lru_cache keeps no exception).
        self._fixed_of = lru_cache(maxsize=CACHED_CAMPAIGNS)(lambda campaign_id: _fixed(campaign_of(campaign_id)))

    def record(self, event: ProviderEvent, campaign_id: str, recipient_id: str) -> Engaged:
        try:
            tracking, test = self._fixed_of(campaign_id)
        except CampaignNotFoundError:
            return Engaged("no_campaign")
        if tracking is None or not tracking.records(event.kind.value):
            return Engaged("not_tracked")
        at_ms = occurred_ms(event) or self._clock_ms()
        variant = variant_key(campaign_id, recipient_id, test) if test is not None else None
        return Engaged(self._store.record(campaign_id, recipient_id, event.kind.value, at_ms, variant=variant))


def _fixed(campaign: Campaign) -> tuple[Tracking | None, AbTest | None]:
    return campaign.tracking, campaign.ab_test
