"""The forecast as a service (forecast.py's arithmetic, with what it reads): the campaign, the
suppression list and who shares the provider's rate now. The operator API and the CLI call it
for a list in hand; the `forecast_s3` job (s3_forecast.py) counts a file's ranges with it and
times the merged counts once. It reads; nothing is written.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from sendonce.domain.campaigns.forecast import (
    AudienceCount,
    Forecast,
    Sharer,
    Sharing,
    SuppressionReads,
    count_audience,
    timed,
)
from sendonce.domain.campaigns.recipients_file import Row, RowTally
from sendonce.domain.campaigns.s3_ranges import PROBLEMS_KEPT
from sendonce.domain.deliverability.group_caps import GroupPacing
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups
from sendonce.domain.deliverability.warmup import Warmup
from sendonce.domain.models import Campaign
from sendonce.domain.sending.sending_now import SendingNow


class CampaignLookup(Protocol):
    def get(self, campaign_id: str) -> Campaign:
        """Raises CampaignNotFoundError."""
        ...


class RateSharing(Protocol):
    """Who shares a campaign's provider's rate now, and that rate."""

    def sharing(self, campaign: Campaign) -> Sharing: ...


class SharingNow:
    """`RateSharing` from the shared limiter's slot items (SendingNow): the campaigns that sent
    on the provider in the last 30 s, each with the provider requests it has left (from its
    status; unknown: taken to keep sending), and the rate the limiter paces the provider at
    now. `fallback_rate`: the rate when the limiter does not pace the provider (None: no rate,
    so the forecast says the send never ends)."""

    def __init__(self, sending_now: SendingNow, fallback_rate: Callable[[str], float | None] | None = None):
        self._now = sending_now
        self._fallback_rate = fallback_rate

    def sharing(self, campaign: Campaign) -> Sharing:
        found = self._now.provider(campaign.provider)
        others = tuple(
            Sharer(c.claimant, None if c.to_send is None else math.ceil(c.to_send / (c.recipients_per_request or 1)))
            for c in found.campaigns
        )
        rate = self._now.rate_in_force(campaign.provider)
        if rate is None and self._fallback_rate is not None:
            rate = self._fallback_rate(campaign.provider)
        return Sharing(rate=rate or 0.0, others=others, batch_size=self._now.batch_size(campaign.provider))


def _now_ms() -> int:
    return int(time.time() * 1000)


class ForecastService:
    """Forecasts of recipient lists for campaigns: counted here, timed at the share of the
    rate the campaigns sending now leave. `suppressions` None: a deployment without a
    suppression list (the forecast says it was not checked)."""

    def __init__(
        self,
        *,
        campaigns: CampaignLookup,
        suppressions: SuppressionReads | None,
        sharing: RateSharing,
        groups: MailboxGroups | None = None,
        caps: Mapping[str, float] | None = None,
        warm: Warmup | None = None,
        sent_on: Callable[[str, str], int] | None = None,
        clock_ms: Callable[[], int] = _now_ms,
    ):
        self._campaigns = campaigns
        self._suppressions = suppressions
        self._sharing = sharing
        self._groups = groups if groups is not None else MailboxGroups()
        # The deployment's caps per mailbox group (a campaign's own apply under them).
        self._pacing = GroupPacing(groups=self._groups, caps=dict(caps or {}))
        # The deployment's warm-up ramps, and what a sending domain's day item counts.
        self._warm, self._sent_on = warm, sent_on
        self._clock_ms = clock_ms

    def of_rows(
        self, campaign_id: str, rows: Iterable[Row], *, dedupe_addresses: bool = False, keep: int = PROBLEMS_KEPT
    ) -> tuple[Forecast, RowTally]:
        """The forecast for publishing `rows` to the campaign now (or at its send_at), and the
        tally that kept the first `keep` reported rows. An unknown campaign fails first."""
        campaign = self._campaigns.get(campaign_id)
        tally = RowTally(keep=keep, dedupe_addresses=dedupe_addresses)
        return self._timed(campaign, self.count(rows, tally), dedupe_addresses), tally

    def count(self, rows: Iterable[Row], tally: RowTally) -> AudienceCount:
        """The audience of `rows` (a part of a file, or all of it), per group."""
        return count_audience(rows, suppressions=self._suppressions, groups=self._groups, tally=tally)

    def timed(self, campaign_id: str, counted: AudienceCount, *, dedupe_addresses: bool = False) -> Forecast:
        """The forecast of `counted` (e.g. a file's parts merged) for the campaign, from now."""
        return self._timed(self._campaigns.get(campaign_id), counted, dedupe_addresses)

    def _timed(self, campaign: Campaign, counted: AudienceCount, dedupe_addresses: bool) -> Forecast:
        return timed(
            campaign,
            counted,
            sharing=self._sharing.sharing(campaign),
            now_ms=self._clock_ms(),
            dedupe_addresses=dedupe_addresses,
            suppressions_checked=self._suppressions is not None,
            pacing=self._pacing,
            warm=self._warm,
            sent_on=self._sent_on,
        )
