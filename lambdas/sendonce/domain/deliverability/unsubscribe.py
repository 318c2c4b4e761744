"""One-click unsubscribe (RFC 8058): signed tokens, the two headers, and what a click does.

A token names the campaign, the recipient and the address's fingerprint, signed with
HMAC-SHA256 under a key from Secrets Manager:

    v1.<campaign_id>.<recipient_id>.<fingerprint>.<base64url(hmac)>

Ids are limited to letters, digits, '_' and '-' (models.ID_PATTERN) and fingerprints are
hex, so '.' separates them unambiguously and the whole token is URL-safe. The version is
part of the signed text, so a later format cannot be confused with this one.

Several keys may be configured; any verifies. The signing key must be the same for a
delivery whichever consumer renders it (a Resend retry repeats its body byte for byte under
its idempotency key), so it is chosen from the campaign, not from the consumer: the newest
key whose `not_before` is at or before the campaign's creation. A consumer whose key set was
read before the campaign was created reads it again first, so it cannot miss such a key.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import parse_qs

from sendonce.domain.deliverability.ports import EventKind, LedgerEvents, ProviderEvent, SuppressionReason, Suppressions
from sendonce.domain.errors import InvalidTokenError
from sendonce.domain.models import ID_PATTERN, email_fingerprint

VERSION = "v1"
MIN_KEY_BYTES = 32
ONE_CLICK = "List-Unsubscribe=One-Click"
_ID = ID_PATTERN.strip("^$")
_TOKEN = re.compile(rf"^v1\.({_ID})\.({_ID})\.([0-9a-f]{{16}})\.([A-Za-z0-9_-]{{43}})$")
_ID_RE = re.compile(ID_PATTERN)


class TokenClaims(NamedTuple):
    campaign_id: str
    recipient_id: str
    fingerprint: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class SigningKey:
    secret: bytes
    not_before: dt.datetime | None = None  # None: usable for campaigns of any age


def _instant(value: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(value)
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)


def keys_from_secret(value: str) -> list[SigningKey]:
    """A secret holds one key, or `{"keys": [...]}` during a rotation, each entry either a key
    string or `{"key": "...", "not_before": "2026-12-01T00:00:00Z"}`."""
    value = value.strip()
    entries: list[object]
    if value.startswith("{"):
        try:
            entries = list(json.loads(value)["keys"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError('an unsubscribe key secret in JSON must be {"keys": ["...", ...]}') from exc
    else:
        entries = [value]
    keys = []
    for entry in entries:
        secret, not_before = (entry.get("key"), entry.get("not_before")) if isinstance(entry, dict) else (entry, None)
        if not isinstance(secret, str) or len(secret.encode()) < MIN_KEY_BYTES:
            raise ValueError(f"every unsubscribe key must be a string of at least {MIN_KEY_BYTES} bytes")
        try:
            moment = _instant(not_before) if not_before is not None else None
        except (TypeError, ValueError):
            raise ValueError(
                "an unsubscribe key's not_before must be an ISO 8601 time, e.g. 2026-12-01T00:00:00Z"
            ) from None
        keys.append(SigningKey(secret.encode(), moment))
    if not keys:
        raise ValueError("an unsubscribe key secret holds no key")
    return keys


class KeySet:
    """The unsubscribe keys, read from their secret again once `ttl_s` has passed (so a key
    added to the secret is accepted by warm functions within that time), or on demand when
    they were read before a given moment."""

    def __init__(self, load: Callable[[], str], *, ttl_s: float = 300.0, clock: Callable[[], float] = time.time):
        self._load = load
        self._ttl_s = ttl_s
        self._clock = clock
        self._keys: list[SigningKey] | None = None
        self._loaded_at = float("-inf")
        self._read_for = float("-inf")

    @classmethod
    def fixed(cls, keys: Sequence[bytes | SigningKey]) -> KeySet:
        ring = cls(lambda: "", ttl_s=float("inf"))
        ring._keys = [k if isinstance(k, SigningKey) else SigningKey(k) for k in keys]
        ring._loaded_at = float("inf")
        if not ring._keys or any(len(k.secret) < MIN_KEY_BYTES for k in ring._keys):
            raise ValueError(f"unsubscribe keys must be at least {MIN_KEY_BYTES} bytes")
        return ring

    def keys(self, *, read_after: float | None = None) -> list[SigningKey]:
        now = self._clock()
        stale = self._keys is None or now - self._loaded_at >= self._ttl_s
        # Read before the moment that matters (a campaign's creation): read again, once per
        # such moment, so a clock behind the creator's cannot turn it into a read per email.
        early = read_after is not None and self._loaded_at < read_after and read_after > self._read_for
        if stale or early:
            self._keys = keys_from_secret(self._load())
            self._loaded_at = now
            if read_after is not None:
                self._read_for = max(self._read_for, read_after)
        return list(self._keys or [])


def signing_key(keys: Sequence[SigningKey], created_at: dt.datetime | None) -> SigningKey:
    """The key that signs a campaign's links: the newest whose not_before is at or before the
    campaign's creation (the first listed among equals); for a campaign older than every key,
    the oldest key; without a creation time, the first listed."""
    if created_at is None:
        return keys[0]
    active = [k for k in keys if k.not_before is None or k.not_before <= created_at]
    if not active:
        return min(keys, key=lambda k: k.not_before)  # type: ignore[arg-type, return-value]
    newest = max(k.not_before or dt.datetime.min.replace(tzinfo=dt.UTC) for k in active)
    return next(k for k in active if (k.not_before or dt.datetime.min.replace(tzinfo=dt.UTC)) == newest)


class UnsubscribeTokens:
    def __init__(self, keys: Sequence[bytes] | KeySet):
        self._ring = keys if isinstance(keys, KeySet) else KeySet.fixed(keys)

    @classmethod
    def from_secret(cls, value: str) -> UnsubscribeTokens:
        return cls(KeySet.fixed(keys_from_secret(value)))

    @staticmethod
    def _mac(key: bytes, campaign_id: str, recipient_id: str, fingerprint: str) -> str:
        text = f"{VERSION}\n{campaign_id}\n{recipient_id}\n{fingerprint}".encode()
        return _b64(hmac.new(key, text, hashlib.sha256).digest())

    def sign(self, campaign_id: str, recipient_id: str, email: str, *, created_at: str | None = None) -> str:
        """`created_at`: the campaign's creation time (ISO 8601), which chooses the key."""
        if not _ID_RE.match(campaign_id) or not _ID_RE.match(recipient_id):
            raise ValueError("campaign_id and recipient_id must be identifiers")
        created = _instant(created_at) if created_at else None
        keys = self._ring.keys(read_after=created.timestamp() if created else None)
        fingerprint = email_fingerprint(email)
        mac = self._mac(signing_key(keys, created).secret, campaign_id, recipient_id, fingerprint)
        return f"{VERSION}.{campaign_id}.{recipient_id}.{fingerprint}.{mac}"

    def verify(self, token: str) -> TokenClaims:
        match = _TOKEN.match(token or "")
        if not match:
            raise InvalidTokenError("malformed unsubscribe token")
        campaign_id, recipient_id, fingerprint, mac = match.groups()
        valid = False
        for key in self._ring.keys():  # every key is tried: the time taken does not say which matched
            expected = self._mac(key.secret, campaign_id, recipient_id, fingerprint)
            valid |= hmac.compare_digest(expected.encode(), mac.encode())
        if not valid:
            raise InvalidTokenError("unsubscribe token signature does not match")
        return TokenClaims(campaign_id, recipient_id, fingerprint)


