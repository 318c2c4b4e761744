"""Settings for the Lambda functions, validated once at cold start.

One model per function (consumer, operator API, events, unsubscribe). Every value comes
from the function's environment (set by the CDK stack) as a SENDONCE_<FIELD> variable
(`sendonce.contract.env_name`). Secrets are never here: only the *name* of the Secrets
Manager secret that holds each one.

Each registered provider adds its own fields (`sendonce.adapters.providers.<name>.provider`):
field `x` of provider `p` is the setting `p_x` (SENDONCE_P_X). `ConsumerSettings`,
`EventsSettings`, `JobsSettings` and (the rates only) `ApiSettings` carry the built-in
providers'; `for_providers` makes the model for another registry (a test's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from sendonce import contract
from sendonce.adapters.providers.descriptor import Provider, ProviderSettings
from sendonce.adapters.providers.registry import registered
from sendonce.domain.deliverability import feedback_id
from sendonce.domain.deliverability.feedback_id import FeedbackId
from sendonce.domain.deliverability.group_caps import GroupPacing, parse_pacing
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups, MailboxGroupsError
from sendonce.domain.deliverability.warmup import Warmup, WarmupError, parse_warmup
from sendonce.domain.errors import SettingsError


class _WithProviders(BaseModel):
    """Settings that carry the registered providers' fields, flat (`<provider>_<field>`)."""

    # Which attribute of a Provider holds this function's part of its settings.
    provider_part: ClassVar[str] = "settings"
    # A field read from another environment variable when its own is unset.
    env_fallbacks: ClassVar[dict[str, str]] = {}

    @classmethod
    def for_providers(cls, providers: Mapping[str, Provider]) -> type[Any]:
        """This model with each provider's fields added (the model carries none of its own)."""
        fields: dict[str, Any] = {}
        fallbacks: dict[str, str] = {}
        for provider in providers.values():
            part: type[ProviderSettings] = getattr(provider, cls.provider_part)
            for name, info in part.model_fields.items():
                fields[f"{provider.name}_{name}"] = (info.annotation, info)
            for name, variable in provider.env_fallbacks.items():
                if name in part.model_fields:
                    fallbacks[f"{provider.name}_{name}"] = variable
        model = create_model(cls.__name__, __base__=cls, __module__=cls.__module__, **fields)
        model.env_fallbacks = fallbacks
        return model

    def provider_settings(self, provider: Provider) -> Any:
        """The provider's own settings model, from this model's `<provider>_<field>` fields."""
        part: type[ProviderSettings] = getattr(provider, self.provider_part)
        return part(**{name: getattr(self, f"{provider.name}_{name}") for name in part.model_fields})


def _refused_if(problem: str | None, value: str) -> str:
    if problem is not None:
        raise ValueError(problem)
    return value


class _FeedbackIdSettings(BaseModel):
    """The Feedback-ID header every email carries (docs/deliverability.md#feedback-id): the
    deployment's SenderId (5-15 characters, the same for every email), stream and customer;
    the first field is each email's campaign id. The consumer's, and the operator API's: its
    previews compose as the consumer does (they read these as the consumer's settings, from
    its environment), and a bad value is refused at its cold start too."""

    feedback_id_sender_id: str = feedback_id.DEFAULT_SENDER_ID
    feedback_id_stream: str = feedback_id.DEFAULT_STREAM
    feedback_id_customer: str = ""

    @field_validator("feedback_id_sender_id")
    @classmethod
    def _sender_id(cls, value: str) -> str:
        return _refused_if(feedback_id.sender_id_problem(value), value)

    @field_validator("feedback_id_stream")
    @classmethod
    def _stream(cls, value: str) -> str:
        return _refused_if(feedback_id.stream_problem(value), value)

    @field_validator("feedback_id_customer")
    @classmethod
    def _customer(cls, value: str) -> str:
        return _refused_if(feedback_id.customer_problem(value), value)

    @property
    def feedback_id(self) -> FeedbackId:
        return FeedbackId(self.feedback_id_sender_id, self.feedback_id_stream, self.feedback_id_customer)


