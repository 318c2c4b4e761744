"""Resend webhook signatures (Svix) through the Resend SDK's own verifier.

`resend.Webhooks.verify` checks the timestamp against ±300 s, computes HMAC-SHA256 over
"{svix-id}.{svix-timestamp}.{body}" with the base64-decoded `whsec_` secret, and compares
it in constant time with each "v1,<base64>" entry of svix-signature. It raises ValueError
on any failure, which becomes the domain's WebhookSignatureError here.

The SDK (2.52) strips any label before the comma, so "v2,<the v1 value>" would pass; Svix
defines only `v1` as this HMAC (`v1a` is an asymmetric scheme), so only entries labelled
`v1` are handed to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import resend

from sendonce.adapters.providers.resend.events import parse_resend_event
from sendonce.domain.deliverability.ports import ProviderEvent
from sendonce.domain.errors import WebhookSignatureError

_LABEL = "v1,"


class SvixWebhookVerifier:
    def __init__(self, *, secret: str):
        if not secret.startswith("whsec_"):
            raise ValueError("a Resend webhook signing secret starts with whsec_")
        self._secret = secret

    def verify(self, body: str, headers: Mapping[str, str]) -> dict[str, Any]:
        lowered = {k.lower(): v for k, v in headers.items()}
        signatures = " ".join(e for e in lowered.get("svix-signature", "").split(" ") if e.startswith(_LABEL))
        if not signatures:
            raise WebhookSignatureError("webhook rejected: no v1 signature")
        try:
            payload = resend.Webhooks.verify(
                {
                    "payload": body,
                    "headers": {
                        "id": lowered.get("svix-id", ""),
                        "timestamp": lowered.get("svix-timestamp", ""),
                        "signature": signatures,
                    },
                    "webhook_secret": self._secret,
                }
            )
        except ValueError as exc:
            raise WebhookSignatureError(f"webhook rejected: {exc}") from exc
        if not isinstance(payload, dict):
            raise WebhookSignatureError("webhook payload is not a JSON object")
        return payload


class SvixWebhooks:
    """Resend's webhooks as the events function reads them: verified, then parsed."""

    provider = "resend"

    def __init__(self, verifier: SvixWebhookVerifier):
        self._verifier = verifier

    def read(self, body: str, headers: Mapping[str, str]) -> ProviderEvent | None:
        payload = self._verifier.verify(body, headers)
        svix_id = {k.lower(): v for k, v in headers.items()}.get("svix-id", "")
        return parse_resend_event(payload, svix_id)
