"""What a provider's folder registers: one `Provider` descriptor (its `provider.py` exports
it as `PROVIDER`), read by the wiring, the settings, the operator input, the cost model and
(through `sendonce_cdk.providers`) the CDK construct.

Nothing here imports a provider's SDK: a descriptor builds its adapter when asked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from sendonce.domain.capabilities import ProviderCapabilities
from sendonce.domain.deliverability.provider_events import EventReader, WebhookReader
from sendonce.domain.ports import EmailProvider, ProviderEvent, RateLimiter


class ProviderSettings(BaseModel):
    """A provider's part of a function's settings. Field `x` of provider `p` is the setting
    `p_x`, read from SENDONCE_P_X (e.g. SENDONCE_RESEND_API_KEY_SECRET)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class NoSettings(ProviderSettings):
    pass


# (secret name, what it holds) -> its value; the wiring's one secret reader.
SecretReader = Callable[[str, str], str]


@dataclass(frozen=True)
class ProviderEnv:
    """What the wiring hands a provider's builder."""

    session: Any  # a boto3 session
    secret: SecretReader
    timeout_seconds: float


@dataclass(frozen=True)
class Pace:
    """The shared rate a provider is paced at: `rate` requests per second, `reserve` of them kept unused."""

    rate: float
    reserve: float = 0.0


@dataclass(frozen=True)
class BusEvents:
    """A provider whose events arrive on an event bus: EventBridge's `source` names them."""

    provider: str
    source: str
    parse: Callable[[Mapping[str, Any]], ProviderEvent | None]

    def read(self, event: Mapping[str, Any]) -> ProviderEvent | None:
        return self.parse(event)


@dataclass(frozen=True, kw_only=True)
class Provider:
    name: str
    capabilities: ProviderCapabilities
    # How people write its name (descriptions, the cost report); the name when unset.
    label: str = ""
    # The consumer's settings for this provider, and the events function's.
    settings: type[ProviderSettings] = NoSettings
    events_settings: type[ProviderSettings] = NoSettings
    # A settings field also read from another environment variable when its own is unset.
    env_fallbacks: Mapping[str, str] = field(default_factory=dict)
    # The adapter (an EmailProvider), or None when the settings leave it unconfigured.
    build: Callable[[Any, ProviderEnv], EmailProvider | None]
    # The shared send rate, from the settings and the built adapter.
    pace: Callable[[Any, EmailProvider], Pace]
    # Called once the shared limiter exists: an adapter that reads the provider's rate
    # headers reports them to it (capabilities.rate_headers).
    watch_rate: Callable[[Any, EmailProvider, RateLimiter], None] | None = None
    # Events: from an event bus, or as webhooks at POST /webhooks/<name> (None: unconfigured).
    bus_events: BusEvents | None = None
    webhook: Callable[[Any, SecretReader], WebhookReader | None] | None = None

    @property
    def title(self) -> str:
        return self.label or self.name

    @property
    def events_title(self) -> str:
        """What its events are called: "<title> events" from a bus, "<title> webhooks" over HTTP."""
        return f"{self.title} {'events' if self.bus_events is not None else 'webhooks'}"

    @property
    def webhook_path(self) -> str | None:
        return f"/webhooks/{self.name}" if self.webhook is not None else None


def event_readers(providers: Mapping[str, Provider]) -> dict[str, EventReader]:
    return {p.bus_events.source: p.bus_events for p in providers.values() if p.bus_events is not None}
