"""Settings for the Lambda functions, validated once at cold start.

One model per function (consumer, operator API, events, unsubscribe). Every value comes
from the function's environment (set by the CDK stack) as a SENDONCE_<FIELD> variable
(`sendonce.contract.env_name`). Secrets are never here: only the *name* of the Secrets
Manager secret that holds each one.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sendonce import contract
from sendonce.domain.errors import SettingsError


class ConsumerSettings(BaseModel):
    """What the SQS consumer needs; field names map to SENDONCE_<NAME> variables."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ledger_table: str = Field(min_length=3, max_length=255)
    campaigns_table: str = Field(min_length=3, max_length=255)
    dead_letter_queue_url: str = Field(pattern=r"^https?://")
    resend_api_key_secret: str | None = Field(default=None, min_length=1)
    resend_api_url: str | None = Field(default=None, pattern=r"^https?://")
    ses_configuration_set: str | None = None
    send_concurrency: int = Field(default=8, ge=1, le=64)
    provider_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    safety_margin_ms: int = Field(default=15_000, ge=1_000)
    max_receive_count: int = Field(default=5, ge=2)
    throttle_retries: int = Field(default=3, ge=0, le=10)
    # The shared send rate (docs/scale.md): SES recipients per second (capped further by the
    # account's MaxSendRate when GetAccount answers); Resend's team limit in requests per
    # second, assumed until Resend's ratelimit-limit header states it (5: Resend's documented
    # default), paced less `resend_rate_reserve` requests per second.
    ses_send_rate: float = Field(default=14.0, gt=0, le=100_000)
    resend_requests_per_second: float = Field(default=5.0, gt=0, le=1_000)
    resend_rate_from_headers: bool = True
    resend_rate_reserve: float = Field(default=1.0, ge=0, le=100)
    shared_rate_limit: bool = True
    # Deliverability: the suppression list checked before every send, and the key and
    # base URL of the one-click unsubscribe link every email carries (docs/deliverability.md).
    suppressions_table: str | None = Field(default=None, min_length=3, max_length=255)
    unsubscribe_key_secret: str | None = Field(default=None, min_length=1)
    unsubscribe_base_url: str | None = Field(default=None, pattern=r"^https://")

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
    def from_env(cls, environ: Mapping[str, str]) -> ConsumerSettings:
        return _from_env(cls, environ)


class ApiSettings(BaseModel):
    """What the operator API needs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ledger_table: str = Field(min_length=3, max_length=255)
    campaigns_table: str = Field(min_length=3, max_length=255)
    queue_url: str = Field(pattern=r"^https?://")
    dead_letter_queue_url: str = Field(pattern=r"^https?://")
    # Scheduled sends (docs/operations-campaigns.md): the stack's schedule group, the role
    # EventBridge Scheduler assumes, and the function each campaign's schedule invokes.
    # All three or none (none: a send_at is refused).
    scheduler_group: str | None = Field(default=None, pattern=r"^[0-9a-zA-Z-_.]{1,64}$")
    scheduler_role_arn: str | None = Field(default=None, pattern=r"^arn:[^:]+:iam::\d{12}:role/.+$")
    scheduled_start_function_arn: str | None = Field(default=None, pattern=r"^arn:[^:]+:lambda:.+$")

    @model_validator(mode="after")
    def _scheduler_settings_go_together(self) -> ApiSettings:
        given = [self.scheduler_group, self.scheduler_role_arn, self.scheduled_start_function_arn]
        if any(given) and not all(given):
            raise ValueError("scheduler_group, scheduler_role_arn and scheduled_start_function_arn go together")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ApiSettings:
        return _from_env(cls, environ)


_TABLE = dict(min_length=3, max_length=255)


class EventsSettings(BaseModel):
    """The events function: SES events from EventBridge and Resend webhooks over HTTP."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ledger_table: str = Field(**_TABLE)
    campaigns_table: str = Field(**_TABLE)
    suppressions_table: str = Field(**_TABLE)
    # Name of the Secrets Manager secret holding Resend's `whsec_...` signing secret;
    # without it every webhook is refused (SES events still work).
    resend_webhook_secret: str | None = Field(default=None, min_length=1)
    complaint_rate_threshold: float = Field(default=0.001, gt=0, lt=1)
    hard_bounce_rate_threshold: float = Field(default=0.05, gt=0, lt=1)
    brake_min_sent: int = Field(default=100, ge=1)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> EventsSettings:
        return _from_env(cls, environ)


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
    if (
        "resend_api_url" in model.model_fields
        and "resend_api_url" not in values
        and environ.get(contract.RESEND_API_URL)
    ):
        values["resend_api_url"] = environ[contract.RESEND_API_URL]
    try:
        return model(**values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{contract.env_name('.'.join(str(p) for p in err['loc'])) if err['loc'] else '(settings)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise SettingsError(f"invalid {model.__name__}: {problems}") from exc
