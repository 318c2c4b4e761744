"""A local Resend API on loopback, faithful where sendonce depends on it.

Implements ``POST /emails`` and ``POST /emails/batch`` with Resend's auth,
validation, idempotency, rate-limit and error-body semantics, plus fault knobs
(latency, fail, stall-after-accept, reject, halt) and a record of every
accepted email so tests can count deliveries per recipient address.

With a webhook URL set it also sends Resend's webhooks for accepted emails, signed
the way Svix signs them (``email.sent``, then ``email.delivered``, or
``email.bounced`` for addresses set to bounce, and ``email.complained`` after the
delivery for addresses set to complain), retrying non-2xx answers with the same
``svix-id``; optionally out of order and more than once, as Svix may.

Run as a process with ``python -m sendonce_local.resend_server --port N``;
steer a running server over ``/_local/*`` (see docs/local-resend.md).
"""

from sendonce_local.resend_server.cli import main
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
    "LocalResendServer",
    "WebhookDelivery",
    "main",
    "new_webhook_secret",
    "normalise_address",
    "svix_headers",
    "svix_signature",
]
