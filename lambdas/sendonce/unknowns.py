"""Deliveries whose outcome is unknown: the provider may or may not have accepted them.

They are never sent again automatically. A provider 'sent' event resolves one to sent
(provider_events.py); the rest are listed once they have waited longer than a window in
which such an event would normally have arrived, and an operator may choose to reopen
them (`campaign resume --include-unknown`), accepting that a recipient may get the email
twice. Reopening moves them back to pending, forgetting that an attempt may have been
accepted, so the claim rules let the next consumer send; resume then republishes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from sendonce import campaign_lifecycle as lifecycle
from sendonce.campaign_lifecycle import CampaignEvent
from sendonce.deliverability_ports import LedgerEvents, ReopenReport, UnknownDelivery
from sendonce.errors import InvalidCampaignError
from sendonce.models import Campaign, CampaignState, DeliveryKey
from sendonce.ports import CampaignStore

if TYPE_CHECKING:  # campaigns.py may call this module: no import at run time
    from sendonce.campaigns import CampaignService

# SES publishes a Send event within seconds; a quarter of an hour without one says the
# email was most likely not accepted (never certainly).
DEFAULT_UNKNOWN_WINDOW_S = 900


class UnknownOutcomes:
    def __init__(self, *, ledger_events: LedgerEvents, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self._ledger_events = ledger_events
        self._clock_ms = clock_ms

    def older_than(self, campaign_id: str, seconds: int = DEFAULT_UNKNOWN_WINDOW_S) -> list[UnknownDelivery]:
        """Unknown for at least `seconds`, without provider evidence. Those with evidence (a
        'sent' event that arrived while a consumer still held the delivery) are resolved to
        sent on the way."""
        cutoff = self._clock_ms() - seconds * 1000
        waiting: list[UnknownDelivery] = []
        for unknown in self._ledger_events.unknowns(campaign_id):
            if unknown.confirmed_message_id:
                self._ledger_events.resolve_unknown(
                    DeliveryKey(campaign_id=campaign_id, recipient_id=unknown.recipient_id),
                    provider_message_id=unknown.confirmed_message_id,
                    detail="confirmed by an earlier provider 'sent' event",
                )
                continue
            if unknown.since_ms is None or unknown.since_ms <= cutoff:
                waiting.append(unknown)
        return waiting

    def reopen(
        self,
        campaign_id: str,
        *,
        recipient_ids: Iterable[str] | None = None,
        older_than_s: int = DEFAULT_UNKNOWN_WINDOW_S,
        by: str = "operator",
    ) -> ReopenReport:
        """Move the chosen unknown deliveries (default: every one older than the window) back
        to pending. Named recipients that are not unknown, or not yet past the window, are
        reported as skipped."""
        eligible = {u.recipient_id for u in self.older_than(campaign_id, older_than_s)}
        chosen = eligible if recipient_ids is None else list(dict.fromkeys(recipient_ids))
        report = self._ledger_events.reopen_unknown(campaign_id, sorted(r for r in chosen if r in eligible), by=by)
        report.skipped.extend(r for r in chosen if r not in eligible)
        return report


def unknowns_older_than(ledger_events: LedgerEvents, campaign_id: str, seconds: int, *, now_ms: int | None = None) -> list[UnknownDelivery]:
    clock = (lambda: now_ms) if now_ms is not None else (lambda: int(time.time() * 1000))
    return UnknownOutcomes(ledger_events=ledger_events, clock_ms=clock).older_than(campaign_id, seconds)


def resume_including_unknown(
    service: CampaignService,
    campaigns: CampaignStore,
    unknowns: UnknownOutcomes,
    campaign_id: str,
    *,
    recipient_ids: Iterable[str] | None = None,
    older_than_s: int = DEFAULT_UNKNOWN_WINDOW_S,
    by: str = "operator",
    include_dead_lettered: bool = True,
    reason: str | None = None,
) -> tuple[Campaign, int, ReopenReport]:
    """`campaign resume --include-unknown`: reopen, then resume (which republishes every
    pending recipient, the reopened ones among them). A campaign that completed with
    unknown outcomes is moved back to paused first so that it can be resumed."""
    campaign = campaigns.get(campaign_id)
    if not (lifecycle.can(CampaignEvent.RESUME, campaign.state) or lifecycle.can(CampaignEvent.REOPEN_UNKNOWN, campaign.state)):
        raise InvalidCampaignError(f"campaign {campaign_id!r} is {campaign.state.value}; it cannot be resumed")
    report = unknowns.reopen(campaign_id, recipient_ids=recipient_ids, older_than_s=older_than_s, by=by)
    if campaign.state is CampaignState.COMPLETED:
        if not report.reopened:
            return campaign, 0, report
        lifecycle.apply(
            campaigns, campaign_id, CampaignEvent.REOPEN_UNKNOWN, by=by,
            reason=f"reopened {len(report.reopened)} unknown outcome(s)",
        )
    campaign, republished = service.resume(
        campaign_id,
        include_dead_lettered=include_dead_lettered,
        reason=reason or (f"resumed with {len(report.reopened)} reopened unknown outcome(s)" if report.reopened else None),
    )
    return campaign, republished, report
