"""A third provider, defined entirely here (issue 21: "a provider is one room").

"Stand-in" is a small HTTP email API served on loopback by the tests: one email per
`POST /emails` (Bearer API key), at most 10 per `POST /emails/batch`, no idempotency keys,
and signed webhooks (HMAC-SHA256 over "<timestamp>.<body>", header `standin-signature`).

What sendonce needs to know of it is what this module registers, nothing else: the
descriptor (`PROVIDER`: capabilities, settings, adapter, webhook reader) for the Lambda code
and `cdk_stack()` (its CDK needs) for the construct. Tests pass them to the registries
(`registered([PROVIDER])`); no file of sendonce changes.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import Field

from sendonce.adapters.providers.descriptor import Pace, Provider, ProviderEnv, ProviderSettings, SecretReader
from sendonce.domain.capabilities import ProviderCapabilities
from sendonce.domain.deliverability.ports import EventKind, ProviderEvent, SuppressionReason
from sendonce.domain.deliverability.provider_events import InvalidEventError
from sendonce.domain.errors import (
    AmbiguousProviderError,
    HaltProviderError,
    PermanentProviderError,
    RetryableProviderError,
    WebhookSignatureError,
)
from sendonce.domain.models import OutboundEmail, Receipt
from sendonce.domain.sending.ports import EmailProvider

NAME = "standin"
MAX_BATCH = 10
SIGNATURE = "standin-signature"
TIMESTAMP = "standin-timestamp"
SIGNATURE_WINDOW_S = 300

CAPABILITIES = ProviderCapabilities(
    idempotent=False,
    max_batch=MAX_BATCH,
    default_rate=50.0,
    ambiguous_outcomes=("a 5xx answer", "a read timeout"),
)


# --- the provider itself: a loopback HTTP server ---------------------------------------


class StandinServer:
    """The stand-in email API. `fail_next` holds statuses to answer the next sends with
    (500 after accepting: the email went out but the answer says otherwise)."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.sent: list[dict[str, Any]] = []
        self.requests = 0
        self.fail_next: list[int] = []
        self.failed: list[dict[str, Any]] = []  # emails accepted but answered with a failure
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                status, answer = server.answer(self.path, self.headers.get("authorization", ""), body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> StandinServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str, authorization: str, body: bytes) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests += 1
            if authorization != f"Bearer {self.api_key}":
                return 401, {"error": "bad api key"}
            emails = json.loads(body)
            if path == "/emails":
                emails = [emails]
            elif path != "/emails/batch" or not 1 <= len(emails) <= MAX_BATCH:
                return 422, {"error": f"a batch holds 1..{MAX_BATCH} emails"}
            accepted = []
            for email in emails:
                email = {**email, "id": f"sd-{next(self._ids)}"}
                self.sent.append(email)
                accepted.append({"id": email["id"]})
            if self.fail_next:
                self.failed.extend(self.sent[-len(accepted) :])
                return self.fail_next.pop(0), {"error": "internal error"}
            return 200, accepted[0] if path == "/emails" else {"data": accepted}

    def deliveries(self) -> dict[str, int]:
        with self._lock:
            counts: dict[str, int] = {}
            for email in self.sent:
                counts[email["to"]] = counts.get(email["to"], 0) + 1
            return counts

    def webhook(self, url: str, secret: str, payload: dict[str, Any], *, forged: bool = False) -> int:
        """POST one signed event to `url`; the answer's status."""
        body = json.dumps(payload).encode()
        stamp = str(int(time.time()))
        signature = sign(secret + ("x" if forged else ""), stamp, body)
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"content-type": "application/json", SIGNATURE: signature, TIMESTAMP: stamp},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code


def sign(secret: str, stamp: str, body: bytes) -> str:
    return hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()


# --- its adapter -------------------------------------------------------------------------


