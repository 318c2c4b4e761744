"""The local server's clock and fault knobs: rate limit, latency, quotas, failures, stalls,
rejections and halts, steered in process or over /_local/faults."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sendonce_local.resend_server.wire import (
    HALT_ERRORS,
    INJECTABLE_STATUSES,
    _Rejection,
    normalise_address,
)


class FaultKnobs:
    """Configuration and faults of LocalResendServer (a mixin: the state lives on the server)."""

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
        """The next ``n`` send requests fail with 429 (the team limit's answer), 500 or 503 before
        anything is accepted."""
        if status not in INJECTABLE_STATUSES:
            raise ValueError(f"status must be one of {sorted(INJECTABLE_STATUSES)}")
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
        self.set_engagement(self._initial["engagement"])
        self.set_retention(self._initial["retention_seconds"])

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
                "engagement": [rule.to_json() for rule in self._engagement],
                "retention_seconds": self._retention_seconds,
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
            "engagement",
            "retention_seconds",
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
        if "engagement" in spec:
            self.set_engagement(spec["engagement"])
        if "retention_seconds" in spec:
            retention = spec["retention_seconds"]
            self.set_retention(None if retention is None else float(retention))
        return self.faults()
