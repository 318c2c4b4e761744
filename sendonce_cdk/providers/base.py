"""A provider's needs in the CDK app, read by the `SendOnce` construct through the registry
(`sendonce_cdk.providers.registry`).

A provider is known to the construct by a `ProviderStack`: its context keys (with their
defaults and checks), the settings it gives the consumer and the events function, the
secrets those read, and any grants, event sources or cdk-nag acknowledgements of its own.
Its webhook route (POST /webhooks/<name>) comes from its descriptor in
`sendonce.adapters.providers`. Everything here is data or a hook with a default that does
nothing, so a provider with a secret and a webhook needs no code.

The hooks see the deployment's settings and the construct through `ProviderConfig` and
`MailConstruct`: what they read of `sendonce_cdk.config.SendonceConfig` and
`sendonce_cdk.construct.SendOnce`, which import this package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import IConstruct

from sendonce.adapters.providers.descriptor import Provider

if TYPE_CHECKING:
    from sendonce_cdk.provider_events import ProviderEvents


class ProviderConfig(Protocol):
    """The deployment's settings as the hooks read them (`SendonceConfig` is one)."""

    @property
    def providers(self) -> tuple[str, ...]:
        """The providers deployed, by name."""
        ...

    @property
    def stack_name(self) -> str: ...

    @property
    def sender_domain(self) -> str: ...

    @property
    def send_rate(self) -> float: ...

    def provider_value(self, key: str) -> Any:
        """A provider's context value (e.g. the name of a secret it reads)."""
        ...


class ConsumerParts(Protocol):
    """The consumer function's parts a provider's cdk-nag acknowledgements name."""

    @property
    def role(self) -> iam.IRole: ...


class MailConstruct(IConstruct, Protocol):
    """The construct as the `grant_*` and `acknowledge` hooks use it (`SendOnce` is one): a
    scope, its settings, the consumer's parts, and secret reads imported once by id."""

    @property
    def config(self) -> ProviderConfig: ...

    @property
    def consumer_parts(self) -> ConsumerParts: ...

    def allow_secret_read(
        self, function: lambda_.IFunction, id: str, secret_name: str, *, sid: str
    ) -> secretsmanager.ISecret: ...


@dataclass(frozen=True)
class SecretNeed:
    """A Secrets Manager secret a function reads, named by a context key (imported by name,
    never created in the template)."""

    function: Literal["consumer", "events"]
    setting: str  # the provider's settings field that carries the secret's name
    context_key: str  # the context key holding the name
    construct_id: str  # the imported secret's construct id
    sid: str  # the policy statement's sid


@dataclass(frozen=True)
class ProviderStack:
    descriptor: Provider
    # The provider's CDK context keys and their defaults (docs/deploy.md lists them).
    context: Mapping[str, Any] = field(default_factory=dict)
    secrets: tuple[SecretNeed, ...] = ()
    # Consumer settings taken straight from context keys: settings field -> context key.
    consumer_context: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.descriptor.name

    @property
    def webhook_path(self) -> str | None:
        return self.descriptor.webhook_path

    @property
    def account_health(self) -> bool:
        """The provider has an account state to read (`Provider.account`): the stack deploys
        the account health check for it (sendonce_cdk/account_health.py)."""
        return self.descriptor.account is not None

    # --- hooks: subclasses override what they need --------------------------------------

    def parse_context(self, value: Any) -> dict[str, Any]:
        """Each context key's value (`value(key)` gives the raw one or its default), converted."""
        return {key: value(key) for key in self.context}

    def problems(self, config: ProviderConfig) -> list[str]:
        """What is wrong with this provider's context values (ConfigError lists them)."""
        return []

    def consumer_settings(self, config: ProviderConfig) -> dict[str, str]:
        """The consumer's settings for this provider, by the provider's field name (the
        construct prefixes `<name>_`). Called when the provider is deployed."""
        return {
            **{setting: str(config.provider_value(key)) for setting, key in self.consumer_context.items()},
            **self._secret_settings(config, "consumer"),
        }

    def standing_consumer_settings(self, config: ProviderConfig) -> dict[str, str]:
        """Settings the consumer carries whether or not the provider is deployed: its rate. The
        operator API carries them too (a campaign's max_rate may not be above them)."""
        return {}

    def events_settings(self, config: ProviderConfig) -> dict[str, str]:
        return self._secret_settings(config, "events")

    def grant_consumer(self, mail: MailConstruct, function: lambda_.IFunction) -> None:
        self._grant_secrets(mail, function, "consumer")

    def grant_events(self, mail: MailConstruct, function: lambda_.IFunction) -> None:
        self._grant_secrets(mail, function, "events")

    def audit_settings(self, config: ProviderConfig) -> dict[str, str]:
        """The jobs worker's settings for this provider: an audit job reads the provider's
        own records (its listing) with the consumer's settings; none for a provider that
        keeps no listing (its audit reads the events the ledger recorded)."""
        return self.consumer_settings(config) if self.descriptor.records is not None else {}

    def grant_audit(self, mail: MailConstruct, function: lambda_.IFunction) -> None:
        """What reading the provider's own records needs: the consumer's secrets (the key
        that sends also lists and retrieves); nothing for a provider without a listing."""
        if self.descriptor.records is not None:
            self._grant_secrets(mail, function, "consumer")

    def grant_account_health(self, mail: MailConstruct, function: lambda_.IFunction) -> None:
        """What reading the provider's account needs (only when `account_health`)."""

    def add_event_sources(self, events: ProviderEvents, config: ProviderConfig) -> None:
        """Event-bus sources that reach the events function (created in `events`' scope)."""

    def acknowledge(self, mail: MailConstruct) -> None:
        """cdk-nag findings this provider's grants bring, each with its reason."""

    # --- the secrets, as data ---------------------------------------------------------------

    def _secret_settings(self, config: ProviderConfig, function: str) -> dict[str, str]:
        return {
            need.setting: config.provider_value(need.context_key) for need in self.secrets if need.function == function
        }

    def _grant_secrets(self, mail: MailConstruct, function: lambda_.IFunction, which: str) -> None:
        for need in self.secrets:
            if need.function == which:
                mail.allow_secret_read(
                    function, need.construct_id, mail.config.provider_value(need.context_key), sid=need.sid
                )
