"""Resend's webhook payloads (after their Svix signature is checked) read into the domain's
ProviderEvent; the event id is the svix-id, which Resend's retries repeat."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sendonce.adapters.providers.event_fields import first, short
from sendonce.domain.deliverability.ports import EventKind, ProviderEvent, SuppressionReason
from sendonce.domain.deliverability.provider_events import InvalidEventError

RESEND_TYPES = {
    "email.sent": EventKind.SENT,
    "email.delivered": EventKind.DELIVERED,
    "email.delivery_delayed": EventKind.DELIVERY_DELAYED,
    "email.bounced": EventKind.BOUNCED,
    "email.complained": EventKind.COMPLAINED,
    "email.failed": EventKind.FAILED,
    "email.suppressed": EventKind.PROVIDER_SUPPRESSED,
    # Recorded only for a campaign that tracks them (deliverability/engagement.py).
    "email.opened": EventKind.OPENED,
    "email.clicked": EventKind.CLICKED,
}


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
        detail_text = short(bounce.get("type"), bounce.get("subType"))
    elif kind is EventKind.COMPLAINED:
        reason = SuppressionReason.COMPLAINED
        detail_text = "complaint"
    elif kind is EventKind.PROVIDER_SUPPRESSED:
        suppressed = data.get("suppressed") or {}
        kind_text = str(suppressed.get("type", "")).lower()
        reason = SuppressionReason.COMPLAINED if "complain" in kind_text else SuppressionReason.BOUNCED
        detail_text = short(suppressed.get("type"))
    elif kind is EventKind.FAILED:
        detail_text = short((data.get("failed") or {}).get("reason"))
    return ProviderEvent(
        event_id=f"svix:{svix_id}",
        provider="resend",
        kind=kind,
        campaign_id=tags.get("campaign_id"),
        recipient_id=tags.get("recipient_id"),
        message_id=first(data.get("email_id")),
        addresses=tuple(a for a in (to if isinstance(to, list) else [to]) if isinstance(a, str)),
        occurred_at=first(payload.get("created_at")),
        hard=hard,
        detail=detail_text,
        suppression_reason=reason,
    )
