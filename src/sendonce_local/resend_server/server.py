"""A local Resend API on loopback, faithful where sendonce depends on it.

Implements ``POST /emails`` and ``POST /emails/batch`` with Resend's auth,
validation, idempotency, rate-limit and error-body semantics, plus fault knobs
(latency, fail, stall-after-accept, reject, halt) and a record of every
accepted email so tests can count deliveries per recipient address.

With a webhook URL set it also sends Resend's webhooks for accepted emails, signed
the way Svix signs them (``email.sent``, then ``email.delivered``, or
``email.bounced`` for addresses set to bounce, and ``email.complained`` after the
delivery for addresses set to complain, and ``email.opened`` / ``email.clicked`` for a
share of recipients per subject), retrying non-2xx answers with the same ``svix-id``;
optionally out of order and more than once, as Svix may.

Run as a process with ``python -m sendonce_local.resend_server --port N``;
steer a running server over ``/_local/*`` (see docs/local-resend.md).

``LocalResendServer`` (here: its lifecycle, routing and state) is assembled from mixins, one
per concern: admission.py (API key, halts, the team's rate limit), sending.py (the send
endpoints and idempotency), listing.py (List and Retrieve), control.py (``/_local/*``),
knobs.py (clock and faults) and webhooks.py (Svix-signed webhooks).
"""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from sendonce_local.resend_server.admission import RequestAdmission
from sendonce_local.resend_server.control import ControlEndpoints
from sendonce_local.resend_server.engagement import EngagementRule
from sendonce_local.resend_server.http import _Handler, _HttpServer
from sendonce_local.resend_server.knobs import FaultKnobs
from sendonce_local.resend_server.listing import DEFAULT_RETENTION_SECONDS, EmailListing
from sendonce_local.resend_server.sending import EmailSending
from sendonce_local.resend_server.webhooks import (
    WEBHOOK_RETRY_DELAYS_SECONDS,
    WEBHOOK_WORKERS,
    WebhookDelivery,
    WebhookSender,
    new_webhook_secret,
)
from sendonce_local.resend_server.wire import (
    DEFAULT_TEAM_RATE_LIMIT,
    AcceptedEmail,
    _ApiError,
    _IdempotencyEntry,
    _Rejection,
)


class LocalResendServer(RequestAdmission, EmailSending, ControlEndpoints, FaultKnobs, WebhookSender, EmailListing):
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
        engagement: Iterable[Mapping[str, Any] | EngagementRule] | None = None,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
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
            "engagement": engagement,
            "retention_seconds": retention_seconds,
        }
        self._webhook_cv = threading.Condition()
        self._webhook_threads: list[threading.Thread] = []
        self.webhook_url: str | None = None
        self.webhook_secret: str = webhook_secret or new_webhook_secret()
        self._webhook_retry_delays: tuple[float, ...] = WEBHOOK_RETRY_DELAYS_SECONDS
        self._webhook_out_of_order = False
        self._webhook_copies = 1
        self._engagement: tuple[EngagementRule, ...] = ()
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
        self.set_engagement(engagement)
        self.set_retention(retention_seconds)

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
        parts = urlsplit(path)
        path = parts.path.rstrip("/") or "/"
        readable = path == "/emails" or (
            path.startswith("/emails/") and path != "/emails/batch" and path.count("/") == 2
        )
        if path.startswith("/_local/"):
            reply = self._handle_control(method, path, body)
        elif method == "GET" and readable:
            reply = self._answer(lowered, lambda: self._read(path, parts.query))
        elif path in ("/emails", "/emails/batch"):
            if method != "POST":
                reply = _ApiError(405, "method_not_allowed", "Method is not allowed for the requested path.").reply()
            else:
                reply = self._answer(lowered, lambda: self._send(path, lowered, body))
        else:
            reply = _ApiError(404, "not_found", "The requested endpoint does not exist.").reply()
        headers_out = {"content-type": "application/json", **reply.headers}
        return reply.status, headers_out, reply.encoded()

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
