"""The operator HTTP API (API Gateway HTTP API, IAM auth): parse, call CampaignService, answer.

Routes, bodies and errors are in docs/api.md; the OpenAPI document Powertools generates
from the models of api_models.py is served at GET /openapi.json (Swagger UI at GET /swagger).
"""

# No `from __future__ import annotations`: Powertools reads these annotations at runtime.

import functools
import json
import os
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestUnsupportedContentType, RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from sendonce.domain.campaigns.input_rules import friendly_message, strict_json_loads
from sendonce.domain.campaigns.recipients_file import (
    RejectedFileError,
    RowTally,
    describe_row,
    inline_rows,
)
from sendonce.domain.campaigns.scheduling import parse_instant
from sendonce.domain.campaigns.service import CampaignService, PublishReport
from sendonce.domain.errors import (
    CampaignNotFoundError,
    CampaignScheduleError,
    ConflictingRequestError,
    IllegalTransitionError,
    InvalidCampaignError,
    JobNotFoundError,
)
from sendonce.domain.jobs.models import JobKind
from sendonce.domain.models import CampaignState
from sendonce.handlers import forecast_routes, preview_routes
from sendonce.handlers.api_links import ServedPaths
from sendonce.handlers.api_models import (
    CampaignId,
    CampaignList,
    CampaignListItem,
    CampaignSpec,
    CampaignView,
    CancelResult,
    DeliveryStatusView,
    JobView,
    PickBody,
    PickView,
    PublishBody,
    PublishResult,
    RescheduleBody,
    ResumeResult,
    TransitionBody,
    documented,
    json_answer,
)
from sendonce.handlers.observability import logger
from sendonce.settings import ApiSettings
from sendonce.wiring.api import campaign_service

# Bodies are parsed strictly (no NaN, no lone surrogates, bounded nesting): what would fail
# later in DynamoDB or at the provider is refused here as a 400 naming the body.
app = APIGatewayHttpResolver(enable_validation=True, json_body_deserializer=strict_json_loads)

TITLE = "sendonce operator API"
VERSION = "1"
DESCRIPTION = (
    "Every body is a JSON object in UTF-8 without lone surrogates (\\ud800-\\udfff; I-JSON, RFC 7493 section "
    "2.1), NaN or nesting deeper than 32: anything else is a 400 naming the body, before its schema applies. "
    "A well-formed request that what stands now refuses (a send_at already past or too far ahead, variables "
    "the templates lack, a suppressed address, an S3 object not there) is a 409. Reference: docs/api.md."
)


def document() -> str:
    """The OpenAPI document, as GET /openapi.json serves it and `make contracts` writes it."""
    return app.get_openapi_json_schema(title=TITLE, version=VERSION, description=DESCRIPTION)


# --- routes --------------------------------------------------------------------------


def _caller() -> str:
    """Who is calling: the IAM principal API Gateway authenticated (recorded as who changed state)."""
    authorizer = (app.current_event.raw_event.get("requestContext") or {}).get("authorizer") or {}
    iam = authorizer.get("iam") or {}
    if iam.get("userArn"):
        return iam["userArn"]
    claims = (authorizer.get("jwt") or {}).get("claims") or {}
    if claims.get("sub"):
        return f"jwt:{claims['sub']}"
    return "anonymous"


def _service() -> CampaignService:
    return app.context["service"].acting_as(_caller())


@app.post("/campaigns", responses=documented(201, "Created (state draft)", CampaignView, 400, 409))
def create_campaign(spec: Annotated[CampaignSpec, Body()]) -> Response[CampaignView]:
    campaign = _service().create(spec.to_campaign())
    return Response(status_code=201, content_type=content_types.APPLICATION_JSON, body=CampaignView.of(campaign))


@app.get("/campaigns", responses=documented(200, "The campaigns, optionally only those in one state", CampaignList))
def list_campaigns(
    # Not `| None`: a query parameter is absent or a state, never null, and the document says so.
    state: Annotated[CampaignState, Query(description="Only campaigns in this state.")] = None,  # type: ignore[assignment]
) -> CampaignList:
    # One Scan of the campaigns table per call (no index by state; docs/api.md).
    return CampaignList(campaigns=[CampaignListItem.of(c) for c in _service().list_campaigns(state)])


@app.get("/campaigns/<campaign_id>", responses=documented(200, "The campaign", CampaignView, 404))
def get_campaign(campaign_id: CampaignId) -> CampaignView:
    return CampaignView.of(_service().get(campaign_id))


