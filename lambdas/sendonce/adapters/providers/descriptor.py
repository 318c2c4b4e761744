"""What a provider's folder registers: one `Provider` descriptor (its `provider.py` exports
it as `PROVIDER`), read by the wiring, the settings, the operator input, the cost model and
(through `sendonce_cdk.providers`) the CDK construct.

Nothing here imports a provider's SDK: a descriptor builds its adapter when asked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from sendonce.domain.capabilities import ProviderCapabilities
from sendonce.domain.deliverability.ports import ProviderEvent
from sendonce.domain.deliverability.provider_events import EventReader, WebhookReader
from sendonce.domain.sending.ports import EmailProvider, RateLimiter


class ProviderSettings(BaseModel):
    """A provider's part of a function's settings. Field `x` of provider `p` is the setting
    `p_x`, read from SENDONCE_P_X (e.g. SENDONCE_RESEND_API_KEY_SECRET)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class NoSettings(ProviderSettings):
    pass


# (secret name, what it holds) -> its value; the wiring's one secret reader.
SecretReader = Callable[[str, str], str]


class AwsClients(Protocol):
    """The wiring's AWS clients (sendonce.wiring.clients.Clients): each built once."""

    def client(self, service_name: str, config: Any = None) -> Any: ...


@dataclass(frozen=True)
class ProviderEnv:
    """What the wiring hands a provider's builder."""

    clients: AwsClients  # an AWS client: `clients.client("sesv2", config)`, the same one each time
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


@dataclass(frozen=True)
class Plan:
    """A pricing plan: USD per 1,000 emails (None: unconfirmed, the caller gives it) and a monthly fee."""

    name: str
    per_1000: float | None
    monthly_fee: float | None
    note: str


@dataclass(frozen=True)
class Billing:
    """How a provider charges, for the cost model (`sendonce cost`): per email on the AWS
    bill under one of its `plans` (the first is the default), or outside AWS (`note`)."""

    through_aws: bool = False
    plans: tuple[Plan, ...] = ()
    note: str = ""
    price_list: str = ""  # where its prices are published
    # Rows of docs/benchmarks.md's price table: (price, figure, source, as of, confirmed).
    price_sources: tuple[tuple[str, str, str, str, bool], ...] = ()

    def plan(self, name: str, *, per_1000: float | None = None, monthly_fee: float | None = None) -> Plan:
        """The plan with the caller's figures; a plan whose price is unconfirmed needs them."""
        plans = {p.name: p for p in self.plans}
        if name not in plans:
            raise ValueError(f"plan must be one of {', '.join(plans)}")
        plan = plans[name]
        price = per_1000 if per_1000 is not None else plan.per_1000
        if price is None:
            raise ValueError(f"{plan.note} ({self.price_list or 'its price list'}, or your bill)")
        fee = monthly_fee if monthly_fee is not None else (plan.monthly_fee or 0.0)
        given = per_1000 is not None or monthly_fee is not None
        return Plan(name, price, fee, plan.note + ("; figures given by the caller" if given else ""))


@dataclass(frozen=True, kw_only=True)
class Provider:
    name: str
    capabilities: ProviderCapabilities
    # How people write its name (descriptions, the cost report); the name when unset.
    label: str = ""
    # The consumer's settings for this provider, and the events function's.
    settings: type[ProviderSettings] = NoSettings
    # The part of `settings` that states the rate `pace` paces it at (a base of `settings`):
    # the operator API carries it too, to refuse a campaign's max_rate above it.
    rate_settings: type[ProviderSettings] = NoSettings
    events_settings: type[ProviderSettings] = NoSettings
    # A settings field also read from another environment variable when its own is unset.
    env_fallbacks: Mapping[str, str] = field(default_factory=dict)
    # The adapter (an EmailProvider), or None when the settings leave it unconfigured.
    build: Callable[[Any, ProviderEnv], EmailProvider | None]
    # The shared send rate, from the settings and the built adapter (None: before one is
    # built, e.g. the cost model's default).
    pace: Callable[[Any, EmailProvider | None], Pace]
    # Called once the shared limiter exists: an adapter that reads the provider's rate
    # headers reports them to it (capabilities.rate_headers).
    watch_rate: Callable[[Any, EmailProvider, RateLimiter], None] | None = None
    # Events: from an event bus, or as webhooks at POST /webhooks/<name> (None: unconfigured).
    bus_events: BusEvents | None = None
    webhook: Callable[[Any, SecretReader], WebhookReader | None] | None = None
    # The provider's own record of what it sent, for `sendonce campaign audit`: (its
    # settings, the env, the shared limiter, retention days or None, share of the rate) ->
    # a ProviderRecords. None: the audit reads the events recorded on the ledger instead.
    records: Callable[[Any, ProviderEnv, RateLimiter, float | None, float], Any] | None = None
    # The sending account's state, read by the account health check (a ProviderAccount,
    # domain/deliverability/ports.py). None: the provider has no account state to read.
    account: Callable[[ProviderEnv], Any] | None = None
    billing: Billing = field(default_factory=Billing)

    def default_rate(self) -> float:
        """The rate a default deployment paces this provider at (its limit less the reserve)."""
        pace = self.pace(self.settings(), None)
        return pace.rate - pace.reserve

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
