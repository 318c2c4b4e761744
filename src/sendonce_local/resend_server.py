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

from __future__ import annotations

import argparse
import base64
import collections
import datetime as dt
import hashlib
import hmac
import json
import math
import os
import random
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

MAX_BATCH_EMAILS = 100
MAX_RECIPIENTS_PER_FIELD = 50
MAX_IDEMPOTENCY_KEY_CHARS = 256
IDEMPOTENCY_TTL_SECONDS = 24 * 60 * 60
RATE_LIMIT_WINDOW_SECONDS = 1.0
# Resend's documented default team limit (its rate-limit page, checked 2026-12; the API
# reference's intro still says 2). Every answer to a send carries ratelimit-limit,
# ratelimit-remaining and ratelimit-reset; a 429 also retry-after.
DEFAULT_TEAM_RATE_LIMIT = 5
HALT_ERRORS: dict[str, tuple[int, str]] = {
    "suspended_api_key": (403, "This API key has been suspended."),
    "daily_quota_exceeded": (429, "You have reached your daily email sending quota."),
    "monthly_quota_exceeded": (429, "You have reached your monthly email sending quota."),
}
FAIL_ERRORS: dict[int, tuple[str, str]] = {
    500: ("application_error", "An unexpected error occurred."),
    503: ("service_unavailable", "The service is temporarily unavailable. Try again later."),
}

_ADDRESS = re.compile(r"[^@\s<>\"]+@[^@\s<>\"]+\.[^@\s<>\"]+")
_NAMED_ADDRESS = re.compile(r"[^<>]*<\s*([^<>]+?)\s*>")
_TAG_PART = re.compile(r"[A-Za-z0-9_-]{1,256}")
_ADDRESS_FORMAT = "The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
WEBHOOK_RETRY_DELAYS_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)  # Resend's are 5 s, 5 min, 30 min, 2 h, ...; shortened locally
WEBHOOK_WORKERS = 4
WEBHOOK_EVENT_TYPES = frozenset(
    {"email.sent", "email.delivered", "email.delivery_delayed", "email.bounced", "email.complained"}
)


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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

    def to_json(self) -> dict[str, Any]:
        return {
            "svix_id": self.svix_id,
            "type": self.type,
            "email_id": self.email_id,
            "to": list(self.to),
            "attempts": list(self.attempts),
            "state": self.state,
            "payload": json.loads(self.body),
        }


@dataclass(frozen=True)
class AcceptedEmail:
    """One email the server accepted, as the provider would have sent it."""

    id: str
    sender: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    bcc: tuple[str, ...]
    reply_to: tuple[str, ...]
    subject: str
    html: str | None
    text: str | None
    headers: dict[str, str]
    tags: list[dict[str, str]]
    idempotency_key: str | None
    accepted_at: float
    endpoint: str
    batch_index: int | None

    @property
    def recipients(self) -> frozenset[str]:
        """Normalised addresses (lower-case, display name stripped) this email reaches."""
        return frozenset(
            address for raw in (*self.to, *self.cc, *self.bcc) if (address := normalise_address(raw)) is not None
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "from": self.sender,
            "to": list(self.to),
            "cc": list(self.cc),
            "bcc": list(self.bcc),
            "reply_to": list(self.reply_to),
            "subject": self.subject,
            "html": self.html,
            "text": self.text,
            "headers": dict(self.headers),
            "tags": [dict(tag) for tag in self.tags],
            "idempotency_key": self.idempotency_key,
            "accepted_at": self.accepted_at,
            "endpoint": self.endpoint,
            "batch_index": self.batch_index,
        }


def normalise_address(raw: str) -> str | None:
    """``"Ann <Ann@Example.com>"`` -> ``"ann@example.com"``; None when not an address."""
    candidate = raw.strip()
    named = _NAMED_ADDRESS.fullmatch(candidate)
    if named:
        candidate = named.group(1)
    if not _ADDRESS.fullmatch(candidate):
        return None
    return candidate.lower()


@dataclass
class _Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode()


