"""Resend as sendonce registers it: capabilities, settings, adapter, webhooks."""

from __future__ import annotations

from pydantic import Field

from sendonce.adapters.providers.descriptor import Billing, Pace, Provider, ProviderEnv, ProviderSettings, SecretReader
from sendonce.adapters.providers.resend.records import DEFAULT_RETENTION_DAYS, ResendRecords
from sendonce.adapters.providers.resend.sender import CAPABILITIES, ResendProvider
from sendonce.adapters.providers.resend.webhooks import SvixWebhooks, SvixWebhookVerifier
from sendonce.domain.errors import SettingsError
from sendonce.domain.sending.ports import EmailProvider, RateLimiter

NAME = "resend"
# Also read for the consumer's `resend_api_url` (the local Resend server sets it).
API_URL_VARIABLE = "RESEND_API_URL"


class ResendRateSettings(ProviderSettings):
    # The team's limit in requests per second, assumed until Resend's ratelimit-limit header
    # states it, paced less `rate_reserve` requests per second.
    requests_per_second: float = Field(default=CAPABILITIES.default_rate, gt=0, le=1_000)


class ResendSettings(ResendRateSettings):
    # The name of the Secrets Manager secret holding the API key; unset: Resend is not registered.
    api_key_secret: str | None = Field(default=None, min_length=1)
    api_url: str | None = Field(default=None, pattern=r"^https?://")
    rate_from_headers: bool = True
    rate_reserve: float = Field(default=1.0, ge=0, le=100)


class ResendEventsSettings(ProviderSettings):
    # The name of the secret holding the `whsec_...` signing secret; without it every
    # webhook is refused.
    webhook_secret: str | None = Field(default=None, min_length=1)


def _build(settings: ResendSettings, env: ProviderEnv) -> EmailProvider | None:
    if not settings.api_key_secret:
        return None
    return ResendProvider(
        api_key=env.secret(settings.api_key_secret, "Resend API key"),
        api_url=settings.api_url,
        timeout_seconds=env.timeout_seconds,
    )


def _pace(settings: ResendSettings, provider: EmailProvider | None) -> Pace:
    return Pace(rate=settings.requests_per_second, reserve=settings.rate_reserve)


def _watch_rate(settings: ResendSettings, provider: EmailProvider, limiter: RateLimiter) -> None:
    if settings.rate_from_headers and isinstance(provider, ResendProvider):
        # Every Resend answer states the team's limit: the shared rate follows it.
        provider.report_rate_limits_to(limiter)


def _webhook(settings: ResendEventsSettings, secret: SecretReader) -> SvixWebhooks | None:
    if not settings.webhook_secret:
        return None
    try:
        verifier = SvixWebhookVerifier(secret=secret(settings.webhook_secret, "webhook secret"))
    except ValueError as exc:
        raise SettingsError(f"secret {settings.webhook_secret!r}: {exc}") from exc
    return SvixWebhooks(verifier)


def _records(
    settings: ResendSettings, env: ProviderEnv, limiter: RateLimiter, retention_days: float | None, share: float
) -> ResendRecords:
    """Resend's own listing, for the audit: at a lower priority than sending on the shared rate."""
    if not settings.api_key_secret:
        raise SettingsError("no Resend API key secret is configured: the audit cannot read Resend's records")
    return ResendRecords(
        api_key=env.secret(settings.api_key_secret, "Resend API key"),
        api_url=settings.api_url,
        timeout_seconds=env.timeout_seconds,
        retention_days=DEFAULT_RETENTION_DAYS if retention_days is None else retention_days,
        limiter=limiter,
        share=share,
    )


PROVIDER = Provider(
    name=NAME,
    label="Resend",
    capabilities=CAPABILITIES,
    settings=ResendSettings,
    rate_settings=ResendRateSettings,
    events_settings=ResendEventsSettings,
    env_fallbacks={"api_url": API_URL_VARIABLE},
    build=_build,
    pace=_pace,
    watch_rate=_watch_rate,
    webhook=_webhook,
    records=_records,
    billing=Billing(note="Resend bills by plan (monthly email quota), not through AWS: not included in the AWS total."),
)
