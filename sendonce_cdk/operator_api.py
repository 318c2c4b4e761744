"""The operator HTTP API: campaign create/publish/(re/un)schedule/pause/resume/cancel/status, IAM-authorized."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce_cdk.function import ServiceFunction
from sendonce_cdk.http_api import LoggedHttpApi, RouteThrottle

HANDLER = "sendonce.handlers.api.lambda_handler"
GET, POST = apigwv2.HttpMethod.GET, apigwv2.HttpMethod.POST
# docs/api.md. /swagger is not routed: a browser cannot sign its requests with SigV4.
ROUTES = (
    (GET, "/campaigns"),
    (POST, "/campaigns"),
    (GET, "/campaigns/{id}"),
    (POST, "/campaigns/{id}/publish"),
    (POST, "/campaigns/{id}/forecast"),
    (POST, "/campaigns/{id}/pause"),
    (POST, "/campaigns/{id}/resume"),
    (POST, "/campaigns/{id}/cancel"),
    (POST, "/campaigns/{id}/reschedule"),
    (POST, "/campaigns/{id}/unschedule"),
    (POST, "/campaigns/{id}/pick"),
    (GET, "/campaigns/{id}/delivery-status"),
    (POST, "/campaigns/{id}/reconcile"),
    (POST, "/campaigns/{id}/audit"),
    (GET, "/jobs/{id}"),
    # Test sends need the consumer's sending settings on this function (docs/api.md); preview
    # without the unsubscribe key shows no List-Unsubscribe header.
    (POST, "/campaigns/{id}/preview"),
    (POST, "/campaigns/{id}/test-sends"),
    (GET, "/openapi.json"),
)
# An HTTP API waits at most 30 s for its integration; long work (S3 publish, reconcile,
# resume, cancel) is a job the API only starts.
TIMEOUT = cdk.Duration.seconds(29)
# Operators, not traffic: enough for scripts, low enough to bound a runaway loop's cost.
THROTTLE = RouteThrottle(rate_limit=10, burst_limit=20)


class OperatorApi(Construct):
    """The API function and the HTTP API in front of it; every route needs SigV4 (AWS_IAM).

    Grants on the tables, the queue and the recipients bucket are the stack's to make.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        ledger_table: dynamodb.ITable,
        campaigns_table: dynamodb.ITable,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        suppressions_table: dynamodb.ITable | None = None,
        scheduling: Mapping[str, str] | None = None,
        jobs_queue: sqs.IQueue,
        provider_settings: Mapping[str, str] | None = None,
        feedback_id: Mapping[str, str] | None = None,
        pacing: Mapping[str, str] | None = None,
        reserved_concurrency: int | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)
        handler = ServiceFunction(
            self,
            "Handler",
            handler=HANDLER,
            description="sendonce operator API: create, publish, pause, resume, cancel campaigns",
            # sendonce.settings.ApiSettings, by field.
            settings={
                "ledger_table": ledger_table.table_name,
                "campaigns_table": campaigns_table.table_name,
                "queue_url": queue.queue_url,
                "dead_letter_queue_url": dead_letter_queue.queue_url,
                # The stack runs the counters' aggregator: campaigns are counted from creation.
                "counters": "true",
                # A forecast reads the suppression list (BatchGetItem only).
                **({"suppressions_table": suppressions_table.table_name} if suppressions_table else {}),
                # scheduler_group, scheduler_role_arn, scheduled_start_function_arn (ScheduledStart).
                **(scheduling or {}),
                "jobs_queue_url": jobs_queue.queue_url,
                # The providers' rates, as the consumer's (a campaign's max_rate may not exceed its provider's).
                **(provider_settings or {}),
                # The consumer's Feedback-ID, which previews show (they compose as the consumer does).
                **(feedback_id or {}),
                # The deployment's mailbox groups: a campaign's own caps must name them.
                **(pacing or {}),
            },
            timeout=TIMEOUT,
            memory_size=512,
            reserved_concurrency=reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )
        self.function = handler.function
        self.role = handler.role
        self.log_group = handler.log_group

        self.http = LoggedHttpApi(
            self,
            "Http",
            description="sendonce operator API (IAM authorization)",
            default_throttle=THROTTLE,
            default_authorizer=authorizers.HttpIamAuthorizer(),
            removal_policy=removal_policy,
        )
        self.api = self.http.api
        self.url = self.http.url
        # One invoke permission for this API instead of one per route: the function
        # serves this API only.
        self.routes = self.http.add_function_routes(
            "Handler", function=self.function, routes=ROUTES, permission_per_route=False
        )
