"""A campaign spec as an operator writes it (YAML/JSON spec file or the API's POST body),
validated the same way for the CLI and the HTTP API. Its refusals are worded by
input_rules.py; sizes come from sendonce.domain.limits (docs/limits.md).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.config import JsonDict

from sendonce.domain import limits
from sendonce.domain.campaigns.input_rules import (
    LINE_PATTERN,
    PROVIDER_PATTERN,
    SEND_AT_PATTERN,
    SENDER_PATTERN,
    SUBJECT_PATTERN,
)
from sendonce.domain.campaigns.scheduling import EXAMPLE as SEND_AT_EXAMPLE
from sendonce.domain.campaigns.scheduling import parse_instant
from sendonce.domain.campaigns.share_input import GROUP_NAME_PATTERN, MaxRate, PacingCap, Priority, Weight
from sendonce.domain.campaigns.windows import SendWindow
from sendonce.domain.errors import InvalidCampaignError
from sendonce.domain.models import Campaign, Content, Identifier, Tracking
from sendonce.domain.sending.shards import DEFAULT_LEDGER_SHARDS, MAX_LEDGER_SHARDS


def _utf8_size(value: str | None, what: str, most: int) -> str | None:
    if value is not None and len(value.encode("utf-8", "surrogatepass")) > most:
        raise ValueError(f"{what} is longer than {most:,} bytes (UTF-8); see docs/limits.md")
    return value


# Which providers exist, and which accept batch mode, is the provider registry's to say
# (sendonce.adapters.providers.registry): the campaign service is given both and refuses
# any other campaign (400, naming the providers it knows).

# What the validators below enforce across fields, stated in the JSON schema as well.
_SPEC_SCHEMA: JsonDict = {
    "anyOf": [
        {"required": ["html"], "properties": {"html": {"type": "string", "minLength": 1}}},
        {"required": ["text"], "properties": {"text": {"type": "string", "minLength": 1}}},
    ],
    "oneOf": [
        {"properties": {"delivery_mode": {"enum": ["single"]}}},
        {"required": ["delivery_mode"], "properties": {"delivery_mode": {"enum": ["batch"]}}},
    ],
}


class CampaignSpec(BaseModel):
    """A campaign as an operator writes it (YAML/JSON spec file or the API's POST body)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra=_SPEC_SCHEMA)

    id: Identifier = Field(description="The campaign id: letters, digits, '_' and '-'.")
    name: str = Field(min_length=1, max_length=limits.CAMPAIGN_NAME_CHARS, pattern=LINE_PATTERN)
    subject: str = Field(
        min_length=1,
        max_length=limits.SUBJECT_CHARS,
        pattern=SUBJECT_PATTERN,
        description="Jinja template; not HTML; one line without control characters.",
    )
    sender: str = Field(
        alias="from",
        min_length=3,
        max_length=limits.SENDER_CHARS,
        pattern=SENDER_PATTERN,
        description=f"From address: a@example.com or Name <a@example.com>, at most {limits.SENDER_CHARS} "
        "characters in all; no line breaks or control characters.",
    )
    reply_to: str | None = Field(
        default=None, max_length=limits.SENDER_CHARS, pattern=SENDER_PATTERN, description="Same rules as from."
    )
    html: str | None = Field(
        default=None,
        max_length=limits.HTML_BYTES,
        description=f"Jinja template; variables are HTML-escaped. At most {limits.HTML_BYTES:,} bytes (UTF-8).",
    )
    text: str | None = Field(
        default=None,
        max_length=limits.TEXT_BYTES,
        description=f"Jinja template for the plain-text part. At most {limits.TEXT_BYTES:,} bytes (UTF-8).",
    )
    provider: str = Field(
        pattern=PROVIDER_PATTERN,
        description="A registered provider (docs/architecture.md, 'Providers'); an unknown one is refused (400).",
    )
    delivery_mode: Literal["single", "batch"] = Field(
        default="single",
        description="single: one provider request per recipient; batch: one per SQS message of up to 100 "
        "recipients (needs a provider whose capabilities allow it: docs/architecture.md, 'Providers').",
    )
    ledger_shards: int = Field(
        default=DEFAULT_LEDGER_SHARDS,
        ge=1,
        le=MAX_LEDGER_SHARDS,
        description="How many partition-key values the campaign's ledger is spread over; fixed at creation. "
        f"The default ({DEFAULT_LEDGER_SHARDS}) keeps the hottest one under 0.1 write units per recipient "
        "(docs/scale.md); fewer make whole-campaign reads cheaper for small campaigns.",
    )
    send_at: str | None = Field(
        default=None,
        pattern=SEND_AT_PATTERN,
        json_schema_extra={"format": "date-time"},
        description="When the send starts: ISO 8601 with a UTC offset (2026-12-02T09:00:00+01:00 or ...Z), to "
        "the second, in the future. Publishing records the recipients at once and the campaign waits in "
        "`scheduled` until then (docs/operations-campaigns.md).",
    )

    window: SendWindow | None = Field(
        default=None,
        description="When it may send: {days: [mon..sun], from: HH:MM, to: HH:MM, tz: IANA zone}; a `to` at or "
        "before `from` spans midnight (equal: 24 hours). Outside it the campaign pauses by itself and resumes at the "
        "next opening (docs/operations-campaigns.md).",
    )
    # Its share of the provider's rate while other campaigns send (campaigns/share_input.py).
    weight: Weight = 1
    priority: Priority = "normal"
    max_rate: MaxRate = None
    pacing: dict[Annotated[str, Field(pattern=GROUP_NAME_PATTERN)], PacingCap] = Field(
        default_factory=dict,
        description="Caps per mailbox-provider group in emails per second for this campaign ({google: 40, "
        "microsoft: 20}), under the deployment's own (docs/deliverability.md#pacing-per-mailbox-provider). A group "
        "the deployment does not know is refused (409, naming it).",
        # Every key is a group name (patternProperties): no other key is a cap.
        json_schema_extra={"additionalProperties": False},
    )

    tracking: Tracking | None = Field(
        default=None,
        description="Which engagement to record: {opens: true, clicks: true}, each off unless set "
        "(docs/deliverability.md#opens-and-clicks). The provider must track them too: SES through the stack's "
        "tracked configuration set, Resend through the sending domain's open and click tracking.",
    )

    @field_validator("ledger_shards", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        # JSON Schema's integer: 71 and 71.0 are the same number; "71" and true are not numbers.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("not a number")
        return value

    @field_validator("send_at", mode="before")
    @classmethod
    def _instant(cls, value: Any) -> Any:
        # YAML reads an unquoted time as a datetime: back to the text it was, offset and all.
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                raise ValueError(f"has no UTC offset; say which zone it is in ({SEND_AT_EXAMPLE}, or Z for UTC)")
            return value.isoformat()
        if isinstance(value, str):
            try:
                parse_instant(value, what="send_at")
            except InvalidCampaignError as exc:
                raise ValueError(str(exc).removeprefix("send_at: ")) from None
        return value

    @field_validator("html")
    @classmethod
    def _html_size(cls, value: str | None) -> str | None:
        return _utf8_size(value, "html", limits.HTML_BYTES)

    @field_validator("text")
    @classmethod
    def _text_size(cls, value: str | None) -> str | None:
        return _utf8_size(value, "text", limits.TEXT_BYTES)

    @model_validator(mode="after")
    def _some_body(self) -> CampaignSpec:
        if not self.html and not self.text:
            raise ValueError("html or text is required")
        return self

    def to_campaign(self) -> Campaign:
        return Campaign(
            campaign_id=self.id,
            name=self.name,
            provider=self.provider,
            sender=self.sender,
            reply_to=self.reply_to,
            content=Content(subject=self.subject, html=self.html, text=self.text),
            delivery_mode=self.delivery_mode,
            ledger_shards=self.ledger_shards,
            send_at_ms=parse_instant(self.send_at) if self.send_at else None,
            window=self.window,
            weight=self.weight,
            priority=self.priority,
            max_rate=self.max_rate,
            pacing=dict(self.pacing),
            tracking=self.tracking if self.tracking and (self.tracking.opens or self.tracking.clicks) else None,
        )
