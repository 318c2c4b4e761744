"""The operator API's bodies and answers as Pydantic models (what the OpenAPI document
states and Powertools validates), and the documented responses of each route. The routes
are in handlers/api.py."""

# No `from __future__ import annotations`: Powertools reads these annotations at runtime.

import copy
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.openapi.params import Path
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from sendonce.adapters.providers import registry
from sendonce.domain import limits
from sendonce.domain.campaigns.input_rules import (
    LINE_PATTERN,
    SEND_AT_PATTERN,
)
from sendonce.domain.campaigns.picks import PickResult
from sendonce.domain.campaigns.recipients_file import InlineRecipient
from sendonce.domain.campaigns.scheduling import iso
from sendonce.domain.campaigns.service import DeliveryStatus
from sendonce.domain.campaigns.spec import (
    CampaignSpec as SpecModel,
)
from sendonce.domain.campaigns.variants import VARIANT_ID_PATTERN, AbTest, Decision
from sendonce.domain.jobs.models import Job
from sendonce.domain.models import ID_PATTERN, Campaign, Tracking
from sendonce.handlers import preview_routes
from sendonce.handlers.api_links import campaign_links, job_links

INLINE_RECIPIENTS_MAX = limits.INLINE_RECIPIENTS
CampaignId = Annotated[str, Path(pattern=ID_PATTERN, description="The campaign id.")]


# --- bodies and responses ------------------------------------------------------------