_MULTIPART_ONE_CLICK = re.compile(
    r'name="?List-Unsubscribe"?[^\r\n]*\r?\n(?:[^\r\n]+\r?\n)*\r?\n\s*One-Click\s*(?:\r?\n|$)'
)


def is_one_click(body: str | None, content_type: str | None) -> bool:
    """Whether a POST body is RFC 8058's `List-Unsubscribe=One-Click`, form-urlencoded (what
    mailbox providers and our confirmation page send) or as multipart/form-data."""
    body = body or ""
    if "multipart/form-data" in (content_type or "").lower():
        return bool(_MULTIPART_ONE_CLICK.search(body))
    return parse_qs(body.strip()).get("List-Unsubscribe") == ["One-Click"]


def unsubscribe_url(base_url: str, token: str) -> str:
    return f"{base_url.rstrip('/')}/u/{token}"


class UnsubscribeLinks:
    """The per-recipient List-Unsubscribe headers that the consumer adds to each email.

    `created_at_of(campaign_id)` gives a campaign's creation time, which chooses the signing
    key; it never changes, so it is asked once per campaign."""

    def __init__(
        self, tokens: UnsubscribeTokens, base_url: str, created_at_of: Callable[[str], str | None] | None = None
    ):
        if not base_url.startswith("https://"):
            raise ValueError("the unsubscribe base URL must be https:// (RFC 8058)")
        self._tokens = tokens
        self._base_url = base_url
        self._created_at_of = created_at_of
        self._created_at: dict[str, str | None] = {}

    def _creation(self, campaign_id: str) -> str | None:
        if self._created_at_of is None:
            return None
        if campaign_id not in self._created_at:
            if len(self._created_at) >= 1024:
                self._created_at.clear()
            self._created_at[campaign_id] = self._created_at_of(campaign_id)
        return self._created_at[campaign_id]

    def url(self, campaign_id: str, recipient_id: str, email: str, *, created_at: str | None = None) -> str:
        created_at = created_at or self._creation(campaign_id)
        return unsubscribe_url(
            self._base_url, self._tokens.sign(campaign_id, recipient_id, email, created_at=created_at)
        )

    def headers(
        self, campaign_id: str, recipient_id: str, email: str, *, created_at: str | None = None
    ) -> dict[str, str]:
        return {
            "List-Unsubscribe": f"<{self.url(campaign_id, recipient_id, email, created_at=created_at)}>",
            "List-Unsubscribe-Post": ONE_CLICK,
        }


