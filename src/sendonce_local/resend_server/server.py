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

import collections
import hashlib
import json
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from sendonce_local.resend_server.http import _Handler, _HttpServer
from sendonce_local.resend_server.knobs import FaultKnobs
from sendonce_local.resend_server.listing import DEFAULT_RETENTION_SECONDS, EmailListing
from sendonce_local.resend_server.webhooks import (
    WEBHOOK_RETRY_DELAYS_SECONDS,
    WEBHOOK_WORKERS,
    WebhookDelivery,
    WebhookSender,
    new_webhook_secret,
)
from sendonce_local.resend_server.wire import (
    DEFAULT_TEAM_RATE_LIMIT,
    FAIL_ERRORS,
    HALT_ERRORS,
    IDEMPOTENCY_TTL_SECONDS,
    MAX_BATCH_EMAILS,
    MAX_IDEMPOTENCY_KEY_CHARS,
    RATE_LIMIT_WINDOW_SECONDS,
    AcceptedEmail,
    _ApiError,
    _as_list,
    _EmailProblem,
    _IdempotencyEntry,
    _record,
    _Rejection,
    _Reply,
    _require_object,
    _validate_email,
    normalise_address,
)


class LocalResendServer(FaultKnobs, WebhookSender, EmailListing):
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
            "retention_seconds": retention_seconds,
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

    def _answer(self, headers: Mapping[str, str], action: Callable[[], _Reply]) -> _Reply:
        """An API request: authorised, then one slot of the team's rate limit, then `action`."""
        with self._lock:
            self._requests += 1
        rate_headers: dict[str, str] = {}
        try:
            self._authorise(headers)
            rate_headers = self._take_rate_slot()
            reply = action()
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
