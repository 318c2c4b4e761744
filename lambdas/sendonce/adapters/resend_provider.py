"""Resend through the official SDK, one email per call, with the delivery's idempotency key."""

from __future__ import annotations

from typing import Any

import resend
from resend.exceptions import ResendError

from sendonce.errors import AmbiguousProviderError, HaltProviderError, PermanentProviderError, RetryableProviderError
from sendonce.models import OutboundEmail, Receipt, redact_emails

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


class ResendProvider:
    name = "resend"
    idempotent = True
    max_batch = 100

    def __init__(self, *, api_key: str, api_url: str | None = None, timeout_seconds: float = 10.0):
        # The SDK keeps its configuration in module globals: one configuration per process.
        resend.api_key = api_key
        if api_url:
            resend.api_url = api_url.rstrip("/")
        resend.default_http_client = resend.RequestsClient(timeout=timeout_seconds)

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
        try:
            response = resend.Emails.send(self._params(email), {"idempotency_key": email.idempotency_key})
        except ResendError as exc:
            raise classify_resend_error(exc) from exc
        message_id = response.get("id") if isinstance(response, dict) else None
        if not message_id:
            raise AmbiguousProviderError("resend answered without an email id")
        return Receipt(provider_message_id=message_id)

    def send_batch(self, emails: list[OutboundEmail], *, idempotency_key: str) -> list[Receipt | str]:
        """POST /emails/batch in permissive mode: valid emails are accepted, invalid ones
        come back under `errors` with their index; `data` lists the accepted ones in order."""
        if not 1 <= len(emails) <= self.max_batch:
            raise ValueError(f"a Resend batch holds 1..{self.max_batch} emails, not {len(emails)}")
        try:
            response = resend.Batch.send(
                [self._params(e) for e in emails], {"idempotency_key": idempotency_key, "batch_validation": "permissive"}
            )
        except ResendError as exc:
            raise classify_resend_error(exc) from exc
        data = list(response.get("data") or []) if isinstance(response, dict) else []
        errors = {int(e["index"]): str(e.get("message", "rejected")) for e in (response.get("errors") or [])}
        if len(data) + len(errors) != len(emails):
            raise AmbiguousProviderError(f"resend batch answer covers {len(data) + len(errors)} of {len(emails)} emails")
        ids = iter(data)
        return [redact_emails(f"resend rejected: {errors[i]}") if i in errors else Receipt(provider_message_id=next(ids)["id"])
                for i in range(len(emails))]