def _publish_responses() -> dict[int, Any]:
    responses = documented(
        200,
        "Inline recipients published (a draft starts sending, or is scheduled with send_at)",
        PublishResult,
        400,
        404,
        409,
        503,
    )
    responses[202] = json_answer(
        "An S3 object (checked with a HEAD): a publish_s3 job publishes it in byte ranges, in parallel; "
        "GET /jobs/{job_id} shows ranges done, recipients published and rejected rows by line",
        JobView,
    )
    return responses


@app.post("/campaigns/<campaign_id>/publish", responses=_publish_responses())
def publish(campaign_id: CampaignId, body: Annotated[PublishBody, Body()]) -> Response[PublishResult | JobView]:
    service = _service()
    send_at_ms = parse_instant(body.send_at) if body.send_at is not None else None
    if body.recipients is not None:
        tally = RowTally(dedupe_addresses=body.dedupe_addresses)
        recipients = list(tally.recipients(inline_rows(body.recipients)))
        report = service.publish(campaign_id, recipients, send_at_ms=send_at_ms)
        result = _publish_result(report, tally, where="recipients.")
        return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=result)
    location = body.s3
    job = service.jobs.parted_work(JobKind.PUBLISH_S3).start(  # type: ignore[attr-defined]
        campaign_id,
        bucket=location.bucket,
        key=location.key,
        fmt=location.format,
        strict=body.strict,
        dedupe_addresses=body.dedupe_addresses,
        send_at_ms=send_at_ms,
        by=_caller(),
    )
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=JobView.of(job))


def _publish_result(report: PublishReport, tally: RowTally, where: str = "") -> PublishResult:
    return PublishResult(
        campaign_id=report.campaign_id,
        accepted=report.accepted,
        bad_rows=tally.bad,
        duplicates=tally.duplicates + len(report.duplicates_in_input),
        duplicate_addresses=tally.duplicate_addresses,
        problems=[
            f"{where}{row.line}: {describe_row(row, dedupe_addresses=tally.dedupe_addresses, where=where or 'line ')}"
            for row in tally.kept
        ],
        batches_new=report.batches_new,
        batches_already_enqueued=report.batches_already_enqueued,
        messages_sent=report.messages_sent,
        batches_recorded=report.batches_recorded,
        send_at=report.send_at,
    )


@app.post("/campaigns/<campaign_id>/pause", responses=documented(200, "Paused", CampaignView, 400, 404, 409))
def pause(campaign_id: CampaignId, body: Annotated[TransitionBody | None, Body()] = None) -> CampaignView:
    return CampaignView.of(_service().pause(campaign_id, reason=body.reason if body else None))


@app.post(
    "/campaigns/<campaign_id>/resume",
    responses=documented(
        202, "Sending again; a job republishes every recipient not yet ended", ResumeResult, 400, 404, 409
    ),
)
def resume(campaign_id: CampaignId, body: Annotated[TransitionBody | None, Body()] = None) -> Response[ResumeResult]:
    campaign, job = _service().resume(campaign_id, reason=body.reason if body else None)
    result = ResumeResult(
        **CampaignView.of(campaign).model_dump(),
        job=JobView.of(job),
        republished=job.progress.get("republished", 0) if job.done else None,
    )
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=result)


@app.post(
    "/campaigns/<campaign_id>/cancel",
    responses=documented(202, "Cancelled; a job closes every delivery not yet ended", CancelResult, 400, 404, 409),
)
def cancel(campaign_id: CampaignId, body: Annotated[TransitionBody | None, Body()] = None) -> Response[CancelResult]:
    campaign, job = _service().cancel(campaign_id, reason=body.reason if body else None)
    result = CancelResult(**CampaignView.of(campaign).model_dump(), job=JobView.of(job))
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=result)


@app.post(
    "/campaigns/<campaign_id>/pick",
    responses=documented(
        200,
        "An A/B campaign's winner recorded (or the one recorded before, which stands); a job sends it to the rest",
        PickView,
        400,
        404,
        409,
    ),
)
def pick(campaign_id: CampaignId, body: Annotated[PickBody | None, Body()] = None) -> PickView:
    result = _service().pick(campaign_id, body.variant if body else None, reason=body.reason if body else None)
    return PickView.of(result)


@app.post(
    "/campaigns/<campaign_id>/reconcile",
    responses=documented(
        202, "A job compares the campaign's counters with its ledger (GET /jobs/{job_id})", JobView, 400, 404
    ),
)
def reconcile(campaign_id: CampaignId) -> Response[JobView]:
    job = _service().start_reconcile(campaign_id)
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=JobView.of(job))


@app.post(
    "/campaigns/<campaign_id>/audit",
    responses=documented(
        202,
        "A job audits the campaign against its provider's own records (GET /jobs/{job_id}: its result holds the "
        "verdict counts, clean, and the findings' digest)",
        JobView,
        400,
        404,
    ),
)
def audit(campaign_id: CampaignId) -> Response[JobView]:
    job = _service().jobs.start_audit(campaign_id, by=_caller())
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=JobView.of(job))


