"""Deliveries whose outcome is unknown: the provider may or may not have accepted them.

They are never sent again automatically. A provider 'sent' event resolves one to sent
(provider_events.py), and so does an audit that finds it in the provider's own records
(domain/audit); an audit that finds it absent from a complete listing covering its whole
window proves it not sent. `campaign resume --include-unknown` reopens only those proven
not sent; an operator may instead accept that a recipient may get the email twice
(`--accept-possible-duplicates`: every unknown older than a window in which a 'sent' event
would normally have arrived). Reopening moves them back to pending, forgetting that an
attempt may have been accepted, so the claim rules let the next consumer send; resume then
republishes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from sendonce.domain.deliverability.ports import LedgerEvents, ReopenReport, UnknownDelivery
from sendonce.domain.models import DeliveryKey

# SES publishes a Send event within seconds; a quarter of an hour without one says the
# email was most likely not accepted (never certainly).
DEFAULT_UNKNOWN_WINDOW_S = 900


class UnknownOutcomes:
    def __init__(
        self,
        *,
        ledger_events: LedgerEvents,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        accept_possible_duplicates: bool = False,
    ):
        self._ledger_events = ledger_events
        self._clock_ms = clock_ms
        self._accept_possible_duplicates = accept_possible_duplicates

    def older_than(self, campaign_id: str, seconds: int = DEFAULT_UNKNOWN_WINDOW_S) -> list[UnknownDelivery]:
        """Unknown for at least `seconds`, without provider evidence. Those with evidence (a
        'sent' event that arrived while a consumer still held the delivery) are resolved to
        sent on the way."""
        return self._waiting(campaign_id, self._ledger_events.unknowns(campaign_id), seconds)

    def _waiting(self, campaign_id: str, unknowns: Iterable[UnknownDelivery], seconds: int) -> list[UnknownDelivery]:
        cutoff = self._clock_ms() - seconds * 1000
        waiting: list[UnknownDelivery] = []
        for unknown in unknowns:
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
        """Move the chosen unknown deliveries (default: every one an audit proved not sent;
        accepting possible duplicates, every one older than the window) back to pending.
        Named recipients that are not eligible are reported as skipped."""
        if self._accept_possible_duplicates:
            eligible = {u.recipient_id for u in self.older_than(campaign_id, older_than_s)}
        else:
            eligible = {u.recipient_id for u in self.older_than(campaign_id, 0) if u.proven_not_sent}
        chosen = eligible if recipient_ids is None else list(dict.fromkeys(recipient_ids))
        report = self._ledger_events.reopen_unknown(
            campaign_id,
            sorted(r for r in chosen if r in eligible),
            by=by,
            accept_possible_duplicates=self._accept_possible_duplicates,
        )
        report.skipped.extend(r for r in chosen if r not in eligible)
        return report

    def reopen_page(
        self,
        campaign_id: str,
        cursor: str | None,
        limit: int,
        *,
        recipient_ids: Iterable[str] | None = None,
        older_than_s: int = DEFAULT_UNKNOWN_WINDOW_S,
        by: str = "operator",
    ) -> tuple[ReopenReport, str | None]:
        """`reopen`, for one page of the campaign's unknowns (a job's step): the same rules.
        Named recipients not eligible are reported by the job once every page is read."""
        page, following = self._ledger_events.unknowns_page(campaign_id, cursor, limit)
        if self._accept_possible_duplicates:
            eligible = {u.recipient_id for u in self._waiting(campaign_id, page, older_than_s)}
        else:
            eligible = {u.recipient_id for u in self._waiting(campaign_id, page, 0) if u.proven_not_sent}
        if recipient_ids is not None:
            eligible &= set(recipient_ids)
        report = self._ledger_events.reopen_unknown(
            campaign_id, sorted(eligible), by=by, accept_possible_duplicates=self._accept_possible_duplicates
        )
        return report, following


def unknowns_older_than(
    ledger_events: LedgerEvents, campaign_id: str, seconds: int, *, now_ms: int | None = None
) -> list[UnknownDelivery]:
    clock = (lambda: now_ms) if now_ms is not None else (lambda: int(time.time() * 1000))
    return UnknownOutcomes(ledger_events=ledger_events, clock_ms=clock).older_than(campaign_id, seconds)
