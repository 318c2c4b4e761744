"""Resend in the CDK app: the API key the consumer reads, the webhook signing secret the
events function reads, and the team's assumed request rate. Its webhook route comes from
its descriptor (POST /webhooks/resend)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sendonce.adapters.providers.descriptor import Provider
from sendonce.adapters.providers.resend.provider import CAPABILITIES, PROVIDER
from sendonce_cdk.context_values import number
from sendonce_cdk.providers.base import ProviderConfig, ProviderStack, SecretNeed


@dataclass(frozen=True)
class ResendStack(ProviderStack):
    descriptor: Provider = PROVIDER
    context: dict[str, Any] = field(
        default_factory=lambda: {
            "resend_api_key_secret_name": "sendonce/resend-api-key",
            "resend_webhook_secret_name": "sendonce/resend-webhook-secret",
            # Resend's documented default per team; the consumer learns the real one from its headers.
            "resend_requests_per_second": CAPABILITIES.default_rate,
        }
    )
    secrets: tuple[SecretNeed, ...] = (
        SecretNeed("consumer", "api_key_secret", "resend_api_key_secret_name", "ResendApiKey", "ReadResendApiKey"),
        SecretNeed(
            "events", "webhook_secret", "resend_webhook_secret_name", "ResendWebhookSecret", "ReadResendWebhookSecret"
        ),
    )

    def parse_context(self, value: Any) -> dict[str, Any]:
        return {
            "resend_api_key_secret_name": str(value("resend_api_key_secret_name")),
            "resend_webhook_secret_name": str(value("resend_webhook_secret_name")),
            "resend_requests_per_second": number(
                value("resend_requests_per_second"), "resend_requests_per_second", float
            ),
        }

    def standing_consumer_settings(self, config: ProviderConfig) -> dict[str, str]:
        return {"requests_per_second": f"{config.provider_value('resend_requests_per_second'):g}"}


STACK = ResendStack()
