"""Webhooks as Resend (through Svix) sends them: signed, retried with the same svix-id, and
optionally out of order and more than once; opens and clicks by the engagement rules."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sendonce_local.resend_server.engagement import (
    EngagementRule,
    clicked_link,
    engagement_events,
    parse_engagement,
)
from sendonce_local.resend_server.wire import (
    AcceptedEmail,
    _iso,
    normalise_address,
)

WEBHOOK_RETRY_DELAYS_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)  # Resend's are 5 s, 5 min, 30 min, 2 h, ...; shortened locally
WEBHOOK_WORKERS = 4
ENGAGEMENT_EVENT_TYPES = ("email.opened", "email.clicked")
WEBHOOK_EVENT_TYPES = frozenset(
    {"email.sent", "email.delivered", "email.delivery_delayed", "email.bounced", "email.complained"}
    | set(ENGAGEMENT_EVENT_TYPES)
)
CLICK_USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) sendonce-local-resend"


class WebhookEvent(NamedTuple):
    """One webhook to queue: its type, seconds after its start, the address it speaks of."""

    type: str
    delay: float
    recipient: str | None = None


def new_webhook_secret() -> str:
    """A signing secret in Resend's (Svix's) form: ``whsec_`` + base64 of random bytes."""
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def svix_signature(secret: str, msg_id: str, timestamp: int | str, body: str) -> str:
    """The ``svix-signature`` header value: ``v1,`` + base64(HMAC-SHA256(key, "{id}.{ts}.{body}"))."""
    key = base64.b64decode(secret[len("whsec_") :] if secret.startswith("whsec_") else secret)
    mac = hmac.new(key, f"{msg_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def svix_headers(secret: str, msg_id: str, body: str, timestamp: int | None = None) -> dict[str, str]:
    timestamp = int(time.time()) if timestamp is None else timestamp
    return {
        "svix-id": msg_id,
        "svix-timestamp": str(timestamp),
        "svix-signature": svix_signature(secret, msg_id, timestamp, body),
    }


@dataclass
class WebhookDelivery:
    """One webhook message; every attempt carries the same ``svix_id``."""

    svix_id: str
    type: str
    body: str
    email_id: str
    to: tuple[str, ...]
    url: str
    secret: str
    attempts: list[int] = field(default_factory=list)  # HTTP status per attempt (0: no answer)
    state: str = "pending"  # pending | delivered | failed
    next_at: float = 0.0
    held_for: str | None = None  # out of order: not sent before this svix_id was attempted
    copies_left: int = 0  # sent again this many times after a 2xx
    recipient: str | None = None  # an open, a click or an emitted event: the address it speaks of

    def to_json(self) -> dict[str, Any]:
        return {
            "svix_id": self.svix_id,
            "type": self.type,
            "email_id": self.email_id,
            "to": list(self.to),
            "recipient": self.recipient,
            "attempts": list(self.attempts),
            "state": self.state,
            "payload": json.loads(self.body),
        }


class WebhookSender:
    """The webhook half of LocalResendServer (a mixin: the state lives on the server)."""

    def set_webhook(self, url: str | None, secret: str | None = None) -> str:
        """Send webhooks for accepted emails to ``url`` (None: stop); returns the signing secret."""
        if url is not None and not re.match(r"^https?://", url):
            raise ValueError("webhook_url must be an http(s) URL")
        if secret is not None and not secret.startswith("whsec_"):
            raise ValueError("webhook_secret must start with whsec_")
        with self._lock:
            self.webhook_url = url
            if secret is not None:
                self.webhook_secret = secret
            return self.webhook_secret

    def set_webhook_retry_delays(self, delays: Iterable[float]) -> None:
        delays = tuple(float(d) for d in delays)
        if any(d < 0 for d in delays):
            raise ValueError("webhook retry delays must be >= 0")
        with self._lock:
            self._webhook_retry_delays = delays

    def set_webhook_disorder(self, *, out_of_order: bool | None = None, copies: int | None = None) -> None:
        """Deliver each email's webhooks newest first (each held back until the one after it
        was attempted) and/or each ``copies`` times with its svix-id: Svix guarantees
        neither order nor a single delivery. Applies to emails accepted from now on."""
        if out_of_order is not None and not isinstance(out_of_order, bool):
            raise ValueError("webhook_out_of_order must be true or false")
        if copies is not None and (isinstance(copies, bool) or not isinstance(copies, int) or not 1 <= copies <= 5):
            raise ValueError("webhook_copies must be an integer from 1 to 5")
        with self._lock:
            if out_of_order is not None:
                self._webhook_out_of_order = out_of_order
            if copies is not None:
                self._webhook_copies = copies

    def set_engagement(self, rules: Iterable[Mapping[str, Any] | EngagementRule] | None) -> None:
        """Opens and clicks for emails accepted from now on: an ordered list of rules
        ``{"subject_contains", "opens", "clicks", "reopens"?}`` (engagement.py); each ``to``
        address follows the first rule whose ``subject_contains`` ("*": any) is in the subject.
        None or [] clears it."""
        parsed = parse_engagement(rules)
        with self._lock:
            self._engagement = parsed

    def engagement_sent(self) -> dict[str, int]:
        """Distinct ``email.opened`` and ``email.clicked`` messages queued (copies not counted)."""
        with self._webhook_cv:
            counts = Counter(hook.type for hook in self._webhooks.values())
        return {kind: counts[kind] for kind in ENGAGEMENT_EVENT_TYPES}

    def bounce(self, addresses: Iterable[str]) -> None:
        """Emails reaching these addresses are accepted, then answered by ``email.bounced`` (Permanent)."""
        self._feedback(self._bounce, addresses)

    def complain(self, addresses: Iterable[str]) -> None:
        """Emails reaching these addresses are delivered, then answered by ``email.complained``."""
        self._feedback(self._complain, addresses)

    def clear_feedback(self) -> None:
        with self._lock:
            self._bounce.clear()
            self._complain.clear()

    def _feedback(self, target: set[str], addresses: Iterable[str]) -> None:
        if isinstance(addresses, str):
            addresses = [addresses]
        normalised = []
        for raw in addresses:
            address = normalise_address(raw)
            if address is None:
                raise ValueError(f"not an email address: {raw!r}")
            normalised.append(address)
        with self._lock:
            target.update(normalised)

    def webhook_deliveries(self) -> list[WebhookDelivery]:
        with self._webhook_cv:
            return list(self._webhooks.values())

    def wait_for_webhooks(self, timeout: float = 10.0) -> bool:
        """Block until no webhook is pending or being sent; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._webhook_cv:
            while self._webhook_pending or self._webhook_busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._webhook_cv.wait(min(remaining, 0.1))
        return True

    def redeliver(self, svix_id: str) -> None:
        """Send a delivered webhook again with the same svix-id (what Resend's replay does)."""
        with self._webhook_cv:
            hook = self._webhooks[svix_id]
            hook.state = "pending"
            hook.next_at = 0.0
            self._webhook_pending.append(hook)
            self._webhook_cv.notify_all()

    def emit_webhook(self, address: str, event_type: str) -> int:
        """Send ``event_type`` (e.g. ``email.complained``) now for every accepted email that
        reached ``address``, as a mailbox provider's late feedback would; returns how many."""
        if event_type not in WEBHOOK_EVENT_TYPES:
            raise ValueError(f"event_type must be one of {sorted(WEBHOOK_EVENT_TYPES)}")
        wanted = normalise_address(address)
        with self._lock:
            if self.webhook_url is None:
                raise ValueError("no webhook_url is set")
            records = [r for r in self._accepted if wanted in r.recipients]
            for record in records:
                self._queue_webhooks(record, [WebhookEvent(event_type, 0.0, wanted)], at=self.now())
        return len(records)

    def _enqueue_webhooks(self, record: AcceptedEmail) -> None:
        """Called under ``_lock`` when an email is accepted."""
        if self.webhook_url is None:
            return
        addresses = record.recipients
        # Spaced out as a mailbox provider's answers are (seconds to days in reality).
        events = [WebhookEvent("email.sent", 0.0)]
        if addresses & self._bounce:
            events.append(WebhookEvent("email.bounced", 0.1))
        else:
            events.append(WebhookEvent("email.delivered", 0.05))
            if addresses & self._complain:
                events.append(WebhookEvent("email.complained", 0.3))
            events.extend(WebhookEvent(*event) for event in engagement_events(record, self._engagement))
        # In time order, so that out of order (each held for the next) means newest first.
        self._queue_webhooks(record, sorted(events, key=lambda event: event.delay))

    def _queue_webhooks(self, record: AcceptedEmail, events: list[WebhookEvent], *, at: float | None = None) -> None:
        """``events``: each one's delay is from ``at`` (default: the email's acceptance) and
        gives its own ``created_at``. Called under ``_lock``."""
        url = self.webhook_url
        created = _iso(record.accepted_at)
        base = {
            "created_at": created,
            "email_id": record.id,
            "from": record.sender,
            "to": list(record.to),
            "subject": record.subject,
            "tags": {tag["name"]: tag["value"] for tag in record.tags},
        }
        hooks = []
        for kind, delay, recipient in events:
            data = dict(base)
            occurred = _iso((record.accepted_at if at is None else at) + delay)
            if kind == "email.bounced":
                data["bounce"] = {
                    "message": "The recipient's mail server permanently rejected the email.",
                    "subType": "General",
                    "type": "Permanent",
                }
            elif kind == "email.clicked":
                data["click"] = {
                    "ipAddress": "127.0.0.1",
                    "link": clicked_link(record),
                    "timestamp": occurred,
                    "userAgent": CLICK_USER_AGENT,
                }
            body = json.dumps({"type": kind, "created_at": occurred, "data": data}, separators=(",", ":"))
            hooks.append(
                WebhookDelivery(
                    svix_id=f"msg_{uuid.uuid4().hex}",
                    type=kind,
                    body=body,
                    email_id=record.id,
                    to=record.to,
                    url=url,
                    secret=self.webhook_secret,
                    next_at=time.monotonic() + delay,
                    copies_left=self._webhook_copies - 1,
                    recipient=recipient,
                )
            )
        if self._webhook_out_of_order:
            for hook, after in zip(hooks, hooks[1:], strict=False):
                hook.held_for = after.svix_id
        with self._webhook_cv:
            for hook in hooks:
                self._webhooks[hook.svix_id] = hook
                self._webhook_pending.append(hook)
            self._webhook_cv.notify_all()

    def _webhook_worker(self) -> None:
        while not self._stopping.is_set():
            with self._webhook_cv:
                now = time.monotonic()
                due = [hook for hook in self._webhook_pending if hook.next_at <= now and self._released(hook)]
                if not due:
                    upcoming = min((hook.next_at for hook in self._webhook_pending), default=now + 0.1)
                    self._webhook_cv.wait(max(0.005, min(upcoming - now, 0.1)))
                    continue
                hook = min(due, key=lambda h: h.next_at)
                self._webhook_pending.remove(hook)
                self._webhook_busy += 1
            status = self._post_webhook(hook)
            with self._webhook_cv:
                hook.attempts.append(status)
                if 200 <= status < 300 and hook.copies_left > 0:
                    hook.copies_left -= 1
                    hook.next_at = time.monotonic() + 0.05
                    self._webhook_pending.append(hook)
                elif 200 <= status < 300:
                    hook.state = "delivered"
                elif len(hook.attempts) > len(self._webhook_retry_delays):
                    hook.state = "failed"
                else:
                    hook.next_at = time.monotonic() + self._webhook_retry_delays[len(hook.attempts) - 1]
                    self._webhook_pending.append(hook)
                self._webhook_busy -= 1
                self._webhook_cv.notify_all()

    def _released(self, hook: WebhookDelivery) -> bool:
        """Under ``_webhook_cv``: whether a held-back webhook may go (the one after it was attempted)."""
        after = self._webhooks.get(hook.held_for) if hook.held_for else None
        return after is None or bool(after.attempts)

    def _post_webhook(self, hook: WebhookDelivery) -> int:
        # Signed per attempt (a fresh timestamp each time), the svix-id never changes.
        headers = {
            "content-type": "application/json",
            "user-agent": "Svix-Webhooks/1.0 (sendonce-local-resend)",
            **svix_headers(hook.secret, hook.svix_id, hook.body),
        }
        request = urllib.request.Request(hook.url, data=hook.body.encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except (urllib.error.URLError, OSError):
            return 0
