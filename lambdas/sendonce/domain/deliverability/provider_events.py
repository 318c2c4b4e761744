"""Provider events into the ledger: from an event bus or as signed webhooks.

Each provider's folder reads its own events into a ProviderEvent (`EventReader`,
`WebhookReader`, registered by the wiring); each is applied here once:

- recorded on its delivery as an annotation (`provider_events`, and `last_event` when it is
  the most advanced yet: event_order.py), deduplicated on the event's id (the provider's
  reader derives one that its retries repeat), never moving the delivery's state; except a provider 'sent' event for a delivery whose outcome
  is unknown, which resolves it to sent: the provider says it accepted the email.
- hard bounces and complaints put the address on the suppression list.
- complaints and hard bounces are counted per campaign, and a campaign whose complaint or
  hard-bounce rate passes its threshold pauses itself (the brakes).

Effects that are idempotent by themselves (suppression, resolution, the brake check) are
repeated when a duplicate arrives, so a run that stopped half-way is finished by the
provider's retry; the counted annotation is written once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Protocol

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.counters import state_counts
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.ports import CampaignCounters, CampaignStore
from sendonce.domain.deliverability.engagement import ENGAGEMENT, Engaged, EngagementRecorder
from sendonce.domain.deliverability.group_caps import GroupPacing, is_deferral
from sendonce.domain.deliverability.ports import (
    AnnotationStatus,
    CampaignFeedback,
    EventKind,
    FeedbackCounter,
    GroupCaps,
    LedgerEvents,
    ProviderEvent,
    Suppressions,
)
from sendonce.domain.errors import CampaignNotFoundError, IllegalTransitionError, WebhookSignatureError
from sendonce.domain.models import DeliveryState, is_valid_email

logger = logging.getLogger(__name__)

COMPLAINT_BRAKE = "sendonce (complaint brake)"
BOUNCE_BRAKE = "sendonce (bounce brake)"


COUNTED_CACHE = 256  # campaigns whose counted-ness a process keeps


class InvalidEventError(ValueError):
    """A payload that is not a provider event we can read (acknowledged and ignored)."""


class EventReader(Protocol):
    """A provider's events as an event bus delivers them (from its folder, through the registry)."""

    provider: str

    def read(self, event: Mapping[str, Any]) -> ProviderEvent | None:
        """The event normalised; None when it is not one we record. Raises InvalidEventError."""
        ...


class WebhookReader(Protocol):
    """A provider's webhooks: authenticated, then normalised (its folder's webhook reader)."""

    def read(self, body: str, headers: Mapping[str, str]) -> ProviderEvent | None:
        """Raises WebhookSignatureError when the request is not the provider's (or is stale),
        InvalidEventError when it is but cannot be read; None for types we do not record."""
        ...


@dataclass(frozen=True)
class BrakeSettings:
    """A campaign pauses itself when, with at least `min_sent` emails sent, its complaint
    rate or hard-bounce rate is above these fractions (0.001 = 0.1 %)."""

    complaint_rate: float = 0.001
    hard_bounce_rate: float = 0.05
    min_sent: int = 100


@dataclass
class EventReport:
    kind: EventKind | None = None
    provider: str | None = None
    status: str = "ignored"  # applied | duplicate | no_delivery | ignored
    newly_suppressed: int = 0
    counted: str | None = None  # the campaign counter this event added to: complaints | hard_bounces
    resolved_unknown: bool = False
    brake: str | None = None  # "complaint" | "bounce" when this event paused the campaign
    campaign_id: str | None = None  # the delivery's campaign, when the event names one of ours
    deferred_groups: tuple[str, ...] = ()  # mailbox groups slowed by this deferral
    engagement: str | None = None  # an open or click: engagement.Engaged's status (first, repeat...)