class PacingSettings(BaseModel):
    """The deployment's mailbox-provider groups and its caps on each (deliverability/group_caps.py),
    and its warm-up ramps per sending domain (deliverability/warmup.py),
    as JSON: `mailbox_groups` adds groups or domain patterns to the default table
    ({"comcast": ["comcast.net"]}); `pacing` caps groups in emails per second ({"google": 40}).
    The consumer's (which paces), the operator API's (which refuses a campaign's caps on a group
    the deployment does not know) and the events function's (which slows a group on deferrals).
    Kept as the JSON text: the settings are hashable (a runtime is cached by them)."""

    mailbox_groups: str = ""
    pacing: str = ""
    # The warm-up ramps per sending domain (deliverability/warmup.py), as JSON:
    # {"example.com": {"start": "2026-12-07", "daily": [500, 1000]}} or {..., "ramp": "double-from-500"}.
    warmup: str = ""

    @field_validator("mailbox_groups", "pacing", "warmup")
    @classmethod
    def _json_mapping(cls, value: str, info: Any) -> str:
        if value.strip() == "":
            return ""
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc.msg} at character {exc.pos})") from None
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        return value

    @model_validator(mode="after")
    def _groups_and_caps_agree(self) -> Any:
        try:
            self.group_pacing  # noqa: B018 - builds (validates) both tables
            self.warmup_schedules  # noqa: B018 - and the ramps
        except (MailboxGroupsError, WarmupError) as exc:
            raise ValueError(str(exc)) from None
        except TypeError:
            raise ValueError("mailbox_groups: expected {group: [domain patterns]}") from None
        return self

    @property
    def warmup_schedules(self) -> Warmup:
        return Warmup(parse_warmup(json.loads(self.warmup)) if self.warmup else {})

    @property
    def group_pacing(self) -> GroupPacing:
        groups = MailboxGroups()
        if self.mailbox_groups:
            groups = groups.extended(json.loads(self.mailbox_groups))
        caps = parse_pacing(json.loads(self.pacing), groups) if self.pacing else {}
        return GroupPacing(groups=groups, caps=caps)


class _ConsumerSettings(_WithProviders, _FeedbackIdSettings, PacingSettings):
    """What the SQS consumer needs; field names map to SENDONCE_<NAME> variables."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ledger_table: str = Field(min_length=3, max_length=255)
    campaigns_table: str = Field(min_length=3, max_length=255)
    dead_letter_queue_url: str = Field(pattern=r"^https?://")
    send_concurrency: int = Field(default=8, ge=1, le=64)
    provider_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    safety_margin_ms: int = Field(default=15_000, ge=1_000)
    max_receive_count: int = Field(default=5, ge=2)
    throttle_retries: int = Field(default=3, ge=0, le=10)
    # The shared send rate (docs/scale.md), each provider's from its own settings.
    shared_rate_limit: bool = True
    # Deliverability: the suppression list checked before every send, and the key and
    # base URL of the one-click unsubscribe link every email carries (docs/deliverability.md).
    suppressions_table: str | None = Field(default=None, min_length=3, max_length=255)
    unsubscribe_key_secret: str | None = Field(default=None, min_length=1)
    unsubscribe_base_url: str | None = Field(default=None, pattern=r"^https://")
    # Send windows (docs/operations-campaigns.md): where a consumer sets the schedule of a
    # window's next opening when the window pauses a campaign. All three or none (none: a
    # window still pauses, and only an operator's resume resumes).
    scheduler_group: str | None = Field(default=None, pattern=r"^[0-9a-zA-Z-_.]{1,64}$")
    scheduler_role_arn: str | None = Field(default=None, pattern=r"^arn:[^:]+:iam::\d{12}:role/.+$")
    scheduled_start_function_arn: str | None = Field(default=None, pattern=r"^arn:[^:]+:lambda:.+$")

    @model_validator(mode="after")
    def _scheduler_settings_go_together(self) -> ConsumerSettings:
        given = [self.scheduler_group, self.scheduler_role_arn, self.scheduled_start_function_arn]
        if any(given) and not all(given):
            raise ValueError("scheduler_group, scheduler_role_arn and scheduled_start_function_arn go together")
        return self

    @model_validator(mode="after")
    def _unsubscribe_needs_key_and_url(self) -> ConsumerSettings:
        if bool(self.unsubscribe_key_secret) != bool(self.unsubscribe_base_url):
            raise ValueError("unsubscribe_key_secret and unsubscribe_base_url go together")
        return self

    @model_validator(mode="after")
    def _margin_covers_one_provider_call(self) -> ConsumerSettings:
        # A claim taken with less time left than one provider call could be stranded
        # mid-call when the function is killed; the margin must cover a full call.
        if self.safety_margin_ms < self.provider_timeout_seconds * 1000:
            raise ValueError("safety_margin_ms must be at least provider_timeout_seconds * 1000")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Any:
        return _from_env(cls, environ)


def consumer_settings_model(providers: Mapping[str, Provider]) -> type[Any]:
    """The consumer's settings model for these providers (ConsumerSettings: the registered ones)."""
    return _ConsumerSettings.for_providers(providers)