class _ApiError(Exception):
    def __init__(self, status: int, name: str, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.name = name
        self.message = message
        self.headers = dict(headers or {})

    def reply(self) -> _Reply:
        body = {"statusCode": self.status, "name": self.name, "message": self.message}
        return _Reply(self.status, body, dict(self.headers))


@dataclass(frozen=True)
class _Rejection:
    status: int
    name: str
    message: str | None


@dataclass
class _IdempotencyEntry:
    fingerprint: str
    created_at: float
    reply: _Reply | None = None

    @property
    def in_flight(self) -> bool:
        return self.reply is None


@dataclass(frozen=True)
class _EmailProblem:
    status: int
    name: str
    message: str


class LocalResendServer:
    """Resend's email endpoints on a loopback port, with fault knobs and a delivery record.

    ``clock`` is a public attribute (seconds, like ``time.time``): replace it to move
    time for idempotency-key expiry, the rate-limit window, the daily quota and record
    timestamps. Latency and stalls always sleep in real time.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        api_key: str | None = None,
        rate_limit: int | None = DEFAULT_TEAM_RATE_LIMIT,
        latency_ms: tuple[float, float] | None = None,
        daily_quota: int | None = None,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
        verbose: bool = False,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        webhook_out_of_order: bool = False,
        webhook_copies: int = 1,
    ):
        self.host = host
        self.requested_port = port
        self.api_key = api_key
        self.clock = clock
        self.verbose = verbose
        self._initial = {
            "rate_limit": rate_limit,
            "latency_ms": latency_ms,
            "daily_quota": daily_quota,
            "webhook_url": webhook_url,
            "webhook_secret": webhook_secret,
            "webhook_out_of_order": webhook_out_of_order,
            "webhook_copies": webhook_copies,
        }
        self._webhook_cv = threading.Condition()
        self._webhook_threads: list[threading.Thread] = []
        self.webhook_url: str | None = None
        self.webhook_secret: str = webhook_secret or new_webhook_secret()
        self._webhook_retry_delays: tuple[float, ...] = WEBHOOK_RETRY_DELAYS_SECONDS
        self._webhook_out_of_order = False
        self._webhook_copies = 1
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._clear_state()
        self.set_rate_limit(rate_limit)
        self.set_latency(*(latency_ms or (0, 0)))
        self.set_daily_quota(daily_quota)
        self.set_webhook(webhook_url, webhook_secret)
        self.set_webhook_disorder(out_of_order=webhook_out_of_order, copies=webhook_copies)

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> LocalResendServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HttpServer((self.host, self.requested_port), _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"local-resend:{self.port}",
            daemon=True,
        )
        self._thread.start()
        self._webhook_threads = [
            threading.Thread(target=self._webhook_worker, name=f"local-resend-webhooks-{i}", daemon=True)
            for i in range(WEBHOOK_WORKERS)
        ]
        for thread in self._webhook_threads:
            thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()  # wakes handlers sleeping in latency or a stall
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._webhook_cv:
            self._webhook_cv.notify_all()
        for thread in self._webhook_threads:
            thread.join(timeout=5)
        self._webhook_threads = []
        self._httpd = None
        self._thread = None

    def __enter__(self) -> LocalResendServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- configuration and faults --------------------------------------------------

    def now(self) -> float:
        return self.clock() + self._clock_offset

    def advance_clock(self, seconds: float) -> float:
        """Move server time forward without replacing ``clock`` (also over HTTP)."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        with self._lock:
            self._clock_offset += seconds
        return self.now()

    def set_rate_limit(self, requests_per_second: int | None) -> None:
        if requests_per_second is not None and (
            isinstance(requests_per_second, bool) or not isinstance(requests_per_second, int) or requests_per_second < 1
        ):
            raise ValueError("rate_limit must be a positive integer or None")
        with self._lock:
            self._rate_limit = requests_per_second
            self._rate_window.clear()

    def set_latency(self, min_ms: float, max_ms: float | None = None) -> None:
        max_ms = min_ms if max_ms is None else max_ms
        if min_ms < 0 or max_ms < min_ms:
            raise ValueError("latency needs 0 <= min_ms <= max_ms")
        with self._lock:
            self._latency_ms = (float(min_ms), float(max_ms))

    def set_daily_quota(self, emails: int | None) -> None:
        """Accept at most ``emails`` emails per trailing 24 h of server time; then 429."""
        if emails is not None and (isinstance(emails, bool) or not isinstance(emails, int) or emails < 0):
            raise ValueError("daily_quota must be a non-negative integer or None")
        with self._lock:
            self._daily_quota = emails

    def fail_next(self, n: int = 1, status: int = 500) -> None:
        """The next ``n`` send requests fail with 500/503 before anything is accepted."""
        if status not in FAIL_ERRORS:
            raise ValueError(f"status must be one of {sorted(FAIL_ERRORS)}")
        if n < 0:
            raise ValueError("n must be >= 0")
        with self._lock:
            self._fail_queue.extend([status] * n)

    def stall_next(self, n: int = 1, seconds: float = 5.0) -> None:
        """The next ``n`` accepted send requests are recorded and stored, then answered late."""
        if n < 0 or seconds < 0:
            raise ValueError("n and seconds must be >= 0")
        with self._lock:
            self._stall_queue.extend([float(seconds)] * n)

    def reject(
        self,
        addresses: Iterable[str],
        status: int = 422,
        name: str = "validation_error",
        message: str | None = None,
    ) -> None:
        """Refuse every email that reaches one of ``addresses`` (to, cc or bcc), permanently."""
        if not 400 <= status <= 499:
            raise ValueError("a rejection status must be 4xx")
        if isinstance(addresses, str):
            addresses = [addresses]
        rejection = _Rejection(status, name, message)
        with self._lock:
            for raw in addresses:
                address = normalise_address(raw)
                if address is None:
                    raise ValueError(f"not an email address: {raw!r}")
                self._rejections[address] = rejection

    def clear_rejections(self) -> None:
        with self._lock:
            self._rejections.clear()

    def halt(self, name: str = "suspended_api_key") -> None:
        """Every send request fails with a halt-class error until ``resume()``."""
        if name not in HALT_ERRORS:
            raise ValueError(f"halt must be one of {sorted(HALT_ERRORS)}")
        with self._lock:
            self._halt = name

    def suspend_key(self) -> None:
        self.halt("suspended_api_key")

    def exhaust_daily_quota(self) -> None:
        self.halt("daily_quota_exceeded")

    def resume(self) -> None:
        with self._lock:
            self._halt = None

    def reset(self) -> None:
        """Forget records, idempotency keys and faults; restore the constructor's settings."""
        with self._lock:
            self._clear_state()
        self.set_rate_limit(self._initial["rate_limit"])
        self.set_latency(*(self._initial["latency_ms"] or (0, 0)))
        self.set_daily_quota(self._initial["daily_quota"])
        self.set_webhook(self._initial["webhook_url"], self._initial["webhook_secret"] or self.webhook_secret)
        self.set_webhook_disorder(
            out_of_order=self._initial["webhook_out_of_order"], copies=self._initial["webhook_copies"]
        )

    def faults(self) -> dict[str, Any]:
        with self._lock:
            return {
                "latency_ms": list(self._latency_ms),
                "rate_limit": self._rate_limit,
                "daily_quota": self._daily_quota,
                "fail_next": list(self._fail_queue),
                "stall_next": list(self._stall_queue),
                "reject": {
                    address: {"status": r.status, "name": r.name} for address, r in sorted(self._rejections.items())
                },
                "halt": self._halt,
                "webhook_url": self.webhook_url,
                "bounce": sorted(self._bounce),
                "complain": sorted(self._complain),
                "webhook_retry_delays": list(self._webhook_retry_delays),
                "webhook_out_of_order": self._webhook_out_of_order,
                "webhook_copies": self._webhook_copies,
            }

    def apply_faults(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a ``POST /_local/faults`` body; unknown keys are refused."""
        known = {
            "latency_ms",
            "rate_limit",
            "daily_quota",
            "fail_next",
            "stall_next",
            "reject",
            "clear_rejections",
            "halt",
            "webhook_url",
            "webhook_secret",
            "bounce",
            "complain",
            "clear_feedback",
            "webhook_retry_delays",
            "webhook_out_of_order",
            "webhook_copies",
        }
        unknown = set(spec) - known
        if unknown:
            raise ValueError(f"unknown fault keys: {sorted(unknown)}; known: {sorted(known)}")
        if "latency_ms" in spec:
            latency = spec["latency_ms"]
            if latency is None:
                self.set_latency(0, 0)
            elif isinstance(latency, (int, float)):
                self.set_latency(latency, latency)
            else:
                self.set_latency(*latency)
        if "rate_limit" in spec:
            self.set_rate_limit(spec["rate_limit"])
        if "daily_quota" in spec:
            self.set_daily_quota(spec["daily_quota"])
        if "fail_next" in spec:
            fail = spec["fail_next"]
            self.fail_next(int(fail.get("count", 1)), int(fail.get("status", 500)))
        if "stall_next" in spec:
            stall = spec["stall_next"]
            self.stall_next(int(stall.get("count", 1)), float(stall["seconds"]))
        if spec.get("clear_rejections"):
            self.clear_rejections()
        if "reject" in spec:
            reject = spec["reject"]
            self.reject(
                reject["addresses"],
                int(reject.get("status", 422)),
                str(reject.get("name", "validation_error")),
                reject.get("message"),
            )
        if "halt" in spec:
            if spec["halt"] is None:
                self.resume()
            else:
                self.halt(str(spec["halt"]))
        if "webhook_url" in spec or "webhook_secret" in spec:
            self.set_webhook(spec.get("webhook_url", self.webhook_url), spec.get("webhook_secret"))
        if spec.get("clear_feedback"):
            self.clear_feedback()
        if "bounce" in spec:
            self.bounce(spec["bounce"])
        if "complain" in spec:
            self.complain(spec["complain"])
        if "webhook_retry_delays" in spec:
            self.set_webhook_retry_delays(spec["webhook_retry_delays"])
        if "webhook_out_of_order" in spec or "webhook_copies" in spec:
            self.set_webhook_disorder(out_of_order=spec.get("webhook_out_of_order"), copies=spec.get("webhook_copies"))
        return self.faults()

    # -- webhooks --------------------------------------------------------------------

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
                self._queue_webhooks(record, [(event_type, 0.0)], at=self.now())
        return len(records)

    def _enqueue_webhooks(self, record: AcceptedEmail) -> None:
        """Called under ``_lock`` when an email is accepted."""
        if self.webhook_url is None:
            return
        addresses = record.recipients
        # Spaced out as a mailbox provider's answers are (seconds to days in reality).
        events: list[tuple[str, float]] = [("email.sent", 0.0)]
        if addresses & self._bounce:
            events.append(("email.bounced", 0.1))
        else:
            events.append(("email.delivered", 0.05))
            if addresses & self._complain:
                events.append(("email.complained", 0.3))
        self._queue_webhooks(record, events)

    def _queue_webhooks(
        self, record: AcceptedEmail, events: list[tuple[str, float]], *, at: float | None = None
    ) -> None:
        """``events``: (type, seconds after ``at``, default the email's acceptance), which is
        also each event's own ``created_at``. Called under ``_lock``."""
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
        for kind, delay in events:
            data = dict(base)
            if kind == "email.bounced":
                data["bounce"] = {
                    "message": "The recipient's mail server permanently rejected the email.",
                    "subType": "General",
                    "type": "Permanent",
                }
            occurred = _iso((record.accepted_at if at is None else at) + delay)
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

    # -- what happened -------------------------------------------------------------

    def accepted(self) -> list[AcceptedEmail]:
        with self._lock:
            return list(self._accepted)

    def deliveries(self) -> dict[str, int]:
        """How many accepted emails reached each normalised recipient address."""
        counts: collections.Counter[str] = collections.Counter()
        for email in self.accepted():
            counts.update(email.recipients)
        return dict(counts)

    def in_flight(self) -> int:
        """Idempotency keys whose first request is still being processed."""
        with self._lock:
            return sum(1 for entry in self._keys.values() if entry.in_flight)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self._requests,
                "emails_accepted": len(self._accepted),
                "replays": self._replays,
                "errors": dict(self._errors),
            }

    # -- request handling ----------------------------------------------------------

    def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """Answer one HTTP request: ``(status, headers, body)``. Header names are case-insensitive."""
        lowered = {k.lower(): v for k, v in headers.items()}
        path = urlsplit(path).path.rstrip("/") or "/"
        if path.startswith("/_local/"):
            reply = self._handle_control(method, path, body)
        elif path in ("/emails", "/emails/batch"):
            if method != "POST":
                reply = _ApiError(405, "method_not_allowed", "Method is not allowed for the requested path.").reply()
            else:
                reply = self._handle_send(path, lowered, body)
        else:
            reply = _ApiError(404, "not_found", "The requested endpoint does not exist.").reply()
        headers_out = {"content-type": "application/json", **reply.headers}
        return reply.status, headers_out, reply.encoded()

    def _handle_send(self, path: str, headers: Mapping[str, str], body: bytes) -> _Reply:
        with self._lock:
            self._requests += 1
        rate_headers: dict[str, str] = {}
        try:
            self._authorise(headers)
            rate_headers = self._take_rate_slot()
            reply = self._send(path, headers, body)
        except _ApiError as error:
            with self._lock:
                self._errors[error.name] += 1
            reply = error.reply()
        reply.headers = {**rate_headers, **reply.headers}
        return reply

    def _authorise(self, headers: Mapping[str, str]) -> None:
        if not headers.get("user-agent"):
            raise _ApiError(403, "validation_error", "Requests must include a `User-Agent` header.")
        scheme, _, key = headers.get("authorization", "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise _ApiError(
                401,
                "missing_api_key",
                "Missing API key in the authorization header. Include the following header "
                "Authorization: Bearer YOUR_API_KEY in the request.",
            )
        valid = key == self.api_key if self.api_key is not None else key.startswith("re_")
        if not valid:
            raise _ApiError(403, "invalid_api_key", "API key is invalid")
        with self._lock:
            halt = self._halt
        if halt is not None:
            status, message = HALT_ERRORS[halt]
            raise _ApiError(status, halt, message)

    def _take_rate_slot(self) -> dict[str, str]:
        with self._lock:
            limit = self._rate_limit
            if limit is None:
                return {}
            now = self.now()
            window = self._rate_window
            while window and window[0] <= now - RATE_LIMIT_WINDOW_SECONDS:
                window.popleft()
            allowed = len(window) < limit
            if allowed:
                window.append(now)
            reset = max(1, math.ceil(window[0] + RATE_LIMIT_WINDOW_SECONDS - now)) if window else 1
            rate_headers = {
                "ratelimit-limit": str(limit),
                "ratelimit-remaining": str(max(0, limit - len(window))),
                "ratelimit-reset": str(reset),
            }
        if not allowed:
            raise _ApiError(
                429,
                "rate_limit_exceeded",
                f"Too many requests. You can only make {limit} requests per second. "
                "See rate limit response headers for more information.",
                {**rate_headers, "retry-after": str(reset)},
            )
        return rate_headers

    def _send(self, path: str, headers: Mapping[str, str], body: bytes) -> _Reply:
        key = headers.get("idempotency-key")
        if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY_CHARS:
            raise _ApiError(400, "invalid_idempotency_key", "The key must be between 1-256 chars.")
        with self._lock:
            failure = self._fail_queue.popleft() if self._fail_queue else None
        if failure is not None:
            name, message = FAIL_ERRORS[failure]
            raise _ApiError(failure, name, message)

        try:
            payload = json.loads(body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _ApiError(400, "validation_error", "The request body is not valid JSON.") from None
        batch = path == "/emails/batch"
        mode = headers.get("x-batch-validation", "strict").strip().lower() if batch else "strict"
        if mode not in ("strict", "permissive"):
            raise _ApiError(422, "validation_error", "`x-batch-validation` must be `strict` or `permissive`.")
        if batch:
            if not isinstance(payload, list):
                raise _ApiError(422, "validation_error", "The batch body must be an array of emails.")
            if not payload:
                raise _ApiError(422, "validation_error", "The batch must contain at least one email.")
            if len(payload) > MAX_BATCH_EMAILS:
                raise _ApiError(
                    422, "validation_error", f"Too many emails in the batch: the maximum is {MAX_BATCH_EMAILS}."
                )
        elif not isinstance(payload, dict):
            raise _ApiError(422, "validation_error", "The request body must be an email object.")
        entries: list[Any] = payload if batch else [payload]

        fingerprint = hashlib.sha256(
            path.encode()
            + b"\n"
            + json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        ).hexdigest()

        with self._lock:
            now = self.now()
            if key is not None:
                replay = self._lookup(key, fingerprint, now)
                if replay is not None:
                    self._replays += 1
                    return _Reply(replay.status, replay.body, {**replay.headers, "idempotent-replayed": "true"})
            problems = [self._problem(entry, in_batch=batch) for entry in entries]
            if mode == "strict":
                for index, problem in enumerate(problems):
                    if problem is not None:
                        message = f"emails[{index}]: {problem.message}" if batch else problem.message
                        raise _ApiError(problem.status, problem.name, message)
            claim: _IdempotencyEntry | None = None
            if key is not None:
                self._sweep_expired_keys(now)
                claim = self._keys[key] = _IdempotencyEntry(fingerprint, created_at=now)

        try:
            self._sleep_latency()
            with self._lock:
                reply = self._accept(path, entries, problems, key, batch)
                if claim is not None:
                    claim.reply = reply
                stall = self._stall_queue.popleft() if self._stall_queue else 0.0
        except BaseException:
            if key is not None:
                with self._lock:
                    # Only non-2xx outcomes get here, and Resend does not store those.
                    if self._keys.get(key) is claim:
                        del self._keys[key]
            raise
        if stall:
            self._stopping.wait(stall)
        return _Reply(reply.status, reply.body, dict(reply.headers))

    def _lookup(self, key: str, fingerprint: str, now: float) -> _Reply | None:
        entry = self._keys.get(key)
        if entry is not None and now - entry.created_at >= IDEMPOTENCY_TTL_SECONDS:
            del self._keys[key]
            entry = None
        if entry is None:
            return None
        if entry.in_flight:
            raise _ApiError(
                409,
                "concurrent_idempotent_requests",
                "Same idempotency key used while original request is still in progress. Try the request again later.",
            )
        if entry.fingerprint != fingerprint:
            raise _ApiError(
                409,
                "invalid_idempotent_request",
                "Same idempotency key used with a different request payload. Change your idempotency key or payload.",
            )
        return entry.reply

    def _accept(
        self,
        path: str,
        entries: list[Any],
        problems: list[_EmailProblem | None],
        key: str | None,
        batch: bool,
    ) -> _Reply:
        now = self.now()
        valid = [i for i, problem in enumerate(problems) if problem is None]
        if self._daily_quota is not None:
            sent_today = sum(1 for e in self._accepted if now - e.accepted_at < IDEMPOTENCY_TTL_SECONDS)
            if sent_today + len(valid) > self._daily_quota:
                status, message = HALT_ERRORS["daily_quota_exceeded"]
                raise _ApiError(status, "daily_quota_exceeded", message)
        data = []
        for index in valid:
            record = _record(entries[index], key, now, path, index if batch else None)
            self._accepted.append(record)
            self._enqueue_webhooks(record)
            data.append({"id": record.id})
        if not batch:
            return _Reply(200, data[0])
        body: dict[str, Any] = {"data": data}
        errors = [
            {"index": index, "message": problem.message}
            for index, problem in enumerate(problems)
            if problem is not None
        ]
        if errors:
            body["errors"] = errors
        return _Reply(200, body)

    def _problem(self, email: Any, *, in_batch: bool) -> _EmailProblem | None:
        problem = _validate_email(email, in_batch=in_batch)
        if problem is not None:
            return problem
        for field_name in ("to", "cc", "bcc"):
            for raw in _as_list(email.get(field_name)):
                address = normalise_address(raw)
                rejection = self._rejections.get(address) if address else None
                if rejection is not None:
                    message = rejection.message or f"The recipient `{raw}` was rejected."
                    return _EmailProblem(rejection.status, rejection.name, message)
        return None

    def _sleep_latency(self) -> None:
        with self._lock:
            low, high = self._latency_ms
            delay_ms = self._rng.uniform(low, high) if high > 0 else 0.0
        if delay_ms > 0:
            self._stopping.wait(delay_ms / 1000)

    def _sweep_expired_keys(self, now: float) -> None:
        if now - self._last_sweep < 60:
            return
        self._last_sweep = now
        expired = [
            key
            for key, entry in self._keys.items()
            if not entry.in_flight and now - entry.created_at >= IDEMPOTENCY_TTL_SECONDS
        ]
        for key in expired:
            del self._keys[key]

    def _clear_state(self) -> None:
        self._bounce: set[str] = set()
        self._complain: set[str] = set()
        with self._webhook_cv:
            self._webhooks: dict[str, WebhookDelivery] = {}
            self._webhook_pending: list[WebhookDelivery] = []
            # Not reset: a worker may be mid-post; it decrements what it incremented.
            self._webhook_busy: int = getattr(self, "_webhook_busy", 0)
        self._accepted: list[AcceptedEmail] = []
        self._keys: dict[str, _IdempotencyEntry] = {}
        self._fail_queue: collections.deque[int] = collections.deque()
        self._stall_queue: collections.deque[float] = collections.deque()
        self._rejections: dict[str, _Rejection] = {}
        self._halt: str | None = None
        self._rate_window: collections.deque[float] = collections.deque()
        self._requests = 0
        self._replays = 0
        self._errors: collections.Counter[str] = collections.Counter()
        self._clock_offset = 0.0
        self._last_sweep = float("-inf")

    # -- control endpoints ---------------------------------------------------------

    def _handle_control(self, method: str, path: str, body: bytes) -> _Reply:
        routes: dict[tuple[str, str], Callable[[Any], Any]] = {
            ("GET", "/_local/health"): lambda _: {
                "status": "ok",
                "url": self.url if self._httpd else None,
                "emails_accepted": len(self.accepted()),
                "in_flight": self.in_flight(),
            },
            ("GET", "/_local/deliveries"): lambda _: {
                "deliveries": self.deliveries(),
                "emails_accepted": len(self.accepted()),
            },
            ("GET", "/_local/accepted"): lambda _: {"accepted": [e.to_json() for e in self.accepted()]},
            ("GET", "/_local/stats"): lambda _: self.stats(),
            ("GET", "/_local/faults"): lambda _: self.faults(),
            ("POST", "/_local/faults"): lambda spec: self.apply_faults(_require_object(spec)),
            ("POST", "/_local/reset"): lambda _: (self.reset(), {"status": "reset"})[1],
            ("GET", "/_local/webhooks"): lambda _: {"webhooks": [h.to_json() for h in self.webhook_deliveries()]},
            ("POST", "/_local/webhooks/emit"): lambda spec: {
                "queued": self.emit_webhook(str(_require_object(spec)["address"]), str(spec["type"]))
            },
            ("POST", "/_local/webhooks/redeliver"): lambda spec: (
                self.redeliver(str(_require_object(spec)["svix_id"])),
                {"status": "queued"},
            )[1],
            ("POST", "/_local/clock"): lambda spec: {
                "now": self.advance_clock(float(_require_object(spec).get("advance_seconds", 0)))
            },
        }
        route = routes.get((method, path))
        if route is None:
            if any(known_path == path for _, known_path in routes):
                return _ApiError(405, "method_not_allowed", f"{method} is not allowed on {path}.").reply()
            return _ApiError(404, "not_found", f"No control endpoint {path}.").reply()
        try:
            spec = json.loads(body) if body.strip() else {}
            return _Reply(200, route(spec))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            return _ApiError(400, "validation_error", str(error)).reply()


def _require_object(spec: Any) -> Mapping[str, Any]:
    if not isinstance(spec, dict):
        raise ValueError("the body must be a JSON object")
    return spec


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _validate_email(email: Any, *, in_batch: bool) -> _EmailProblem | None:
    def missing(field_name: str) -> _EmailProblem:
        return _EmailProblem(422, "missing_required_field", f"Missing `{field_name}` field.")

    def invalid(message: str) -> _EmailProblem:
        return _EmailProblem(422, "validation_error", message)

    if not isinstance(email, dict):
        return invalid("Each email must be a JSON object.")
    for required in ("from", "to", "subject"):
        if email.get(required) in (None, "", []):
            return missing(required)
    if not isinstance(email["from"], str) or normalise_address(email["from"]) is None:
        return invalid(f"Invalid `from` field. {_ADDRESS_FORMAT}")
    for field_name in ("to", "cc", "bcc", "reply_to"):
        value = email.get(field_name)
        if value is None:
            continue
        addresses = _as_list(value)
        if len(addresses) > MAX_RECIPIENTS_PER_FIELD:
            return invalid(f"Too many recipients in `{field_name}`: the maximum is {MAX_RECIPIENTS_PER_FIELD}.")
        if not all(isinstance(a, str) and normalise_address(a) is not None for a in addresses):
            return invalid(f"Invalid `{field_name}` field. {_ADDRESS_FORMAT}")
    if not isinstance(email["subject"], str):
        return invalid("The `subject` field must be a string.")
    if not any(email.get(body) for body in ("html", "text", "react", "template")):
        return missing("html` or `text")
    for body in ("html", "text"):
        if body in email and email[body] is not None and not isinstance(email[body], str):
            return invalid(f"The `{body}` field must be a string.")
    headers = email.get("headers")
    if headers is not None and (
        not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        return invalid("The `headers` field must be an object of string values.")
    tags = email.get("tags")
    if tags is not None:
        if not isinstance(tags, list):
            return invalid("The `tags` field must be an array of {name, value} objects.")
        for tag in tags:
            if not (
                isinstance(tag, dict)
                and isinstance(tag.get("name"), str)
                and isinstance(tag.get("value"), str)
                and _TAG_PART.fullmatch(tag["name"])
                and _TAG_PART.fullmatch(tag["value"])
            ):
                return invalid(
                    "Tags need a `name` and `value` of at most 256 ASCII letters, numbers, underscores or dashes."
                )
    if in_batch and email.get("attachments"):
        return invalid("Attachments are not supported in batch emails.")
    if in_batch and email.get("scheduled_at"):
        return invalid("`scheduled_at` is not supported in batch emails.")
    return None


def _record(email: Mapping[str, Any], key: str | None, now: float, path: str, batch_index: int | None) -> AcceptedEmail:
    return AcceptedEmail(
        id=str(uuid.uuid4()),
        sender=email["from"],
        to=tuple(_as_list(email.get("to"))),
        cc=tuple(_as_list(email.get("cc"))),
        bcc=tuple(_as_list(email.get("bcc"))),
        reply_to=tuple(_as_list(email.get("reply_to"))),
        subject=email["subject"],
        html=email.get("html"),
        text=email.get("text"),
        headers=dict(email.get("headers") or {}),
        tags=[dict(tag) for tag in email.get("tags") or []],
        idempotency_key=key,
        accepted_at=now,
        endpoint=path,
        batch_index=batch_index,
    )


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops SYNs under concurrent clients: 1 s retransmit stalls
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], resend: LocalResendServer):
        self.resend = resend
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sendonce-local-resend/1"
    server: _HttpServer

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        headers = {name: value for name, value in self.headers.items()}
        try:
            status, reply_headers, payload = self.server.resend.handle(method, self.path, headers, body)
        except Exception as error:  # noqa: BLE001 - a bug here must still reach the client as Resend's JSON 500
            failure = _ApiError(500, "application_error", f"local server error: {error!r}").reply()
            status, reply_headers, payload = 500, {"content-type": "application/json"}, failure.encoded()
        try:
            self.send_response(status)
            for name, value in reply_headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (a timeout during a stall); the server state is already final.
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.resend.verbose:
            super().log_message(format, *args)


def _latency_arg(value: str) -> tuple[float, float]:
    low, _, high = value.partition(":")
    try:
        bounds = (float(low), float(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError("expected MIN:MAX or N milliseconds") from None
    if bounds[0] < 0 or bounds[1] < bounds[0]:
        raise argparse.ArgumentTypeError("need 0 <= MIN <= MAX")
    return bounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sendonce_local.resend_server",
        description="Run the local Resend API on loopback; prints its URL once listening.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--rate-limit",
        type=int,
        default=DEFAULT_TEAM_RATE_LIMIT,
        metavar="RPS",
        help=f"the team's limit, requests per sliding second (default {DEFAULT_TEAM_RATE_LIMIT},"
        " Resend's default; 0: off)",
    )
    parser.add_argument("--latency-ms", type=_latency_arg, default=None, metavar="MIN:MAX")
    parser.add_argument("--daily-quota", type=int, default=None, metavar="EMAILS")
    parser.add_argument("--api-key", default=None, help="the only accepted key (default: any key starting re_)")
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    parser.add_argument("--webhook-url", default=None, help="send Svix-signed webhooks for accepted emails here")
    parser.add_argument("--webhook-secret", default=None, help="whsec_... signing secret (default: a new one, printed)")
    parser.add_argument(
        "--webhook-out-of-order", action="store_true", help="deliver each email's webhooks newest first"
    )
    parser.add_argument("--webhook-copies", type=int, default=1, metavar="N", help="deliver every webhook N times")
    args = parser.parse_args(argv)

    server = LocalResendServer(
        args.host,
        args.port,
        api_key=args.api_key,
        rate_limit=args.rate_limit or None,
        latency_ms=args.latency_ms,
        daily_quota=args.daily_quota,
        verbose=args.verbose,
        webhook_url=args.webhook_url,
        webhook_secret=args.webhook_secret,
        webhook_out_of_order=args.webhook_out_of_order,
        webhook_copies=args.webhook_copies,
    ).start()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(server.url, flush=True)
    if args.webhook_url and not args.webhook_secret:
        print(f"webhook signing secret: {server.webhook_secret}", file=sys.stderr, flush=True)
    while not stop.wait(0.2):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