class StandinProvider:
    name = NAME
    idempotent = CAPABILITIES.idempotent
    max_batch = CAPABILITIES.max_batch

    def __init__(self, *, api_url: str, api_key: str, timeout_seconds: float) -> None:
        self._url = api_url.rstrip("/")
        self._key = api_key
        self._timeout = timeout_seconds

    def send(self, email: OutboundEmail) -> Receipt:
        params = {
            "from": email.sender,
            "to": email.to,
            "subject": email.subject,
            "html": email.html,
            "text": email.text,
            "headers": dict(email.headers),
            "tags": dict(email.tags),
        }
        request = urllib.request.Request(
            self._url + "/emails",
            data=json.dumps(params).encode(),
            method="POST",
            headers={"content-type": "application/json", "authorization": f"Bearer {self._key}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise classify(exc.code) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ConnectionRefusedError):
                raise RetryableProviderError(f"{NAME} unreachable") from exc
            raise AmbiguousProviderError(f"{NAME} call interrupted: {exc.reason}") from exc
        except TimeoutError as exc:
            raise AmbiguousProviderError(f"{NAME} read timeout") from exc
        return Receipt(provider_message_id=answer["id"])


def classify(status: int) -> Exception:
    reason = f"{NAME} answered {status}"
    if status == 429:
        return RetryableProviderError(reason, code=str(status), throttled=True)
    if status == 401:
        return HaltProviderError(reason, code=str(status))
    if status >= 500:
        return AmbiguousProviderError(reason, code=str(status))
    return PermanentProviderError(reason, code=str(status))


# --- its webhooks -------------------------------------------------------------------------

EVENT_TYPES = {
    "sent": EventKind.SENT,
    "delivered": EventKind.DELIVERED,
    "bounced": EventKind.BOUNCED,
    "complained": EventKind.COMPLAINED,
}


class StandinWebhooks:
    provider = NAME

    def __init__(self, secret: str, clock: Any = time.time) -> None:
        self._secret = secret
        self._clock = clock

    def read(self, body: str, headers: Mapping[str, str]) -> ProviderEvent | None:
        lowered = {k.lower(): v for k, v in headers.items()}
        stamp, signature = lowered.get(TIMESTAMP, ""), lowered.get(SIGNATURE, "")
        if not stamp.isdigit() or abs(self._clock() - int(stamp)) > SIGNATURE_WINDOW_S:
            raise WebhookSignatureError("webhook rejected: stale or missing timestamp")
        if not hmac.compare_digest(sign(self._secret, stamp, body.encode()), signature):
            raise WebhookSignatureError("webhook rejected: bad signature")
        payload = json.loads(body)
        kind = EVENT_TYPES.get(str(payload.get("type")))
        if kind is None:
            return None
        tags = payload.get("tags")
        if not isinstance(tags, dict):
            raise InvalidEventError("stand-in event without tags")
        hard = kind is EventKind.BOUNCED and payload.get("permanent") is True
        reason = {EventKind.COMPLAINED: SuppressionReason.COMPLAINED}.get(kind)
        return ProviderEvent(
            event_id=f"{NAME}:{payload['id']}",
            provider=NAME,
            kind=kind,
            campaign_id=tags.get("campaign_id"),
            recipient_id=tags.get("recipient_id"),
            message_id=payload.get("email_id"),
            addresses=(payload["to"],),
            occurred_at=payload.get("at"),
            hard=hard,
            detail=None,
            suppression_reason=SuppressionReason.BOUNCED if hard else reason,
        )


# --- its registration ----------------------------------------------------------------------


class StandinSettings(ProviderSettings):
    api_url: str | None = Field(default=None, pattern=r"^https?://")
    api_key_secret: str | None = Field(default=None, min_length=1)
    send_rate: float = Field(default=CAPABILITIES.default_rate, gt=0)


class StandinEventsSettings(ProviderSettings):
    webhook_secret: str | None = Field(default=None, min_length=1)


def _build(settings: StandinSettings, env: ProviderEnv) -> EmailProvider | None:
    if not (settings.api_url and settings.api_key_secret):
        return None
    return StandinProvider(
        api_url=settings.api_url,
        api_key=env.secret(settings.api_key_secret, "stand-in API key"),
        timeout_seconds=env.timeout_seconds,
    )


def _webhook(settings: StandinEventsSettings, secret: SecretReader) -> StandinWebhooks | None:
    if not settings.webhook_secret:
        return None
    return StandinWebhooks(secret(settings.webhook_secret, "stand-in webhook secret"))


PROVIDER = Provider(
    name=NAME,
    label="Stand-in",
    capabilities=CAPABILITIES,
    settings=StandinSettings,
    events_settings=StandinEventsSettings,
    build=_build,
    pace=lambda settings, provider: Pace(rate=settings.send_rate),
    webhook=_webhook,
)


def cdk_stack() -> Any:
    """Its CDK needs (imported late: the CDK starts jsii): two secrets, read by name, and
    its API's URL from context."""
    from sendonce_cdk.providers.base import ProviderStack, SecretNeed

    return ProviderStack(
        descriptor=PROVIDER,
        context={
            "standin_api_url": "https://api.standin.example",
            "standin_api_key_secret_name": "sendonce/standin-api-key",
            "standin_webhook_secret_name": "sendonce/standin-webhook-secret",
        },
        secrets=(
            SecretNeed("consumer", "api_key_secret", "standin_api_key_secret_name", "StandinApiKey", "ReadStandinKey"),
            SecretNeed(
                "events", "webhook_secret", "standin_webhook_secret_name", "StandinWebhookSecret", "ReadStandinHook"
            ),
        ),
        consumer_context={"api_url": "standin_api_url"},
    )