@app.get("/jobs/<job_id>", responses=documented(200, "A job and its progress", JobView, 404))
def get_job(job_id: Annotated[str, Path(min_length=1, max_length=300)]) -> JobView:
    return JobView.of(_service().jobs.get(job_id))


@app.post(
    "/campaigns/<campaign_id>/reschedule",
    responses=documented(200, "Scheduled for the new time", CampaignView, 400, 404, 409, 503),
)
def reschedule(campaign_id: CampaignId, body: Annotated[RescheduleBody, Body()]) -> CampaignView:
    send_at_ms = parse_instant(body.send_at)
    return CampaignView.of(_service().reschedule(campaign_id, send_at_ms, reason=body.reason))


@app.post(
    "/campaigns/<campaign_id>/unschedule",
    responses=documented(
        200, "Back to draft; recorded recipients kept, sent by the next publish", CampaignView, 400, 404, 409
    ),
)
def unschedule(campaign_id: CampaignId, body: Annotated[TransitionBody | None, Body()] = None) -> CampaignView:
    return CampaignView.of(_service().unschedule(campaign_id, reason=body.reason if body else None))


@app.get(
    "/campaigns/<campaign_id>/delivery-status",
    responses=documented(200, "Counts by outcome", DeliveryStatusView, 404),
)
def delivery_status(campaign_id: CampaignId) -> DeliveryStatusView:
    service = _service()
    status = service.status(campaign_id)
    results = service.ab_results(campaign_id)
    return DeliveryStatusView.of(
        status,
        preview_routes.view_of_test_sends(app.context["sending"], campaign_id),
        ab_test=results.as_dict() if results is not None else None,
    )


preview_routes.register(app, responses=documented, caller=_caller)
forecast_routes.register(app, responses=documented, caller=_caller, service=_service)


@app.get("/openapi.json", include_in_schema=False)
def openapi_document():
    return Response(
        status_code=200,
        content_type=content_types.APPLICATION_JSON,
        body=document(),
    )


app.enable_swagger(path="/swagger", title=TITLE, version=VERSION, description=DESCRIPTION)


# --- errors --------------------------------------------------------------------------


def _error(
    status: int,
    error: str,
    message: str,
    detail: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = {"statusCode": status, "error": error, "message": message}
    if detail is not None:
        body["detail"] = detail
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=headers)


@app.exception_handler(CampaignNotFoundError)
def _not_found(exc: CampaignNotFoundError) -> Response:
    return _error(404, "CampaignNotFound", str(exc))


@app.exception_handler(JobNotFoundError)
def _job_not_found(exc: JobNotFoundError) -> Response:
    return _error(404, "JobNotFound", str(exc))


@app.exception_handler(IllegalTransitionError)
def _conflict(exc: IllegalTransitionError) -> Response:
    return _error(409, "IllegalTransition", str(exc))


@app.exception_handler(ConflictingRequestError)
def _refused_now(exc: ConflictingRequestError) -> Response:
    # Well formed, refused by what stands now (the clock, the campaign, the suppression list, the
    # bucket): no schema can say it, and the same request may succeed later.
    return _error(409, type(exc).__name__.removesuffix("Error"), str(exc))


@app.exception_handler(CampaignScheduleError)
def _schedule_not_set(exc: CampaignScheduleError) -> Response:
    return _error(503, "ScheduleNotSet", str(exc))


@app.exception_handler(InvalidCampaignError)
def _invalid(exc: InvalidCampaignError) -> Response:
    message = str(exc)
    if isinstance(exc, RejectedFileError):
        message += ": " + "; ".join(f"line {r.line}: {describe_row(r)}" for r in exc.tally.kept if not r.is_duplicate)
    return _error(400, type(exc).__name__.removesuffix("Error"), message)


@app.exception_handler(UnicodeDecodeError)
def _not_text(exc: UnicodeDecodeError) -> Response:
    # Powertools decodes the body only for routes that take one: this is always the body.
    return _error(400, "InvalidBody", "body: not UTF-8 text")


@app.exception_handler(RequestUnsupportedContentType)
def _not_json(exc: RequestUnsupportedContentType) -> Response:
    return _error(400, "InvalidBody", "body: send JSON with content-type application/json")