class CampaignView(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    campaign_id: str
    name: str
    provider: str
    sender: str = Field(alias="from")
    reply_to: str | None = None
    subject: str
    delivery_mode: Literal["single", "batch"]
    state: str
    state_reason: str | None = None
    state_changed_by: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    send_at: str | None = Field(
        default=None, description="When the send starts (or started), UTC; set while scheduled."
    )
    weight: int = Field(description="Its share of the provider's rate against the others of its priority.")
    priority: Literal["normal", "high"]
    max_rate: float | None = Field(default=None, description="Its cap in provider requests per second; null: none.")
    pacing: dict[str, float] = Field(
        default_factory=dict, description="Its own caps per mailbox group, emails per second; {}: none."
    )
    tracking: Tracking | None = Field(default=None, description="The opens and clicks it records; null: neither.")
    ab_test: AbTest | None = Field(
        default=None,
        description="Its A/B test: the variants, the share of recipients sent one each, what picks the winner and "
        "after how many seconds from the start (after_s); null: none.",
    )
    decision: Decision | None = Field(
        default=None, description="The A/B test's winner once recorded (who, when, why, on what figures); null: none."
    )

    @classmethod
    def of(cls, campaign: Campaign) -> "CampaignView":
        return cls(
            campaign_id=campaign.campaign_id,
            name=campaign.name,
            provider=campaign.provider,
            sender=campaign.sender,
            reply_to=campaign.reply_to,
            subject=campaign.subject or "",
            delivery_mode=campaign.delivery_mode,
            state=campaign.state.value,
            state_reason=campaign.state_reason,
            state_changed_by=campaign.state_changed_by,
            created_at=campaign.created_at,
            updated_at=campaign.updated_at,
            send_at=iso(campaign.send_at_ms) if campaign.send_at_ms is not None else None,
            weight=campaign.weight,
            priority=campaign.priority,
            max_rate=campaign.max_rate,
            pacing=campaign.pacing,
            tracking=campaign.tracking,
            ab_test=campaign.ab_test,
            decision=campaign.decision,
        )


class CampaignListItem(CampaignView):
    open_batches: int = Field(
        description="Published batches whose message is not yet acknowledged with every recipient ended (a hint read "
        "from the campaign item; delivery-status counts from the ledger)."
    )

    @classmethod
    def of(cls, campaign: Campaign) -> "CampaignListItem":
        return cls(**CampaignView.of(campaign).model_dump(), open_batches=max(campaign.open_batches, 0))


class CampaignList(BaseModel):
    campaigns: list[CampaignListItem] = Field(description="Sorted by campaign id.")


class S3Location(BaseModel):
    # Without `format` the key's extension must name it (as format_for decides).
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": ["format"], "properties": {"format": {"enum": ["csv", "jsonl"]}}},
                {
                    "properties": {
                        "key": {"pattern": r"\.([cC][sS][vV]|[jJ][sS][oO][nN][lL]|[nN][dD][jJ][sS][oO][nN])$"}
                    }
                },
            ]
        },
    )

    bucket: str = Field(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    key: str = Field(min_length=1, max_length=1024, pattern=LINE_PATTERN)
    format: Literal["csv", "jsonl"] | None = Field(default=None, description="Default: from the key's extension.")


class PublishBody(BaseModel):
    """Exactly one of `recipients` (inline, at most 1,000) or `s3` (a CSV or JSON Lines object)."""

    # The schema states the rule the validator enforces; neither field may be null.
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"oneOf": [{"required": ["recipients"]}, {"required": ["s3"]}]}
    )

    recipients: list[InlineRecipient] = Field(default=None, min_length=1, max_length=INLINE_RECIPIENTS_MAX)
    s3: S3Location = Field(default=None)
    # StrictBool: JSON's true or false, as the document says; pydantic would read 0, 1, "yes" too.
    strict: StrictBool = Field(
        default=True,
        description="S3 only: with true (default) one bad row rejects the whole file before anything is "
        "published; with false bad rows are skipped and reported.",
    )
    dedupe_addresses: StrictBool = Field(
        default=False,
        description="Send an address given under several recipient ids once (the first). Without it each is sent "
        "and the repeats are counted in duplicate_addresses.",
    )
    send_at: str = Field(
        default=None,
        pattern=SEND_AT_PATTERN,
        json_schema_extra={"format": "date-time"},
        description="Schedule the send (a draft only): ISO 8601 with a UTC offset, in the future. The recipients "
        "are recorded now and none enqueued; the campaign waits in `scheduled` until then.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> "PublishBody":
        if (self.recipients is None) == (self.s3 is None):
            raise ValueError("give exactly one of recipients or s3")
        return self


class PublishResult(BaseModel):
    campaign_id: str
    accepted: int = Field(description="Recipients recorded and enqueued (or found already enqueued).")
    bad_rows: int = 0
    duplicates: int = Field(description="Rows whose recipient_id appeared before; each is published once.")
    duplicate_addresses: int = Field(
        default=0, description="Rows whose address appeared before under another recipient_id."
    )
    problems: list[str] = Field(
        default_factory=list,
        description="The first 100 reported rows, as 'LINE: reason' (S3) or 'recipients.N: reason' (inline).",
    )
    batches_new: int
    batches_already_enqueued: int
    messages_sent: int
    batches_recorded: int = Field(default=0, description="Scheduled: batches recorded, enqueued when the send starts.")
    send_at: str | None = Field(default=None, description="Scheduled: when the send starts, UTC.")


def _spec_schema(schema: dict[str, Any]) -> None:
    # CampaignSpec's own schema rules, then the registry's providers (the OpenAPI document
    # says which providers exist, as the published JSON Schema does).
    schema.update(copy.deepcopy(SpecModel.model_config.get("json_schema_extra") or {}))  # type: ignore[arg-type]
    registry.annotate_spec_schema(schema)


class CampaignSpec(SpecModel):
    """A campaign as an operator writes it; which providers exist is the registry's to say."""

    model_config = ConfigDict(json_schema_extra=_spec_schema)


class TransitionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=500)


class PickBody(TransitionBody):
    variant: str | None = Field(
        default=None,
        pattern=VARIANT_ID_PATTERN,
        description="The winner, one of the campaign's variants; absent or null: picked by the test's figures so far.",
    )


class PickView(BaseModel):
    campaign_id: str
    variant: str = Field(description="The winner that stands.")
    decided_now: bool = Field(
        description="false: a winner was recorded before; it stands and this pick changed nothing."
    )
    decision: Decision = Field(description="Who or what picked it, when (at_ms), why, and on what figures per variant.")
    job_id: str | None = Field(
        default=None, description="The job sending the winner to the recipients still waiting (GET /jobs/{job_id})."
    )

    @classmethod
    def of(cls, result: PickResult) -> "PickView":
        return cls.model_validate(result.as_dict())


