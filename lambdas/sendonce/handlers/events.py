"""Provider events into the ledger: events from EventBridge, webhooks over HTTP.

One function, two doors: an EventBridge event whose source a registered provider reads
(`aws.ses`) is applied directly and a failure raises, so that Lambda's asynchronous retries
(then the on-failure destination) keep it; a webhook arrives through the HTTP API at
POST /webhooks/<provider>, is verified by that provider's reader and answered 2xx once
applied, non-2xx otherwise so that the provider retries with the same event id, which the
ledger deduplicates.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.utilities.typing import LambdaContext

from sendonce.contract import Metric
from sendonce.domain.deliverability.provider_events import EventReport, ProviderEventService
from sendonce.domain.errors import WebhookSignatureError
from sendonce.handlers.observability import count, count_for_campaign, logger, metrics
from sendonce.settings import EventsSettings
from sendonce.wiring.events import events_service

app = APIGatewayHttpResolver()

WEBHOOK_PATH = "/webhooks/<provider>"
BRAKE_METRICS = {"complaint": Metric.COMPLAINT_BRAKE_TRIGGERED, "bounce": Metric.BOUNCE_BRAKE_TRIGGERED}


def _emit(report: EventReport) -> None:
    counts = {
        Metric.PROVIDER_EVENTS_APPLIED: report.status == "applied",
        Metric.PROVIDER_EVENTS_DUPLICATE: report.status == "duplicate",
        Metric.PROVIDER_EVENTS_UNMATCHED: report.status == "no_delivery",
        Metric.COMPLAINTS: report.counted == "complaints",
        Metric.HARD_BOUNCES: report.counted == "hard_bounces",
        Metric.SUPPRESSIONS_ADDED: report.newly_suppressed,
        Metric.UNKNOWN_OUTCOMES_RESOLVED: report.resolved_unknown,
    }
    if report.brake:
        counts[BRAKE_METRICS[report.brake]] = 1
    for name, value in counts.items():
        count(name, int(value))
    count_for_campaign(report.campaign_id, {name: int(value) for name, value in counts.items()})
    logger.info(
        "provider event",
        extra={
            "provider": report.provider,
            "kind": report.kind.value if report.kind else None,
            "status": report.status,
            "engagement": report.engagement,
            "newly_suppressed": report.newly_suppressed,
            "resolved_unknown": report.resolved_unknown,
            "brake": report.brake,
        },
    )


@app.post(WEBHOOK_PATH)
def provider_webhook(provider: str) -> Response | dict:
    service: ProviderEventService = app.context["service"]
    event = app.current_event
    try:
        report = service.handle_webhook(provider, event.decoded_body or "", event.headers)
    except WebhookSignatureError as exc:
        count(Metric.WEBHOOK_SIGNATURES_REJECTED)
        logger.warning("webhook refused", extra={"reason": str(exc)})
        return Response(status_code=401, content_type="application/json", body='{"message":"invalid signature"}')
    _emit(report)
    return {"status": report.status}


@app.exception_handler(UnicodeDecodeError)
def _not_text(exc: UnicodeDecodeError) -> Response:
    # Svix signs text: a body that is not UTF-8 cannot carry a valid signature.
    count(Metric.WEBHOOK_SIGNATURES_REJECTED)
    return Response(status_code=401, content_type="application/json", body='{"message":"invalid signature"}')


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext, service: ProviderEventService | None = None) -> dict:
    service = service or events_service(EventsSettings.from_env(os.environ))
    if service.reads_events_from(event.get("source")):
        report = service.handle_event(event["source"], event)
        _emit(report)
        return {"status": report.status}
    app.append_context(service=service)
    return app.resolve(event, context)