class ProviderEventService:
    def __init__(
        self,
        *,
        ledger_events: LedgerEvents,
        suppressions: Suppressions,
        campaigns: CampaignStore,
        brakes: BrakeSettings = BrakeSettings(),
        event_readers: Mapping[str, EventReader] | None = None,
        webhooks: Mapping[str, WebhookReader] | None = None,
        group_caps: GroupCaps | None = None,
        pacing: GroupPacing | None = None,
        engagement: EngagementRecorder | None = None,
        counters: CampaignCounters | None = None,
    ):
        """`event_readers`: by the event bus's source name; `webhooks`: by provider name (the
        webhook's path names it). Both come from the provider registry."""
        self._ledger_events = ledger_events
        self._suppressions = suppressions
        self._campaigns = campaigns
        self._brakes = brakes
        self._event_readers = dict(event_readers or {})
        self._webhooks = dict(webhooks or {})
        # A deferral slows its mailbox group for every consumer (deliverability/group_caps.py).
        self._group_caps = group_caps
        self._pacing = pacing or GroupPacing()
        # Opens and clicks of the campaigns that record them, apart from the ledger.
        self._engagement = engagement
        # A counted campaign's `sent` (the brakes' denominator) is its counters' total, which
        # the stream aggregator keeps anyway: its sent events write no 'sent' shard. A campaign
        # created before counters keeps its shards. Whether a campaign is counted never changes:
        # asked once per campaign and process.
        self._counters = counters
        self._is_counted = lru_cache(maxsize=COUNTED_CACHE)(
            lambda campaign_id: counters is not None and counters.totals(campaign_id) is not None
        )

    def reads_events_from(self, source: Any) -> bool:
        return isinstance(source, str) and source in self._event_readers

    def handle_event(self, source: str, event: Mapping[str, Any]) -> EventReport:
        """An event bus's event from `source`; one that cannot be read is logged and ignored."""
        reader = self._event_readers[source]
        try:
            parsed = reader.read(event)
        except InvalidEventError as exc:
            logger.warning("provider event not readable; ignored", extra={"source": source, "reason": str(exc)})
            return EventReport(provider=reader.provider)
        return self.apply(parsed) if parsed else EventReport(provider=reader.provider)

    def handle_webhook(self, provider: str, body: str, headers: Mapping[str, str]) -> EventReport:
        """Raises WebhookSignatureError when the webhook is not `provider`'s (or is stale), or
        when no webhook of that provider is configured."""
        reader = self._webhooks.get(provider)
        if reader is None:
            raise WebhookSignatureError(f"no webhook secret configured for provider {provider!r}")
        try:
            parsed = reader.read(body, headers)
        except InvalidEventError as exc:
            logger.warning("webhook not readable; ignored", extra={"provider": provider, "reason": str(exc)})
            return EventReport(provider=provider)
        return self.apply(parsed) if parsed else EventReport(provider=provider)

    def apply(self, event: ProviderEvent) -> EventReport:
        report = EventReport(kind=event.kind, provider=event.provider)
        if event.suppression_reason is not None:
            for address in event.addresses:
                if is_valid_email(address.strip()):
                    report.newly_suppressed += self._suppressions.add(
                        address.strip(),
                        event.suppression_reason,
                        f"{event.provider}:{event.kind.value}",
                        event.campaign_id,
                    )
        key = event.key
        if key is None:
            report.status = AnnotationStatus.NO_DELIVERY.value  # not one of ours (no tags)
            return report
        report.campaign_id = key.campaign_id
        if event.kind in ENGAGEMENT:
            engaged = (
                self._engagement.record(event, key.campaign_id, key.recipient_id)
                if self._engagement is not None
                else Engaged("not_tracked")
            )
            report.engagement = engaged.status
            report.status = "applied" if engaged.counted else "duplicate" if engaged.status == "repeat" else "ignored"
            return report
        counter = None
        if event.kind is EventKind.COMPLAINED:
            counter = FeedbackCounter.COMPLAINTS
        elif event.kind is EventKind.BOUNCED and event.hard:
            counter = FeedbackCounter.HARD_BOUNCES
        annotation = self._ledger_events.annotate(event, counter=counter)
        report.status = annotation.status.value
        if annotation.status is AnnotationStatus.NO_DELIVERY:
            return report
        if counter is not None and annotation.status is AnnotationStatus.APPLIED:
            report.counted = counter.value
        if annotation.status is AnnotationStatus.APPLIED:
            report.deferred_groups = self._slow_deferring_groups(event)
        if event.kind is EventKind.SENT:
            if annotation.status is AnnotationStatus.APPLIED and not self._is_counted(key.campaign_id):
                self._ledger_events.count_sent(key.campaign_id, key.recipient_id)
            if (
                annotation.state is DeliveryState.UNKNOWN
                and event.message_id
                and annotation.provider in (None, event.provider)
            ):
                report.resolved_unknown = self._ledger_events.resolve_unknown(
                    key,
                    provider_message_id=event.message_id,
                    detail=f"confirmed by a {event.provider} '{event.kind.value}' event",
                )
                if report.resolved_unknown:
                    logger.info(
                        "unknown outcome resolved to sent by a provider event", extra={"recipient_id": key.recipient_id}
                    )
        if counter is not None:
            report.brake = self._check_brakes(key.campaign_id)
        return report

    def _slow_deferring_groups(self, event: ProviderEvent) -> tuple[str, ...]:
        """A deferral (first seen) slows the mailbox groups of its addresses."""
        if self._group_caps is None or not is_deferral(event.kind, hard=event.hard, detail=event.detail):
            return ()
        groups = tuple(sorted({self._pacing.group_of(a) for a in event.addresses if "@" in a}))
        for group in groups:
            self._group_caps.deferred(group)
        return groups

    def _feedback(self, campaign_id: str) -> CampaignFeedback:
        """The brakes' counts: complaints and hard bounces from the feedback counter; `sent`
        from the counters' totals for a counted campaign (and the 'sent' shards an earlier
        release wrote for it, if more), else from the 'sent' shards."""
        feedback = self._ledger_events.feedback(campaign_id)
        if self._counters is None or not self._is_counted(campaign_id):
            return feedback
        totals = self._counters.totals(campaign_id)
        if totals is None:
            return feedback
        return dataclasses.replace(feedback, sent=max(feedback.sent, state_counts(totals.counts).sent))

    def _check_brakes(self, campaign_id: str) -> str | None:
        feedback = self._feedback(campaign_id)
        if feedback.sent < self._brakes.min_sent:
            return None
        complaint_limit = Fraction(str(self._brakes.complaint_rate)) * feedback.sent
        bounce_limit = Fraction(str(self._brakes.hard_bounce_rate)) * feedback.sent
        if feedback.complaints > complaint_limit:
            return self._pause(
                campaign_id,
                "complaint",
                COMPLAINT_BRAKE,
                f"complaint rate {feedback.complaints / feedback.sent:.2%} is above {self._brakes.complaint_rate:.2%}"
                f" ({feedback.complaints} complaints, {feedback.sent} sent)",
            )
        if feedback.hard_bounces > bounce_limit:
            return self._pause(
                campaign_id,
                "bounce",
                BOUNCE_BRAKE,
                f"hard-bounce rate {feedback.hard_bounces / feedback.sent:.2%} is above {self._brakes.hard_bounce_rate:.2%}"
                f" ({feedback.hard_bounces} hard bounces, {feedback.sent} sent)",
            )
        return None

    def _pause(self, campaign_id: str, brake: str, by: str, reason: str) -> str | None:
        try:
            lifecycle.apply(self._campaigns, campaign_id, CampaignEvent.BRAKE, by=by, reason=reason)
        except (IllegalTransitionError, CampaignNotFoundError):
            return None  # already paused, cancelled or completed: nothing left to brake
        logger.error("campaign paused by a brake", extra={"campaign_id": campaign_id, "brake": brake, "reason": reason})
        return brake
