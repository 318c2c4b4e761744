"""SES sending events as EventBridge delivers them, read into the domain's ProviderEvent.

The event id is messageId + type + feedback id (or timestamp): EventBridge's retries repeat it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sendonce.adapters.providers.event_fields import event_id as stable_id
from sendonce.adapters.providers.event_fields import first, short
from sendonce.domain.deliverability.ports import EventKind, ProviderEvent, SuppressionReason
from sendonce.domain.deliverability.provider_events import InvalidEventError

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
    # Recorded only for a campaign that tracks them (deliverability/engagement.py).
    "Open": EventKind.OPENED,
    "Click": EventKind.CLICKED,
}
SES_DETAIL_TYPES = {
    "Email Sent": "Send",
    "Email Delivered": "Delivery",
    "Email Delivery Delayed": "DeliveryDelay",
    "Email Bounced": "Bounce",
    "Email Complaint Received": "Complaint",
    "Email Rejected": "Reject",
    "Email Rendering Failed": "Rendering Failure",
    "Email Opened": "Open",
    "Email Clicked": "Click",
}


def parse_ses_event(event: Mapping[str, Any]) -> ProviderEvent | None:
    """An SES event as EventBridge delivers it (`detail` is SES's event record); None when it
    is not an event we record (subscriptions, VDM advisories)."""
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise InvalidEventError("SES event without a detail object")
    event_type = detail.get("eventType") or SES_DETAIL_TYPES.get(str(event.get("detail-type")))
    kind = SES_EVENT_TYPES.get(str(event_type))
    if kind is None:
        return None
    mail = detail.get("mail") or {}
    tags = mail.get("tags") or {}
    message_id = first(mail.get("messageId"))
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
                "Open": "open",
                "Click": "click",
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
        detail_text = short(body.get("bounceType"), body.get("bounceSubType"), status)
        discriminator = body.get("feedbackId") or body.get("timestamp")
        reason = SuppressionReason.BOUNCED if hard else None
    elif kind is EventKind.COMPLAINED:
        recipients = [r.get("emailAddress") for r in body.get("complainedRecipients", [])]
        detail_text = short(body.get("complaintFeedbackType") or "complaint", body.get("complaintSubType"))
        discriminator = body.get("feedbackId") or body.get("timestamp")
        reason = SuppressionReason.COMPLAINED
    elif kind is EventKind.DELIVERY_DELAYED:
        recipients = [r.get("emailAddress") for r in body.get("delayedRecipients", [])]
        # The diagnostic's codes only (4.7.28, TSS04): its text can quote the address.
        codes = [_codes(r.get("diagnosticCode")) for r in body.get("delayedRecipients", [])]
        detail_text = short(body.get("delayType"), next((c for c in codes if c), None))
        discriminator = body.get("timestamp")
    elif kind in (EventKind.OPENED, EventKind.CLICKED):
        # Neither the user agent nor the IP address nor the link is kept: only that it happened.
        recipients = list(mail.get("destination", []))
        detail_text = None
        discriminator = body.get("timestamp")
    elif kind is EventKind.DELIVERED:
        recipients = list(body.get("recipients", []))
        detail_text = None  # an SMTP response can quote the address: not kept
        discriminator = body.get("timestamp")
    else:
        recipients = list(mail.get("destination", []))
        detail_text = short(body.get("reason")) if kind is EventKind.REJECTED else None
        discriminator = event_type
    event_id = (
        stable_id("ses", message_id, event_type, discriminator) if message_id else f"eventbridge:{event.get('id')}"
    )
    return ProviderEvent(
        event_id=event_id,
        provider="ses",
        kind=kind,
        campaign_id=first(tags.get("campaign_id")),
        recipient_id=first(tags.get("recipient_id")),
        message_id=message_id,
        addresses=tuple(a for a in recipients if isinstance(a, str)),
        occurred_at=body.get("timestamp") or mail.get("timestamp") or event.get("time"),
        hard=hard,
        detail=detail_text,
        suppression_reason=reason,
    )


_STATUS_CODE = re.compile(r"\b[45]\.\d{1,3}\.\d{1,3}\b|\bTSS0\d\b")


def _codes(diagnostic: Any) -> str | None:
    """The status codes in an SMTP diagnostic (4.7.28, TSS04), without its text."""
    if not isinstance(diagnostic, str):
        return None
    found = _STATUS_CODE.findall(diagnostic)
    return " ".join(dict.fromkeys(found)) or None
