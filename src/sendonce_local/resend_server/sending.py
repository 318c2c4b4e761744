"""``POST /emails`` and ``POST /emails/batch``: the body validated (strict or permissive batch
validation), idempotency keys (replays, conflicts, expiry after 24 hours), the daily quota,
latency and stalls, and every accepted email recorded (its webhooks queued)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from sendonce_local.resend_server.wire import (
    DEFAULT_TEAM_RATE_LIMIT,
    FAIL_ERRORS,
    HALT_ERRORS,
    IDEMPOTENCY_TTL_SECONDS,
    MAX_BATCH_EMAILS,
    MAX_IDEMPOTENCY_KEY_CHARS,
    _ApiError,
    _as_list,
    _EmailProblem,
    _IdempotencyEntry,
    _record,
    _Reply,
    _validate_email,
    normalise_address,
    rate_limited,
)


class EmailSending:
    """The send endpoints of LocalResendServer (a mixin: the state lives on the server)."""

    def _send(self, path: str, headers: Mapping[str, str], body: bytes) -> _Reply:
        key = headers.get("idempotency-key")
        if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY_CHARS:
            raise _ApiError(400, "invalid_idempotency_key", "The key must be between 1-256 chars.")
        with self._lock:
            failure = self._fail_queue.popleft() if self._fail_queue else None
        if failure == 429:
            limit = self._rate_limit or DEFAULT_TEAM_RATE_LIMIT
            raise rate_limited(
                limit, {"ratelimit-limit": str(limit), "ratelimit-remaining": "0", "ratelimit-reset": "1"}, 1
            )
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