@dataclass(frozen=True)
class UnsubscribeOutcome:
    claims: TokenClaims
    newly_suppressed: bool


class UnsubscribeService:
    def __init__(
        self, *, tokens: UnsubscribeTokens, suppressions: Suppressions, ledger_events: LedgerEvents | None = None
    ):
        self._tokens = tokens
        self._suppressions = suppressions
        self._ledger_events = ledger_events

    def verify(self, token: str) -> TokenClaims:
        """The token's claims (raises InvalidTokenError); reads nothing."""
        return self._tokens.verify(token)

    def check(self, token: str) -> tuple[TokenClaims, bool]:
        """The token's claims and whether the address is already suppressed (raises InvalidTokenError)."""
        claims = self._tokens.verify(token)
        return claims, self._suppressions.get(claims.fingerprint) is not None

    def unsubscribe(self, token: str) -> UnsubscribeOutcome:
        """Idempotent: a second click, or a mailbox provider's retry, changes nothing."""
        claims = self._tokens.verify(token)
        new = self._suppressions.add_fingerprint(
            claims.fingerprint, SuppressionReason.UNSUBSCRIBED, f"campaign:{claims.campaign_id}", claims.campaign_id
        )
        if self._ledger_events is not None:
            self._ledger_events.annotate(
                ProviderEvent(
                    event_id=f"unsubscribe:{claims.campaign_id}:{claims.recipient_id}",
                    provider="sendonce",
                    kind=EventKind.UNSUBSCRIBED,
                    campaign_id=claims.campaign_id,
                    recipient_id=claims.recipient_id,
                    detail="one-click unsubscribe",
                )
            )
        return UnsubscribeOutcome(claims=claims, newly_suppressed=new)
