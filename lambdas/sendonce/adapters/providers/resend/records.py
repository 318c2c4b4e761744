"""Resend's own record of what it sent, for the audit (domain/audit): List Sent Emails
(`GET /emails`, newest first, 100 a page, `after` cursors, no tags) and Retrieve Email
(`GET /emails/{id}`, with tags), through the official SDK.

Every request takes a place from the team's shared rate limit at a lower priority than
sending (`DynamoDBRateLimiter.acquire_background`), teaches it the limit the answers state,
and waits out a 429 (`retry-after`) before trying again. Addresses leave this module only
as fingerprints.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import resend
from resend.exceptions import ResendError

from sendonce.adapters.providers.resend.sender import RateLimitHeaders, exhausted_for
from sendonce.domain.audit.records import ListedEmail
from sendonce.domain.models import email_fingerprint

logger = logging.getLogger(__name__)

PAGE_SIZE = 100  # Resend's most per page
# Resend keeps sent emails for the plan's retention, "a few days"; the exact figure per plan
# is not published: set it to the team's plan (`--retention-days`).
DEFAULT_RETENTION_DAYS = 3.0
THROTTLE_ATTEMPTS = 8


class BackgroundLimiter(Protocol):
    def acquire_background(self, provider: str, *, share: float = 0.5, deadline: float | None = None) -> bool: ...

    def throttled(self, provider: str) -> None: ...

    def observed_limit(self, provider: str, limit_per_s: float) -> None: ...

    def exhausted(self, provider: str, *, reset_s: float) -> None: ...


class ResendRecordsError(Exception):
    """Resend's records could not be read (an error answer other than a 429 that passed)."""


def _created_ms(value: Any) -> int:
    text = str(value or "").strip().replace(" ", "T", 1)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ResendRecordsError(f"Resend listed an email with an unreadable created_at {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def _addresses(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value] if value else []
    return tuple(email_fingerprint(str(a)) for a in items)


class ResendRecords:
    name = "resend"
    proves_absence = True

    def __init__(
        self,
        *,
        api_key: str,
        api_url: str | None = None,
        timeout_seconds: float = 10.0,
        retention_days: float = DEFAULT_RETENTION_DAYS,
        limiter: BackgroundLimiter | None = None,
        share: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ):
        # The SDK keeps its configuration in module globals (as ResendProvider sets them).
        resend.api_key = api_key
        if api_url:
            resend.api_url = api_url.rstrip("/")
        resend.default_http_client = resend.RequestsClient(timeout=timeout_seconds)
        self.retention_ms: int | None = int(retention_days * 86_400_000)
        self._limiter = limiter
        self._share = share
        self._sleep = sleep
        self.requests = 0
        self.throttled = 0

    def _observe(self, headers: Mapping[str, str] | None, *, accepted: bool) -> RateLimitHeaders:
        seen = RateLimitHeaders.parse(headers)
        if self._limiter is not None:
            if seen.limit_per_s:
                self._limiter.observed_limit(self.name, seen.limit_per_s)
            if seen.remaining == 0 and seen.reset_s is not None:
                self._limiter.exhausted(self.name, reset_s=exhausted_for(seen, accepted=accepted))
        return seen

    def _call(self, request: Callable[[], Any]) -> Any:
        for _ in range(THROTTLE_ATTEMPTS):
            if self._limiter is not None:
                self._limiter.acquire_background(self.name, share=self._share)
            self.requests += 1
            try:
                response = request()
            except ResendError as exc:
                headers = getattr(exc, "headers", None)
                seen = self._observe(headers, accepted=False)
                if str(exc.code) == "429" and getattr(exc, "error_type", "") == "rate_limit_exceeded":
                    self.throttled += 1
                    if self._limiter is not None:
                        self._limiter.throttled(self.name)
                    lowered = {str(k).lower(): v for k, v in (headers or {}).items()}
                    try:
                        wait = float(lowered.get("retry-after", seen.reset_s or 1.0))
                    except ValueError:
                        wait = 1.0
                    self._sleep(max(0.0, wait))
                    continue
                if str(exc.code) == "404":
                    return None
                raise ResendRecordsError(f"resend {exc.code} {getattr(exc, 'error_type', '')}: {exc}") from exc
            if isinstance(response, dict):
                self._observe(response.get("http_headers"), accepted=True)
            return response
        raise ResendRecordsError(f"Resend kept answering 429 ({THROTTLE_ATTEMPTS} attempts)")

    def listed(self, campaign_id: str, *, since_ms: int) -> Iterator[ListedEmail]:
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": PAGE_SIZE}
            if after:
                params["after"] = after
            page = self._call(lambda: resend.Emails.list(params))  # noqa: B023 - called at once
            if page is None:
                raise ResendRecordsError("Resend's email listing answered 404")
            data = page.get("data") or []
            for item in data:
                email = ListedEmail(
                    email_id=str(item["id"]),
                    to_fingerprints=_addresses(item.get("to")),
                    sender=str(item.get("from") or ""),
                    subject=str(item.get("subject") or ""),
                    created_at_ms=_created_ms(item.get("created_at")),
                )
                yield email
                if email.created_at_ms < since_ms:
                    return
            if not page.get("has_more") or not data:
                return
            after = str(data[-1]["id"])

    def tags(self, email_id: str) -> Mapping[str, str] | None:
        found = self._call(lambda: resend.Emails.get(email_id))
        if found is None:
            return None
        tags = found.get("tags") or []
        if isinstance(tags, dict):
            return {str(k): str(v) for k, v in tags.items()}
        return {str(t.get("name")): str(t.get("value")) for t in tags if isinstance(t, dict)}
