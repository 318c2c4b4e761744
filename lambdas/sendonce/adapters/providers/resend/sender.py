"""Resend through the official SDK, one email per call, with the delivery's idempotency key."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import resend
from resend.exceptions import ResendError

from sendonce.domain.capabilities import ProviderCapabilities
from sendonce.domain.errors import (
    AmbiguousProviderError,
    HaltProviderError,
    PermanentProviderError,
    RetryableProviderError,
)
from sendonce.domain.models import OutboundEmail, Receipt, redact_emails
from sendonce.domain.sending.ports import RateLimiter

logger = logging.getLogger(__name__)

_HALT_TYPES = {
    "daily_quota_exceeded",
    "monthly_quota_exceeded",
    "missing_api_key",
    "invalid_api_key",
    "restricted_api_key",
    "suspended_api_key",
    "invalid_permission",
}


def _retry_after(headers: dict[str, str] | None) -> float | None:
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in ("retry-after", "ratelimit-reset"):
        try:
            return max(0.0, float(lowered[name]))
        except (KeyError, ValueError):
            continue
    return None


@dataclass(frozen=True)
class RateLimitHeaders:
    """Resend's rate-limit answer headers (IETF draft 6), on successes and errors alike."""

    limit_per_s: float | None
    remaining: int | None
    reset_s: float | None

    @classmethod
    def parse(cls, headers: Mapping[str, str] | None) -> RateLimitHeaders:
        lowered = {str(k).lower(): str(v) for k, v in (headers or {}).items()}

        def number(name: str) -> float | None:
            try:
                value = float(lowered[name].split(",")[0].strip())
            except (KeyError, ValueError):
                return None
            return value if value >= 0 else None

        limit = number("ratelimit-limit")
        window = _policy_window(lowered.get("ratelimit-policy"))
        remaining = number("ratelimit-remaining")
        return cls(
            limit_per_s=limit / window if limit and window else limit,
            remaining=int(remaining) if remaining is not None else None,
            reset_s=number("ratelimit-reset"),
        )


def exhausted_for(seen: RateLimitHeaders, *, accepted: bool) -> float:
    """How long a consumer holds its sends after an answer saying remaining 0 (`seen.reset_s`
    set). A refusal (429): the whole reset. An accepted send that spent the window: one
    place of the limit (1/limit s), at most the reset. Resend's reset is whole seconds,
    rounded up, while its window is a sliding second: paced at limit - 1 a second, our own
    sends fill it whenever one is a few ms late (`limit` sends then span a little under a
    second), and its oldest leaves within about one place. Holding the whole rounded second
    cost that consumer's campaign its places (bench-fair's high-priority campaign took 2 of
    its 3.6 requests/s). A team busy elsewhere still answers the next send with a 429,
    which holds for its reset and slows every consumer (`throttled`)."""
    reset = seen.reset_s or 0.0
    if accepted and seen.limit_per_s:
        return min(reset, 1 / seen.limit_per_s)
    return reset


def _policy_window(policy: str | None) -> float | None:
    """`RateLimit-Policy: 5;w=1` -> 1 (seconds). Resend sends none; the limit is per second."""
    for part in (policy or "").split(";")[1:]:
        name, _, value = part.strip().partition("=")
        if name == "w":
            try:
                return float(value) or None
            except ValueError:
                return None
    return None


def classify_resend_error(exc: ResendError) -> Exception:
    """Translate an SDK error into the domain's error classes (docs/ledger.md lists them)."""
    code = str(exc.code)
    kind = str(exc.error_type or "")
    reason = f"resend {code} {kind}: {getattr(exc, 'message', str(exc))}"[:500]
    if kind == "HttpClientError":
        # Connection failure or client timeout: the request may have been accepted.
        return AmbiguousProviderError(reason, code=kind)
    if kind in _HALT_TYPES or code in ("401",):
        return HaltProviderError(reason, code=kind)
    if code == "429" or kind == "rate_limit_exceeded":
        return RetryableProviderError(
            reason, code=kind, retry_after=_retry_after(getattr(exc, "headers", None)), throttled=True
        )
    if kind == "concurrent_idempotent_requests":
        return RetryableProviderError(reason, code=kind, retry_after=1.0, proves_not_accepted=False)
    if kind == "invalid_idempotent_request":
        # The key was used before for different content: something may have been sent
        # under it, and retrying is useless.
        return AmbiguousProviderError(reason, code=kind, repeatable=False)
    if code == "503":
        return RetryableProviderError(reason, code=kind)
    if code == "403":
        # An unverified sending domain fails every email of the campaign alike.
        return HaltProviderError(reason, code=kind)
    if code.startswith("5"):
        return AmbiguousProviderError(reason, code=kind)
    return PermanentProviderError(reason, code=kind)


# What the domain knows of this provider (sendonce.domain.capabilities); the class below
# states the same, from here.
CAPABILITIES = ProviderCapabilities(
    idempotent=True,
    idempotency_window_s=24 * 3600,  # Resend keeps an idempotency key for 24 h
    max_batch=100,  # POST /emails/batch
    default_rate=5.0,  # requests/s: Resend's documented default per team
    rate_headers=True,  # ratelimit-limit on every answer
    ambiguous_outcomes=(
        "a 5xx answer other than 503",
        "a connection failure or client timeout",
        "invalid_idempotent_request (the key was used for other content)",
        "a batch answer that does not cover every email",
    ),
)


class ResendProvider:
    name = "resend"
    idempotent = CAPABILITIES.idempotent
    max_batch = CAPABILITIES.max_batch

    def __init__(
        self,
        *,
        api_key: str,
        api_url: str | None = None,
        timeout_seconds: float = 10.0,
        limiter: RateLimiter | None = None,
    ):
        # The SDK keeps its configuration in module globals: one configuration per process.
        resend.api_key = api_key
        if api_url:
            resend.api_url = api_url.rstrip("/")
        resend.default_http_client = resend.RequestsClient(timeout=timeout_seconds)
        self._limiter = limiter

    def report_rate_limits_to(self, limiter: RateLimiter | None) -> None:
        """Tell `limiter` the team's limit and spent windows from every answer's headers."""
        self._limiter = limiter

    def _observe(self, headers: Mapping[str, str] | None, *, accepted: bool) -> None:
        # The SDK hands the answer's headers over as `http_headers` on a dict answer and as
        # `headers` on its errors (resend 2.x, resend/request.py): public, nothing patched.
        if self._limiter is None or not headers:
            return
        seen = RateLimitHeaders.parse(headers)
        try:
            if seen.limit_per_s:
                self._limiter.observed_limit(self.name, seen.limit_per_s)
            if seen.remaining == 0 and seen.reset_s is not None:
                self._limiter.exhausted(self.name, reset_s=exhausted_for(seen, accepted=accepted))
        except Exception:
            logger.warning("could not record Resend's rate-limit headers", exc_info=True)

    def _call(self, send: Any) -> Any:
        try:
            response = send()
        except ResendError as exc:
            self._observe(getattr(exc, "headers", None), accepted=False)
            raise classify_resend_error(exc) from exc
        if isinstance(response, dict):
            self._observe(response.get("http_headers"), accepted=True)
        return response

    @staticmethod
    def _params(email: OutboundEmail) -> dict[str, Any]:
        params: dict[str, Any] = {
            "from": email.sender,
            "to": [email.to],
            "subject": email.subject,
            "tags": [{"name": k, "value": v} for k, v in email.tags.items()],
        }
        if email.html is not None:
            params["html"] = email.html
        if email.text is not None:
            params["text"] = email.text
        if email.reply_to:
            params["reply_to"] = email.reply_to
        if email.headers:
            params["headers"] = dict(email.headers)
        return params

    def send(self, email: OutboundEmail) -> Receipt:
        response = self._call(
            lambda: resend.Emails.send(self._params(email), {"idempotency_key": email.idempotency_key})
        )
        message_id = response.get("id") if isinstance(response, dict) else None
        if not message_id:
            raise AmbiguousProviderError("resend answered without an email id")
        return Receipt(provider_message_id=message_id)

    def send_batch(self, emails: list[OutboundEmail], *, idempotency_key: str) -> list[Receipt | str]:
        """POST /emails/batch in permissive mode: valid emails are accepted, invalid ones
        come back under `errors` with their index; `data` lists the accepted ones in order."""
        if not 1 <= len(emails) <= self.max_batch:
            raise ValueError(f"a Resend batch holds 1..{self.max_batch} emails, not {len(emails)}")
        response = self._call(
            lambda: resend.Batch.send(
                [self._params(e) for e in emails],
                {"idempotency_key": idempotency_key, "batch_validation": "permissive"},
            )
        )
        data = list(response.get("data") or []) if isinstance(response, dict) else []
        errors = {int(e["index"]): str(e.get("message", "rejected")) for e in (response.get("errors") or [])}
        if len(data) + len(errors) != len(emails):
            raise AmbiguousProviderError(
                f"resend batch answer covers {len(data) + len(errors)} of {len(emails)} emails"
            )
        ids = iter(data)
        return [
            redact_emails(f"resend rejected: {errors[i]}")
            if i in errors
            else Receipt(provider_message_id=next(ids)["id"])
            for i in range(len(emails))
        ]