class JobView(BaseModel):
    job_id: str
    kind: str
    campaign_id: str
    state: str = Field(description="running, done or failed.")
    steps: int = Field(description="Pages done so far (each a bounded read of the campaign).")
    progress: dict[str, int] = Field(description="What the pages did so far, e.g. batches_read, republished.")
    error: str | None = None
    result: dict[str, Any] | None = Field(
        default=None, description="What a finished job found (reconcile: counters, ledger and drifts); else null."
    )
    created_at: str | None = None
    updated_at: str | None = None

    @classmethod
    def of(cls, job: Job) -> "JobView":
        return cls(**job.model_dump(include=set(cls.model_fields), mode="json"))


class RescheduleBody(TransitionBody):
    send_at: str = Field(
        pattern=SEND_AT_PATTERN,
        json_schema_extra={"format": "date-time"},
        description="The new start: ISO 8601 with a UTC offset, in the future.",
    )


class ResumeResult(CampaignView):
    job: JobView = Field(description="The job republishing every recipient not yet ended (GET /jobs/{job_id}).")
    republished: int | None = Field(
        default=None, description="Recipients published again, once the job is done (else null)."
    )


class CancelResult(CampaignView):
    job: JobView = Field(description="The job closing every delivery not yet ended (GET /jobs/{job_id}).")


class DeliveryStatusView(BaseModel):
    campaign_id: str
    state: str
    state_reason: str | None = None
    total: int
    pending: int
    in_progress: int
    reserved: int = Field(description="Same as in_progress: claimed by a consumer, outcome not yet recorded.")
    sent: int
    failed: int
    suppressed: int
    unknown: int
    cancelled: int
    dead_lettered: int
    remaining: int
    test_sends: preview_routes.TestSendsView | None = Field(
        default=None, description="Test sends (never counted above)."
    )
    ab_test: dict[str, Any] | None = Field(
        default=None,
        description="An A/B campaign's test: per variant sent, unique opens and clicks and their rates, the rest's, "
        "and the decision (null while the winner is awaited); absent for any other campaign.",
    )

    @classmethod
    def of(
        cls,
        status: DeliveryStatus,
        test_sends: preview_routes.TestSendsView | None = None,
        ab_test: dict[str, Any] | None = None,
    ) -> "DeliveryStatusView":
        return cls(**status.as_dict(), reserved=status.in_progress, test_sends=test_sends, ab_test=ab_test)


class ErrorBody(BaseModel):
    statusCode: int  # noqa: N815 - the field name Powertools and API Gateway answer errors with
    error: str
    message: str
    detail: list[dict[str, Any]] | None = None


def json_answer(description: str, model: type[BaseModel]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"model": model}}}


_ERROR_MEANINGS = {
    400: "Invalid input: a body that is not UTF-8 JSON, bad file rows, an unknown provider, a delivery mode the "
    "provider cannot do, a variant the campaign does not have",
    404: "No such campaign",
    409: "Not allowed in the campaign's current state, or the id exists already; or well formed but refused by "
    "what stands now (a send_at already past or too far ahead, a max_rate above the provider's configured rate, "
    "a pacing group the deployment does not know, a variant id given twice (no schema can say ids are unique), "
    "variables the templates lack, a suppressed address, an S3 object not there): the same request may succeed later",
    422: "The request does not match the schema; `detail` names each field",
    500: "Not caused by the request (AWS unreachable, a bug): logged with its traceback",
    503: "Scheduled, but the one-time schedule could not be set: reschedule with the same time sets it",
}


def documented(ok: int, description: str, model: type[BaseModel], *errors: int) -> dict[int, Any]:
    answer = json_answer(description, model)
    if "campaign_id" in model.model_fields:
        answer["links"] = campaign_links()
    if "job_id" in model.model_fields:
        answer["links"] = {**answer.get("links", {}), **job_links()}
    return {
        ok: answer,
        **{code: json_answer(_ERROR_MEANINGS[code], ErrorBody) for code in sorted({*errors, 422, 500})},
    }
