"""The operator API's forecast route (docs/api.md), registered on the API's resolver by
`register`. Thin: parse, call the forecasts (an inline list) or start a `forecast_s3` job (an
S3 object), answer. Nothing is published or written but the job.
"""

# No `from __future__ import annotations`: Powertools reads these annotations at runtime.

from collections.abc import Callable
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from sendonce.domain import limits
from sendonce.domain.campaigns.recipients_file import describe_row, object_rows
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.jobs.models import JobKind
from sendonce.handlers.api_models import CampaignId, JobView, S3Location, json_answer


class ForecastBody(BaseModel):
    """Exactly one of `recipients` (inline, at most 1,000) or `s3` (a CSV or JSON Lines object)."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"oneOf": [{"required": ["recipients"]}, {"required": ["s3"]}]}
    )

    # Objects, not the publish body's recipients: a row that is not a recipient is counted in
    # bad_rows and named in problems (by index and field), as a file's bad line is, not a 422.
    recipients: list[dict[str, Any]] = Field(
        default=None,
        min_length=1,
        max_length=limits.INLINE_RECIPIENTS,
        description="Rows as publish takes them ({recipient_id, email, variables}); each is checked as a file's "
        "row is: one that is not a valid recipient is counted in bad_rows and named in problems "
        "('recipients.N: field: reason'), and the others are still forecast.",
    )
    s3: S3Location = Field(default=None)
    dedupe_addresses: StrictBool = Field(
        default=False,
        description="As publish: an address given under several recipient ids is sent once (the first).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> "ForecastBody":
        if (self.recipients is None) == (self.s3 is None):
            raise ValueError("give exactly one of recipients or s3")
        return self


class ForecastView(BaseModel):
    campaign_id: str
    provider: str
    delivery_mode: str = Field(description="With provider and audience: what `sendonce cost`'s model prices.")
    rows_read: int
    bad_rows: int = Field(description="Rows that are not a valid recipient: never published.")
    repeated_ids: int = Field(description="Rows whose recipient_id appeared before: published once.")
    duplicate_addresses: int = Field(description="Rows whose address appeared before under another recipient_id.")
    dedupe_addresses: bool
    suppressed: int = Field(description="Recipients on the suppression list: never sent.")
    suppressions_checked: bool = Field(description="False: this deployment has no suppression list to read.")
    audience: int = Field(description="Recipients the send would reach.")
    groups: dict[str, int] = Field(description="The audience per mailbox-provider group (`other` last).")
    rate: float = Field(description="Provider requests/s the campaign would get at its start, shared as now.")
    recipients_per_request: int
    recipients_per_s: float
    campaigns_sharing: int = Field(description="Other campaigns sending on the provider now.")
    starts_at_ms: int
    ends_at_ms: int | None = None
    starts_at: str = Field(description="Now, or the campaign's send_at (UTC).")
    ends_at: str | None = Field(default=None, description="When the last send would be; null: never (no rate).")
    eta_s: float | None = Field(default=None, description="Seconds from starts_at to ends_at; null: never.")
    group_caps: dict[str, float] = Field(
        default_factory=dict, description="The caps per mailbox group (emails/s) applying to the campaign's audience."
    )
    bound_by: str = Field(
        default="rate", description="What the ETA follows: 'rate' (its share) or '<group> cap' (that group's cap)."
    )
    warmup_days: int | None = Field(
        default=None, description="Days of its sending domain's warm-up ramp the audience needs; null: no ramp."
    )
    warmup_left_today: int | None = Field(
        default=None, description="What the domain's first day has left of its cap; null: no ramp."
    )
    not_applied: list[str] = Field(description="Limits the ETA leaves out (none now).")
    problems: list[str] = Field(description="The first 100 reported rows: 'recipients.N: reason' or 'LINE: reason'.")
    exact: bool = Field(
        description="False: an S3 file counted in ranges, whose repeats across ranges were not seen (audience "
        "is then an upper bound)."
    )


def register(
    app: APIGatewayHttpResolver,
    *,
    responses: Callable[..., dict[int, Any]],
    caller: Callable[[], str],
    service: Callable[[], CampaignService],
) -> None:
    """Add the route to `app`; `responses` documents it as the API's other routes are."""
    documented = responses(
        200, "Inline recipients forecast; nothing is published or written", ForecastView, 400, 404, 409
    )
    documented[202] = json_answer(
        "An S3 object (checked with a HEAD): a forecast_s3 job counts it in byte ranges, in parallel; "
        "GET /jobs/{job_id} shows ranges done and, once done, the forecast as its result",
        JobView,
    )

    @app.post("/campaigns/<campaign_id>/forecast", responses=documented)
    def forecast(campaign_id: CampaignId, body: Annotated[ForecastBody, Body()]) -> Response[ForecastView | JobView]:
        work = service().jobs.parted_work(JobKind.FORECAST_S3)
        if body.recipients is not None:
            result, tally = work.forecasts.of_rows(  # type: ignore[attr-defined]
                campaign_id, object_rows(body.recipients), dedupe_addresses=body.dedupe_addresses
            )
            problems = [
                f"recipients.{row.line}: "
                + describe_row(row, dedupe_addresses=body.dedupe_addresses, where="recipients.")
                for row in tally.kept
            ]
            view = ForecastView.model_validate(result.view(problems=problems))
            return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=view)
        location = body.s3
        job = work.start(  # type: ignore[attr-defined]
            campaign_id,
            bucket=location.bucket,
            key=location.key,
            fmt=location.format,
            dedupe_addresses=body.dedupe_addresses,
            by=caller(),
        )
        return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=JobView.of(job))