class ConsumerSettings(consumer_settings_model(registered())):  # type: ignore[misc]
    """The consumer's settings with the registered providers' fields."""


class _ApiSettings(_WithProviders, _FeedbackIdSettings, PacingSettings):
    """What the operator API needs; of the providers' settings, the consumer's rates (a
    campaign's max_rate may not be above the rate the consumer paces its provider at); the
    consumer's Feedback-ID, which its previews show."""

    provider_part: ClassVar[str] = "rate_settings"
    model_config = ConfigDict(frozen=True, extra="forbid")

    ledger_table: str = Field(min_length=3, max_length=255)
    campaigns_table: str = Field(min_length=3, max_length=255)
    queue_url: str = Field(pattern=r"^https?://")
    dead_letter_queue_url: str = Field(pattern=r"^https?://")
    # Where long operations go as jobs (domain/jobs); without it they run in process.
    jobs_queue_url: str | None = Field(default=None, pattern=r"^https?://")
    # Campaigns created here are counted from their creation: set where the counters'
    # aggregator runs (the stack always; local runs with the stream poller).
    counters: bool = False
    # The suppression list a forecast reads (read only; none: a forecast says it was not checked).
    suppressions_table: str | None = Field(default=None, min_length=3, max_length=255)
    # Scheduled sends (docs/operations-campaigns.md): the stack's schedule group, the role
    # EventBridge Scheduler assumes, and the function each campaign's schedule invokes.
    # All three or none (none: a send_at is refused).
    scheduler_group: str | None = Field(default=None, pattern=r"^[0-9a-zA-Z-_.]{1,64}$")
    scheduler_role_arn: str | None = Field(default=None, pattern=r"^arn:[^:]+:iam::\d{12}:role/.+$")
    scheduled_start_function_arn: str | None = Field(default=None, pattern=r"^arn:[^:]+:lambda:.+$")

    @model_validator(mode="after")
    def _scheduler_settings_go_together(self) -> _ApiSettings:
        given = [self.scheduler_group, self.scheduler_role_arn, self.scheduled_start_function_arn]
        if any(given) and not all(given):
            raise ValueError("scheduler_group, scheduler_role_arn and scheduled_start_function_arn go together")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Any:
        return _from_env(cls, environ)


class ApiSettings(_ApiSettings.for_providers(registered())):  # type: ignore[misc]
    """The operator API's settings with the registered providers' fields."""


