"""The local Resend API on loopback (see server.py and docs/local-resend.md); the names other code imports."""

from sendonce_local.resend_server.cli import main
from sendonce_local.resend_server.engagement import EngagementRule
from sendonce_local.resend_server.server import LocalResendServer
from sendonce_local.resend_server.webhooks import WebhookDelivery, new_webhook_secret, svix_headers, svix_signature
from sendonce_local.resend_server.wire import (
    DEFAULT_TEAM_RATE_LIMIT,
    IDEMPOTENCY_TTL_SECONDS,
    MAX_BATCH_EMAILS,
    AcceptedEmail,
    normalise_address,
)

__all__ = [
    "DEFAULT_TEAM_RATE_LIMIT",
    "IDEMPOTENCY_TTL_SECONDS",
    "MAX_BATCH_EMAILS",
    "AcceptedEmail",
    "EngagementRule",
    "LocalResendServer",
    "WebhookDelivery",
    "main",
    "new_webhook_secret",
    "normalise_address",
    "svix_headers",
    "svix_signature",
]
