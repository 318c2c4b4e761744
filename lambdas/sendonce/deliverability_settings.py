"""Settings of the deliverability functions (provider events, one-click unsubscribe). Same
rules as sendonce.settings: SENDONCE_<NAME> variables, validated at cold start, secrets only
by name. (The consumer's fields, suppressions_table, unsubscribe_key_secret and
unsubscribe_base_url, belong to ConsumerSettings.)"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from sendonce.settings import _from_env

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