class _JobsSettings(_WithProviders, PacingSettings):
    """The jobs worker: long operations on a campaign, a page a step (domain/jobs). The
    providers' fields are the consumer's (an audit job reads the provider's own records
    with the campaign's provider's settings, as the consumer sends with them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ledger_table: str = Field(min_length=3, max_length=255)
    campaigns_table: str = Field(min_length=3, max_length=255)
    queue_url: str = Field(pattern=r"^https?://")
    dead_letter_queue_url: str = Field(pattern=r"^https?://")
    jobs_queue_url: str = Field(pattern=r"^https?://")
    counters: bool = False  # as ApiSettings.counters (the worker creates no campaign)
    # As ApiSettings.suppressions_table: what a forecast_s3 job's parts read.
    suppressions_table: str | None = Field(default=None, min_length=3, max_length=255)
    provider_timeout_seconds: float = Field(default=10.0, gt=0, le=60)  # an audit's provider reads

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Any:
        return _from_env(cls, environ)


class JobsSettings(_JobsSettings.for_providers(registered())):  # type: ignore[misc]
    """The jobs worker's settings with the registered providers' fields."""


_TABLE = dict(min_length=3, max_length=255)


class AggregatorSettings(BaseModel):
    """The counters' aggregator: the ledger's and the campaigns table's streams."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    campaigns_table: str = Field(**_TABLE)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AggregatorSettings:
        return _from_env(cls, environ)


class AccountHealthSettings(BaseModel):
    """The account health check: a provider's account read on a schedule, its sending
    campaigns paused when it cannot send (domain/deliverability/account_health.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    campaigns_table: str = Field(**_TABLE)
    # The provider whose account is read: a registered one with an account state to read.
    provider: str = Field(min_length=1)

    @field_validator("provider")
    @classmethod
    def _has_an_account(cls, name: str) -> str:
        readable = sorted(n for n, p in registered().items() if p.account is not None)
        if name not in readable:
            raise ValueError(f"{name!r} is not a provider whose account can be read ({', '.join(readable)})")
        return name

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AccountHealthSettings:
        return _from_env(cls, environ)


class _EventsSettings(_WithProviders, PacingSettings):
    """The events function: provider events from an event bus and webhooks over HTTP."""

    provider_part: ClassVar[str] = "events_settings"
    model_config = ConfigDict(frozen=True, extra="forbid")

    ledger_table: str = Field(**_TABLE)
    campaigns_table: str = Field(**_TABLE)
    suppressions_table: str = Field(**_TABLE)
    complaint_rate_threshold: float = Field(default=0.001, gt=0, lt=1)
    hard_bounce_rate_threshold: float = Field(default=0.05, gt=0, lt=1)
    brake_min_sent: int = Field(default=100, ge=1)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Any:
        return _from_env(cls, environ)


def events_settings_model(providers: Mapping[str, Provider]) -> type[Any]:
    """The events function's settings model for these providers."""
    return _EventsSettings.for_providers(providers)


class EventsSettings(events_settings_model(registered())):  # type: ignore[misc]
    """The events function's settings with the registered providers' fields."""


class UnsubscribeSettings(BaseModel):
    """The unsubscribe function behind the HTTP API's custom domain."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    suppressions_table: str = Field(**_TABLE)
    unsubscribe_key_secret: str = Field(min_length=1)
    # The click is also noted on the delivery's ledger record when this is set.
    ledger_table: str | None = Field(default=None, **_TABLE)
    campaigns_table: str | None = Field(default=None, **_TABLE)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> UnsubscribeSettings:
        return _from_env(cls, environ)


def _from_env(model: type[BaseModel], environ: Mapping[str, str]):
    if str(environ.get(contract.POWERTOOLS_IDEMPOTENCY_DISABLED, "")).lower() in {"1", "true", "yes", "on"}:
        # Powertools would silently skip the delivery ledger: refuse to start instead.
        raise SettingsError(
            f"{contract.POWERTOOLS_IDEMPOTENCY_DISABLED} is set: sendonce refuses to send without its ledger"
        )
    values = {}
    for name in model.model_fields:
        variable = contract.env_name(name)
        if environ.get(variable, "") != "":
            values[name] = environ[variable]
    for name, variable in getattr(model, "env_fallbacks", {}).items():
        if name not in values and environ.get(variable):
            values[name] = environ[variable]
    try:
        return model(**values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{contract.env_name('.'.join(str(p) for p in err['loc'])) if err['loc'] else '(settings)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise SettingsError(f"invalid {model.__name__}: {problems}") from exc
