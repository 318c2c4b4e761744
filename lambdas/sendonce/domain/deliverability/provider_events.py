"""Provider events into the ledger: SES (through EventBridge) and Resend (signed webhooks).

Each event is normalised to a ProviderEvent and applied once:

- recorded on its delivery as an annotation (`provider_events`, and `last_event` when it is
  the most advanced yet: event_order.py), deduplicated on the event's id (svix-id for
  Resend; messageId + type + feedback id for SES), never moving the delivery's state; except a provider 'sent' event for a delivery whose outcome
  is unknown, which resolves it to sent: the provider says it accepted the email.
- hard bounces and complaints put the address on the suppression list.
- complaints and hard bounces are counted per campaign, and a campaign whose complaint or
  hard-bounce rate passes its threshold pauses itself (the brakes).

Effects that are idempotent by themselves (suppression, resolution, the brake check) are
repeated when a duplicate arrives, so a run that stopped half-way is finished by the
provider's retry; the counted annotation is written once.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.errors import CampaignNotFoundError, IllegalTransitionError, WebhookSignatureError
from sendonce.domain.models import DeliveryState, is_valid_email
from sendonce.domain.ports import (
    AnnotationStatus,
    CampaignStore,
    EventKind,
    FeedbackCounter,
    LedgerEvents,
    ProviderEvent,
    SuppressionReason,
    Suppressions,
    WebhookVerifier,
)

logger = logging.getLogger(__name__)

COMPLAINT_BRAKE = "sendonce (complaint brake)"
BOUNCE_BRAKE = "sendonce (bounce brake)"

# SES event publishing: the eventType inside `detail` (also what SNS and Firehose carry)
# and EventBridge's detail-type for the same events.
SES_EVENT_TYPES = {
    "Send": EventKind.SENT,
    "Delivery": EventKind.DELIVERED,
    "DeliveryDelay": EventKind.DELIVERY_DELAYED,
    "Bounce": EventKind.BOUNCED,
    "Complaint": EventKind.COMPLAINED,
    "Reject": EventKind.REJECTED,
    "Rendering Failure": EventKind.FAILED,
}
SES_DETAIL_TYPES = {
    "Email Sent": "Send",
    "Email Delivered": "Delivery",
    "Email Delivery Delayed": "DeliveryDelay",
    "Email Bounced": "Bounce",
    "Email Complaint Received": "Complaint",
    "Email Rejected": "Reject",
    "Email Rendering Failed": "Rendering Failure",
}
RESEND_TYPES = {
    "email.sent": EventKind.SENT,
    "email.delivered": EventKind.DELIVERED,
    "email.delivery_delayed": EventKind.DELIVERY_DELAYED,
    "email.bounced": EventKind.BOUNCED,
    "email.complained": EventKind.COMPLAINED,
    "email.failed": EventKind.FAILED,
    "email.suppressed": EventKind.PROVIDER_SUPPRESSED,
}


class InvalidEventError(ValueError):
    """A payload that is not a provider event we can read (acknowledged and ignored)."""


def _first(value: Any) -> str | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) and value else None


def _short(*parts: Any) -> str | None:
    text = " ".join(str(p) for p in parts if p)
    return text[:200] or None


def _event_id(prefix: str, *parts: Any) -> str:
    return f"{prefix}:" + hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:32]


def parse_ses_event(event: Mapping[str, Any]) -> ProviderEvent | None:
    """An SES event as EventBridge delivers it (`detail` is SES's event record); None when it
    is not a sending event we record (opens, clicks, subscriptions, VDM advisories)."""
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise InvalidEventError("SES event without a detail object")
    event_type = detail.get("eventType") or SES_DETAIL_TYPES.get(str(event.get("detail-type")))
    kind = SES_EVENT_TYPES.get(str(event_type))
    if kind is None:
        return None
    mail = detail.get("mail") or {}
    tags = mail.get("tags") or {}
    message_id = _first(mail.get("messageId"))
    body = (
        detail.get(
            {
                "Send": "send",
                "Delivery": "delivery",
                "DeliveryDelay": "deliveryDelay",
                "Bounce": "bounce",
                "Complaint": "complaint",
                "Reject": "reject",
                "Rendering Failure": "failure",
            }[str(event_type)]
        )
        or {}
    )
    hard = False
    reason = None
    if kind is EventKind.BOUNCED:
        recipients = [r.get("emailAddress") for r in body.get("bouncedRecipients", [])]
        hard = body.get("bounceType") == "Permanent"
        status = next((r.get("status") for r in body.get("bouncedRecipients", []) if r.get("status")), None)
        detail_text = _short(body.get("bounceType"), body.get("bounceSubType"), status)
        discriminator = body.get("feedbackId") or body.get("timestamp")
        reason = SuppressionReason.BOUNCED if hard else None
    elif kind is EventKind.COMPLAINED:
        recipients = [r.get("emailAddress") for r in body.get("complainedRecipients", [])]
        detail_text = _short(body.get("complaintFeedbackType") or "complaint", body.get("complaintSubType"))
        discriminator = body.get("feedbackId") or body.get("timestamp")
        reason = SuppressionReason.COMPLAINED
    elif kind is EventKind.DELIVERY_DELAYED:
        recipients = [r.get("emailAddress") for r in body.get("delayedRecipients", [])]
        detail_text = _short(body.get("delayType"))
        discriminator = body.get("timestamp")
    elif kind is EventKind.DELIVERED:
        recipients = list(body.get("recipients", []))
        detail_text = None  # an SMTP response can quote the address: not kept
        discriminator = body.get("timestamp")
    else:
        recipients = list(mail.get("destination", []))
        detail_text = _short(body.get("reason")) if kind is EventKind.REJECTED else None
        discriminator = event_type
    event_id = (
        _event_id("ses", message_id, event_type, discriminator) if message_id else f"eventbridge:{event.get('id')}"
    )
    return ProviderEvent(
        event_id=event_id,
        provider="ses",
        kind=kind,
        campaign_id=_first(tags.get("campaign_id")),
        recipient_id=_first(tags.get("recipient_id")),
        message_id=message_id,
        addresses=tuple(a for a in recipients if isinstance(a, str)),
        occurred_at=body.get("timestamp") or mail.get("timestamp") or event.get("time"),
        hard=hard,
        detail=detail_text,
        suppression_reason=reason,
    )


def _resend_tags(tags: Any) -> dict[str, str]:
    if isinstance(tags, dict):
        return {str(k): str(v) for k, v in tags.items()}
    if isinstance(tags, list):  # the request shape, [{name, value}], accepted too
        return {str(t.get("name")): str(t.get("value")) for t in tags if isinstance(t, dict)}
    return {}


def parse_resend_event(payload: Mapping[str, Any], svix_id: str) -> ProviderEvent | None:
    """A verified Resend webhook payload; None for event types we do not record."""
    kind = RESEND_TYPES.get(str(payload.get("type")))
    if kind is None:
        return None
    data = payload.get("data")
    if not isinstance(data, dict):
        raise InvalidEventError("Resend webhook without a data object")
    tags = _resend_tags(data.get("tags"))
    to = data.get("to") or []
    hard = False
    reason = None
    detail_text = None
    if kind is EventKind.BOUNCED:
        bounce = data.get("bounce") or {}
        hard = bounce.get("type") == "Permanent"
        reason = SuppressionReason.BOUNCED if hard else None
        detail_text = _short(bounce.get("type"), bounce.get("subType"))
    elif kind is EventKind.COMPLAINED:
        reason = SuppressionReason.COMPLAINED
        detail_text = "complaint"
    elif kind is EventKind.PROVIDER_SUPPRESSED:
        suppressed = data.get("suppressed") or {}
        kind_text = str(suppressed.get("type", "")).lower()
        reason = SuppressionReason.COMPLAINED if "complain" in kind_text else SuppressionReason.BOUNCED
        detail_text = _short(suppressed.get("type"))
    elif kind is EventKind.FAILED:
        detail_text = _short((data.get("failed") or {}).get("reason"))
    return ProviderEvent(
        event_id=f"svix:{svix_id}",
        provider="resend",
        kind=kind,
        campaign_id=tags.get("campaign_id"),
        recipient_id=tags.get("recipient_id"),
        message_id=_first(data.get("email_id")),
        addresses=tuple(a for a in (to if isinstance(to, list) else [to]) if isinstance(a, str)),
        occurred_at=_first(payload.get("created_at")),
        hard=hard,
        detail=detail_text,
        suppression_reason=reason,
    )


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


class ProviderEventService:
    def __init__(
        self,
        *,
        ledger_events: LedgerEvents,
        suppressions: Suppressions,
        campaigns: CampaignStore,
        brakes: BrakeSettings = BrakeSettings(),
        verifier: WebhookVerifier | None = None,
    ):
        self._ledger_events = ledger_events
        self._suppressions = suppressions
        self._campaigns = campaigns
        self._brakes = brakes
        self._verifier = verifier

    def handle_ses(self, event: Mapping[str, Any]) -> EventReport:
        try:
            parsed = parse_ses_event(event)
        except InvalidEventError as exc:
            logger.warning("SES event not readable; ignored", extra={"reason": str(exc)})
            return EventReport(provider="ses")
        return self.apply(parsed) if parsed else EventReport(provider="ses")

    def handle_resend_webhook(self, body: str, headers: Mapping[str, str]) -> EventReport:
        """Raises WebhookSignatureError when the webhook is not Resend's (or is stale)."""
        if self._verifier is None:
            raise WebhookSignatureError("no webhook secret configured")
        payload = self._verifier.verify(body, headers)
        svix_id = {k.lower(): v for k, v in headers.items()}.get("svix-id", "")
        try:
            parsed = parse_resend_event(payload, svix_id)
        except InvalidEventError as exc:
            logger.warning("Resend webhook not readable; ignored", extra={"reason": str(exc)})
            return EventReport(provider="resend")
        return self.apply(parsed) if parsed else EventReport(provider="resend")

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
        if event.kind is EventKind.SENT:
            if annotation.status is AnnotationStatus.APPLIED:
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

    def _check_brakes(self, campaign_id: str) -> str | None:
        feedback = self._ledger_events.feedback(campaign_id)
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
