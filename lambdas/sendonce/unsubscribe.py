"""One-click unsubscribe (RFC 8058): signed tokens, the two headers, and what a click does.

A token names the campaign, the recipient and the address's fingerprint, signed with
HMAC-SHA256 under a key from Secrets Manager:

    v1.<campaign_id>.<recipient_id>.<fingerprint>.<base64url(hmac)>

Ids are limited to letters, digits, '_' and '-' (models.ID_PATTERN) and fingerprints are
hex, so '.' separates them unambiguously and the whole token is URL-safe. The version is
part of the signed text, so a later format cannot be confused with this one. Several keys
may be configured: the first signs, any verifies (rotation keeps old links working).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from urllib.parse import parse_qs
from dataclasses import dataclass
from typing import NamedTuple

from sendonce.deliverability_ports import EventKind, LedgerEvents, ProviderEvent, SuppressionReason, Suppressions
from sendonce.errors import InvalidTokenError
from sendonce.models import ID_PATTERN, email_fingerprint

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


def keys_from_secret(value: str) -> list[bytes]:
    """A secret holds one key, or `{"keys": ["newest", "older", ...]}` during a rotation."""
    value = value.strip()
    keys: list[str]
    if value.startswith("{"):
        try:
            keys = list(json.loads(value)["keys"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError('an unsubscribe key secret in JSON must be {"keys": ["...", ...]}') from exc
    else:
        keys = [value]
    encoded = [k.encode() for k in keys if isinstance(k, str)]
    if not encoded or len(encoded) != len(keys) or any(len(k) < MIN_KEY_BYTES for k in encoded):
        raise ValueError(f"every unsubscribe key must be a string of at least {MIN_KEY_BYTES} bytes")
    return encoded


class UnsubscribeTokens:
    def __init__(self, keys: Sequence[bytes]):
        if not keys or any(len(k) < MIN_KEY_BYTES for k in keys):
            raise ValueError(f"unsubscribe keys must be at least {MIN_KEY_BYTES} bytes")
        self._keys = list(keys)

    @classmethod
    def from_secret(cls, value: str) -> UnsubscribeTokens:
        return cls(keys_from_secret(value))

    @staticmethod
    def _mac(key: bytes, campaign_id: str, recipient_id: str, fingerprint: str) -> str:
        text = f"{VERSION}\n{campaign_id}\n{recipient_id}\n{fingerprint}".encode()
        return _b64(hmac.new(key, text, hashlib.sha256).digest())

    def sign(self, campaign_id: str, recipient_id: str, email: str) -> str:
        if not _ID_RE.match(campaign_id) or not _ID_RE.match(recipient_id):
            raise ValueError("campaign_id and recipient_id must be identifiers")
        fingerprint = email_fingerprint(email)
        mac = self._mac(self._keys[0], campaign_id, recipient_id, fingerprint)
        return f"{VERSION}.{campaign_id}.{recipient_id}.{fingerprint}.{mac}"

    def verify(self, token: str) -> TokenClaims:
        match = _TOKEN.match(token or "")
        if not match:
            raise InvalidTokenError("malformed unsubscribe token")
        campaign_id, recipient_id, fingerprint, mac = match.groups()
        valid = False
        for key in self._keys:  # every key is tried: the time taken does not say which matched
            expected = self._mac(key, campaign_id, recipient_id, fingerprint)
            valid |= hmac.compare_digest(expected.encode(), mac.encode())
        if not valid:
            raise InvalidTokenError("unsubscribe token signature does not match")
        return TokenClaims(campaign_id, recipient_id, fingerprint)


_MULTIPART_ONE_CLICK = re.compile(r'name="?List-Unsubscribe"?[^\r\n]*\r?\n(?:[^\r\n]+\r?\n)*\r?\n\s*One-Click\s*(?:\r?\n|$)')


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
    """The per-recipient List-Unsubscribe headers that the consumer adds to each email."""

    def __init__(self, tokens: UnsubscribeTokens, base_url: str):
        if not base_url.startswith("https://"):
            raise ValueError("the unsubscribe base URL must be https:// (RFC 8058)")
        self._tokens = tokens
        self._base_url = base_url

    def url(self, campaign_id: str, recipient_id: str, email: str) -> str:
        return unsubscribe_url(self._base_url, self._tokens.sign(campaign_id, recipient_id, email))

    def headers(self, campaign_id: str, recipient_id: str, email: str) -> dict[str, str]:
        return {
            "List-Unsubscribe": f"<{self.url(campaign_id, recipient_id, email)}>",
            "List-Unsubscribe-Post": ONE_CLICK,
        }


@dataclass(frozen=True)
class UnsubscribeOutcome:
    claims: TokenClaims
    newly_suppressed: bool


class UnsubscribeService:
    def __init__(self, *, tokens: UnsubscribeTokens, suppressions: Suppressions, ledger_events: LedgerEvents | None = None):
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