@app.exception_handler(RequestValidationError)
def _unprocessable(exc: RequestValidationError) -> Response:
    syntax = next((e for e in exc.errors() if e.get("type") == "json_invalid"), None)
    if syntax is not None:
        reason = (syntax.get("ctx") or {}).get("error") or "JSON decode error"
        return _error(400, "InvalidBody", f"body: not valid JSON: {reason}")
    # loc and msg name the problem; the input itself is left out (it may hold an address).
    detail = [{"loc": list(e["loc"]), "msg": friendly_message(e), "type": e["type"]} for e in exc.errors()]
    first = detail[0] if detail else {"loc": [], "msg": "invalid request"}
    message = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    if len(detail) > 1:
        message += f" (and {len(detail) - 1} more)"
    return _error(422, "ValidationError", message, detail)


@app.not_found
def _no_route(exc: NotFoundError) -> Response:
    """A path the API serves with another method is a 405 naming the methods it takes (`Allow`,
    RFC 9110); any other path is a 404."""
    event = app.current_event
    allowed = _served().methods(event.path)
    if allowed:
        methods = ", ".join(allowed)
        return _error(
            405,
            "MethodNotAllowed",
            f"{event.http_method} is not served on {event.path} (allowed: {methods})",
            headers={"Allow": methods},
        )
    return _error(404, "NotFound", f"no route for {event.http_method} {event.path}")


# Served but left out of the OpenAPI document.
_UNDOCUMENTED_ROUTES = {"/openapi.json": ["GET"], "/swagger": ["GET"]}


@functools.cache
def _served() -> ServedPaths:
    """Read from the OpenAPI document, which Powertools builds from the routes themselves."""
    paths = json.loads(document())["paths"]
    return ServedPaths(
        {**{path: list(item) for path, item in paths.items()}, **_UNDOCUMENTED_ROUTES},
        bodies={(m.upper(), p) for p, item in paths.items() for m, op in item.items() if "requestBody" in op},
    )


@app.exception_handler(Exception)
def _unexpected(exc: Exception) -> Response:
    logger.exception("unexpected error")
    return _error(500, "InternalError", "unexpected error; see the function's logs")


# --- entry point ---------------------------------------------------------------------


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
def lambda_handler(
    event: dict[str, Any],
    context: LambdaContext,
    service: CampaignService | None = None,
    sending: Any = None,
) -> dict[str, Any]:
    refused = _refuse_non_json(event) or _refuse_array_body(event)
    if refused is not None:
        return refused
    # Without a jobs queue, jobs run here; an audit job only on a service given an auditor
    # (the CLI's, a test's: wiring/api.py), else it fails saying there are no sending settings.
    service = service or campaign_service(ApiSettings.from_env(os.environ))
    sending = sending or preview_routes.SendingOnDemand.from_env(os.environ)
    app.append_context(service=service, sending=sending)
    return app.resolve(event, context)


def _refuse_array_body(event: dict[str, Any]) -> dict[str, Any] | None:
    """Every body a route takes is a JSON object. Powertools validates a body parameter as it
    does a repeated query parameter, taking a list's first item for a parameter that is not a
    list: `[null, null]` would pass as no body and `[{...}]` as `{...}`. So a JSON array is
    refused here, as pydantic refuses any other non-object: a 422 naming the body."""
    body = event.get("body")
    if not body or event.get("isBase64Encoded"):
        return None
    method = ((event.get("requestContext") or {}).get("http") or {}).get("method", "GET")
    if not _served().takes_body(method, event.get("rawPath") or ""):
        return None
    try:
        parsed = strict_json_loads(body)
    except ValueError:  # not JSON at all: Powertools answers that (400)
        return None
    if not isinstance(parsed, list):
        return None
    detail = [{"loc": ["body"], "msg": "a JSON object is expected, not an array", "type": "model_attributes_type"}]
    answer = {"statusCode": 422, "error": "ValidationError", "message": f"body: {detail[0]['msg']}", "detail": detail}
    return {
        "statusCode": 422,
        "headers": {"Content-Type": content_types.APPLICATION_JSON},
        "body": json.dumps(answer),
        "isBase64Encoded": False,
    }


def _refuse_non_json(event: dict[str, Any]) -> dict[str, Any] | None:
    """Every body is JSON. Powertools would also parse form and multipart bodies (and fail
    with a 500 on a multipart type without a boundary), so any other declared type is a 400."""
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    content_type = headers.get("content-type", "").strip().lower()
    method = ((event.get("requestContext") or {}).get("http") or {}).get("method", "GET")
    if (
        not content_type
        or content_type.startswith("application/json")
        or (method in ("GET", "HEAD") and not event.get("body"))
    ):
        return None
    body = {"statusCode": 400, "error": "InvalidBody", "message": "body: send JSON with content-type application/json"}
    return {
        "statusCode": 400,
        "headers": {"Content-Type": content_types.APPLICATION_JSON},
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }
