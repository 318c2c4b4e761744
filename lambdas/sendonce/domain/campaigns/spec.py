"""A campaign spec as an operator writes it (YAML/JSON spec file or the API's POST body),
validated the same way for the CLI and the HTTP API. Its refusals are worded by
input_rules.py; sizes come from sendonce.domain.limits (docs/limits.md). An A/B campaign
(campaigns/variants.py) gives `variants` and `test` together.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.config import JsonDict
from pydantic_core import InitErrorDetails, PydanticCustomError

from sendonce.domain import limits
from sendonce.domain.campaigns.input_rules import (
    AFTER_PATTERN,
    LINE_PATTERN,
    PROVIDER_PATTERN,
    SEND_AT_PATTERN,
    SENDER_PATTERN,
    SHARE_LEAST,
    SHARE_MOST,
    SUBJECT_PATTERN,
)
from sendonce.domain.campaigns.scheduling import EXAMPLE as SEND_AT_EXAMPLE
from sendonce.domain.campaigns.scheduling import parse_instant
from sendonce.domain.campaigns.share_input import GROUP_NAME_PATTERN, MaxRate, PacingCap, Priority, Weight
from sendonce.domain.campaigns.variants import (
    FEWEST_VARIANTS,
    MOST_VARIANTS,
    VARIANT_ID_PATTERN,
    AbTest,
    Variant,
    duration_s,
)
from sendonce.domain.campaigns.windows import SendWindow
from sendonce.domain.errors import ConflictingRequestError, InvalidCampaignError
from sendonce.domain.models import Campaign, Content, Identifier, Tracking
from sendonce.domain.sending.shards import DEFAULT_LEDGER_SHARDS, MAX_LEDGER_SHARDS


def _utf8_size(value: str | None, what: str, most: int) -> str | None:
    if value is not None and len(value.encode("utf-8", "surrogatepass")) > most:
        raise ValueError(f"{what} is longer than {most:,} bytes (UTF-8); see docs/limits.md")
    return value


def _refuse(problems: Sequence[tuple[tuple[str, ...], str, str]]) -> NoReturn:
    """A refusal across fields, located at the field it names (loc, error type, message): raised
    inside a validator, pydantic reports it under the spec's own location (`body.test.pick_by`)."""
    raise ValidationError.from_exception_data(
        "CampaignSpec",
        [
            InitErrorDetails(type=PydanticCustomError(kind, "{rule}", {"rule": message}), loc=loc, input=None)
            for loc, kind, message in problems
        ],
    )


def _a_number(value: Any) -> Any:
    # JSON Schema's number: 0.2 and 1 are numbers; "0.2" and true are not.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("not a number")
    return value


_COUNT = f"{FEWEST_VARIANTS} to {MOST_VARIANTS}"


def _never_null(schema: JsonDict) -> None:
    """A field that may be left out but not given as null (the `_not_null` validator), as its
    schema says: JSON Schema's `required` counts a null as given, so a null could not be told
    from a value in the rules across fields (`subject` or `variants`, `variants` with `test`)."""
    branches = schema.pop("anyOf", None)
    if isinstance(branches, list):
        (kept,) = (b for b in branches if b != {"type": "null"})
        schema.update(kept)  # type: ignore[arg-type]
    schema.pop("default", None)


def _with_body(field: str) -> JsonDict:
    return {"required": [field], "properties": {field: {"type": "string", "minLength": 1}}}


def _tracked(pick_by: str) -> JsonDict:
    """`test.pick_by: X` needs `tracking.X: true`, as a JSON Schema rule."""
    return {
        "if": {"required": ["test"], "properties": {"test": {"properties": {"pick_by": {"const": pick_by}}}}},
        "then": {
            "required": ["tracking"],
            "properties": {
                "tracking": {"type": "object", "required": [pick_by], "properties": {pick_by: {"const": True}}}
            },
        },
    }


# Which providers exist, and which accept batch mode, is the provider registry's to say
# (sendonce.adapters.providers.registry): the campaign service is given both and refuses
# any other campaign (400, naming the providers it knows).

# What the validators below enforce across fields, stated in the JSON schema as well (but that
# variant ids are unique, which JSON Schema cannot say: a repeated one is refused by to_campaign).
_SPEC_SCHEMA: JsonDict = {
    "anyOf": [
        _with_body("html"),
        _with_body("text"),
        {
            "required": ["variants"],
            "properties": {"variants": {"items": {"anyOf": [_with_body("html"), _with_body("text")]}}},
        },
    ],
    "oneOf": [
        {"properties": {"delivery_mode": {"enum": ["single"]}}},
        {"required": ["delivery_mode"], "properties": {"delivery_mode": {"enum": ["batch"]}}},
    ],
    "allOf": [
        {"anyOf": [{"required": ["subject"]}, {"required": ["variants"]}]},
        _tracked("opens"),
        _tracked("clicks"),
    ],
    "dependentRequired": {"variants": ["test"], "test": ["variants"]},
}


class _SizedBodies(BaseModel):
    """The byte sizes of `html` and `text` (UTF-8), for the campaign's and each variant's."""

    @field_validator("html", check_fields=False)
    @classmethod
    def _html_size(cls, value: str | None) -> str | None:
        return _utf8_size(value, "html", limits.HTML_BYTES)

    @field_validator("text", check_fields=False)
    @classmethod
    def _text_size(cls, value: str | None) -> str | None:
        return _utf8_size(value, "text", limits.TEXT_BYTES)


class VariantSpec(_SizedBodies):
    """One variant of an A/B campaign: its subject, and its own html / text where it has them."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=VARIANT_ID_PATTERN, description="1-8 letters, digits, '_' and '-'; unique in the spec.")
    subject: str = Field(
        min_length=1,
        max_length=limits.SUBJECT_CHARS,
        pattern=SUBJECT_PATTERN,
        description="Jinja template, as the campaign's subject.",
    )
    html: str | None = Field(
        default=None, max_length=limits.HTML_BYTES, description="Its own HTML template; default: the campaign's."
    )
    text: str | None = Field(
        default=None, max_length=limits.TEXT_BYTES, description="Its own text template; default: the campaign's."
    )


class AbTestSpec(BaseModel):
    """How an A/B campaign picks its winner (campaigns/variants.py)."""

    model_config = ConfigDict(extra="forbid")

    share: Annotated[
        Annotated[float, Field(ge=SHARE_LEAST, le=SHARE_MOST, allow_inf_nan=False)], BeforeValidator(_a_number)
    ] = Field(
        description=f"The share of the recipients in the test, {SHARE_LEAST:g} to {SHARE_MOST:g} (0.2: a fifth), "
        "each sent one variant; the rest wait for the winner."
    )
    pick_by: Literal["opens", "clicks"] = Field(
        description="The winner is the variant with the highest rate of unique opens (or clicks) per email sent; "
        "needs tracking of the same kind."
    )
    after: str = Field(
        pattern=AFTER_PATTERN,
        description="When the winner is picked, after the send starts: 30m, 4h, 2d (1m to 30d).",
    )


Variants = Annotated[list[VariantSpec], Field(min_length=FEWEST_VARIANTS, max_length=MOST_VARIANTS)]


class CampaignSpec(_SizedBodies):
    """A campaign as an operator writes it (YAML/JSON spec file or the API's POST body)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra=_SPEC_SCHEMA)

    id: Identifier = Field(description="The campaign id: letters, digits, '_' and '-'.")
    name: str = Field(min_length=1, max_length=limits.CAMPAIGN_NAME_CHARS, pattern=LINE_PATTERN)
    subject: str | None = Field(
        default=None,
        json_schema_extra=_never_null,
        min_length=1,
        max_length=limits.SUBJECT_CHARS,
        pattern=SUBJECT_PATTERN,
        description="Jinja template; not HTML; one line without control characters. Required unless the spec "
        "has variants (then the first variant's subject by default).",
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

    # An A/B test (docs/operations-campaigns.md#ab-tests): both or neither.
    variants: Variants | None = Field(
        default=None,
        json_schema_extra=_never_null,
        description=f"An A/B test's {FEWEST_VARIANTS} to {MOST_VARIANTS} variants: [{{id, subject, html, text}}, "
        "...], the first the control. A variant without html or text uses the campaign's; html or text may then "
        "be left out of the campaign if every variant has its own. Needs `test`.",
    )
    test: AbTestSpec | None = Field(
        default=None,
        json_schema_extra=_never_null,
        description="How the winner of the variants is picked: {share: 0.2, pick_by: opens, after: 4h}. The "
        "share is sent at once, one variant each; the rest wait until the winner is picked (after `after`, or by "
        "hand) and are sent it. Needs `variants`.",
    )

    @field_validator("subject", "variants", "test", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:  # only an explicit null: a default is not validated
            raise ValueError("may be left out, not null")
        return value

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

    @model_validator(mode="after")
    def _some_body(self) -> CampaignSpec:
        variants = self.variants or []
        if not self.html and not self.text and not (variants and all(v.html or v.text for v in variants)):
            without = [v.id for v in variants if not (v.html or v.text)]
            raise ValueError(
                "html or text is required"
                + (f" (in the campaign, or in every variant: none in {', '.join(without)})" if without else "")
            )
        return self

    @model_validator(mode="after")
    def _ab_test(self) -> CampaignSpec:
        """The rules across fields, each refused at the field it names."""
        problems: list[tuple[tuple[str, ...], str, str]] = []
        if self.variants is None and self.subject is None:
            problems.append((("subject",), "missing", "Field required"))
        if self.test is None and self.variants is not None:
            problems.append((("test",), "missing", "required with variants: {share, pick_by, after} picks the winner"))
        if self.variants is None and self.test is not None:
            problems.append(
                (("variants",), "missing", f"required with test: {_COUNT} variants [{{id, subject, html, text}}, ...]")
            )
        if self.test is not None and not (self.tracking is not None and getattr(self.tracking, self.test.pick_by)):
            by = self.test.pick_by
            rule = f"{by} needs tracking.{by}: true (the winner is picked by the {by} recorded)"
            problems.append((("test", "pick_by"), "spec_rule", rule))
        templates = [self.html, self.text, *(t for v in self.variants or () for t in (v.html, v.text))]
        if sum(len(t.encode("utf-8", "surrogatepass")) for t in templates if t) > limits.TEMPLATES_BYTES:
            rule = (
                f"html and text of the campaign and its variants are longer than {limits.TEMPLATES_BYTES:,} bytes "
                "(UTF-8) together; see docs/limits.md"
            )
            problems.append((("variants",), "spec_rule", rule))
        if problems:
            _refuse(problems)
        return self

    def to_campaign(self) -> Campaign:
        """The campaign; ConflictingRequestError for a variant id given twice (a well-formed spec
        by its JSON Schema, which cannot say ids are unique: the API's 409)."""
        variants = tuple(
            Variant(id=v.id, subject=v.subject, html=v.html or None, text=v.text or None) for v in self.variants or ()
        )
        seen: set[str] = set()
        for index, variant in enumerate(variants):
            if variant.id in seen:
                raise ConflictingRequestError(
                    f"variants: variant id {variant.id!r} is given twice (variants.{index}.id); each needs its own"
                )
            seen.add(variant.id)
        ab_test = None
        if self.test is not None:
            ab_test = AbTest(
                variants=tuple(v.id for v in variants),
                share=self.test.share,
                pick_by=self.test.pick_by,
                after_s=duration_s(self.test.after),
            )
        return Campaign(
            campaign_id=self.id,
            name=self.name,
            provider=self.provider,
            sender=self.sender,
            reply_to=self.reply_to,
            content=Content(
                subject=self.subject or variants[0].subject, html=self.html, text=self.text, variants=variants
            ),
            ab_test=ab_test,
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
