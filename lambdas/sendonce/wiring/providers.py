"""The provider registry's adapters, and each provider's pace as settings configure it."""

from __future__ import annotations

from collections.abc import Mapping

from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import Pace, Provider, ProviderEnv
from sendonce.domain.sending.ports import EmailProvider
from sendonce.settings import ApiSettings, ConsumerSettings, JobsSettings
from sendonce.wiring.clients import Clients
from sendonce.wiring.secrets import build_secret_reader


def build_provider_env(settings: ConsumerSettings | JobsSettings, clients: Clients) -> ProviderEnv:
    """What a provider's builder is handed: the clients, the secret reader, the call timeout."""
    return ProviderEnv(
        clients=clients, secret=build_secret_reader(clients), timeout_seconds=settings.provider_timeout_seconds
    )


def build_providers(
    settings: ConsumerSettings, clients: Clients, *, providers: Mapping[str, Provider] | None = None
) -> dict[str, EmailProvider]:
    """The provider registry's adapters: campaigns name a provider; an unregistered name is
    refused at creation. A provider its settings leave unconfigured is left out."""
    env = build_provider_env(settings, clients)
    built: dict[str, EmailProvider] = {}
    for name, provider in (providers if providers is not None else registry.registered()).items():
        adapter = provider.build(settings.provider_settings(provider), env)
        if adapter is not None:
            built[name] = adapter
    return built


def configured_rates(
    settings: ConsumerSettings | ApiSettings | JobsSettings, providers: Mapping[str, Provider] | None = None
) -> dict[str, float]:
    """Each provider's rate in requests per second as `settings` configure it (the consumer's
    fields, or the API's part of them: `Provider.rate_settings`), before any provider states its
    own: what a campaign's max_rate may not exceed. A field they do not carry: its default."""
    return {name: pace.rate for name, pace in configured_paces(settings, providers).items()}


def configured_paces(
    settings: ConsumerSettings | ApiSettings | JobsSettings, providers: Mapping[str, Provider] | None = None
) -> dict[str, Pace]:
    """Each provider's pace (rate and reserve) as `settings` configure it; see `configured_rates`."""
    paces = {}
    for name, provider in (providers if providers is not None else registry.registered()).items():
        fields = type(settings).model_fields
        given = {f: getattr(settings, f"{name}_{f}") for f in provider.settings.model_fields if f"{name}_{f}" in fields}
        paces[name] = provider.pace(provider.settings(**given), None)
    return paces
