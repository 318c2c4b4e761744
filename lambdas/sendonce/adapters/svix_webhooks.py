"""Resend webhook signatures (Svix) through the Resend SDK's own verifier.

`resend.Webhooks.verify` checks the timestamp against ±300 s, computes HMAC-SHA256 over
"{svix-id}.{svix-timestamp}.{body}" with the base64-decoded `whsec_` secret, and compares
it in constant time with each "v1,<base64>" entry of svix-signature. It raises ValueError
on any failure, which becomes the domain's WebhookSignatureError here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import resend

from sendonce.domain.errors import WebhookSignatureError


class SvixWebhookVerifier:
    def __init__(self, *, secret: str):
        if not secret.startswith("whsec_"):
            raise ValueError("a Resend webhook signing secret starts with whsec_")
        self._secret = secret

    def verify(self, body: str, headers: Mapping[str, str]) -> dict[str, Any]:
        lowered = {k.lower(): v for k, v in headers.items()}
        try:
            payload = resend.Webhooks.verify(
                {
                    "payload": body,
                    "headers": {
                        "id": lowered.get("svix-id", ""),
                        "timestamp": lowered.get("svix-timestamp", ""),
                        "signature": lowered.get("svix-signature", ""),
                    },
                    "webhook_secret": self._secret,
                }
            )
        except ValueError as exc:
            raise WebhookSignatureError(f"webhook rejected: {exc}") from exc
        if not isinstance(payload, dict):
            raise WebhookSignatureError("webhook payload is not a JSON object")
        return payload
