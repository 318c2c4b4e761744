"""Resend's wire format as the local server speaks it: limits, error bodies, validation of an
email, and the record of an accepted one."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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

# What fail_next may inject: a 429 is the team limit's own answer (rate_limited), met whatever
# the sender's speed.
INJECTABLE_STATUSES = (429, *FAIL_ERRORS)

_ADDRESS = re.compile(r"[^@\s<>\"]+@[^@\s<>\"]+\.[^@\s<>\"]+")
_NAMED_ADDRESS = re.compile(r"[^<>]*<\s*([^<>]+?)\s*>")
_TAG_PART = re.compile(r"[A-Za-z0-9_-]{1,256}")
_ADDRESS_FORMAT = "The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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


def rate_limited(limit: int, rate_headers: Mapping[str, str], reset: int) -> _ApiError:
    """Resend's answer over the team's rate limit: 429 with its ratelimit-* headers and retry-after."""
    return _ApiError(
        429,
        "rate_limit_exceeded",
        f"Too many requests. You can only make {limit} requests per second. "
        "See rate limit response headers for more information.",
        {**rate_headers, "retry-after": str(reset)},
    )
