"""The public HTTP API: one-click unsubscribe links and the providers' webhooks, no IAM.

Neither caller can sign with SigV4 (a mailbox provider following a List-Unsubscribe
link, a provider delivering a webhook): the handlers authorize each request themselves, by
the HMAC in the unsubscribe token and by the webhook's signature (its provider's reader).
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from sendonce_cdk.function import ServiceFunction
from sendonce_cdk.http_api import LoggedHttpApi, RouteThrottle

UNSUBSCRIBE_HANDLER = "sendonce.handlers.unsubscribe.lambda_handler"
UNSUBSCRIBE_PATH = "/u/{token}"
GET, POST = apigwv2.HttpMethod.GET, apigwv2.HttpMethod.POST
# GET shows a confirmation page; POST is the one-click unsubscribe itself (RFC 8058).
UNSUBSCRIBE_ROUTES = ((GET, UNSUBSCRIBE_PATH), (POST, UNSUBSCRIBE_PATH))


class PublicApi(Construct):
    """The unsubscribe function and the public HTTP API routing to it and to the events function.

    Grants on the tables and the unsubscribe key are the stack's to make.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        suppressions_table: dynamodb.ITable,
        ledger_table: dynamodb.ITable,
        campaigns_table: dynamodb.ITable,
        unsubscribe_key_secret_name: str,
        unsubscribe_throttle: RouteThrottle,
        webhook_throttle: RouteThrottle,
        events_function: lambda_.IFunction | None = None,
        webhook_paths: Sequence[str] = (),
        unsubscribe_reserved_concurrency: int | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)
        handler = ServiceFunction(
            self,
            "Unsubscribe",
            handler=UNSUBSCRIBE_HANDLER,
            description="sendonce one-click unsubscribe (RFC 8058)",
            # sendonce.settings.UnsubscribeSettings, by field.
            settings={
                "suppressions_table": suppressions_table.table_name,
                "unsubscribe_key_secret": unsubscribe_key_secret_name,
                # The click is also noted on the delivery's ledger record.
                "ledger_table": ledger_table.table_name,
                "campaigns_table": campaigns_table.table_name,
            },
            timeout=cdk.Duration.seconds(10),
            reserved_concurrency=unsubscribe_reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )
        self.unsubscribe_function = handler.function
        self.unsubscribe_role = handler.role

        self.http = LoggedHttpApi(
            self,
            "Http",
            description="sendonce public API: one-click unsubscribe, provider webhooks (no IAM)",
            removal_policy=removal_policy,
        )
        self.api = self.http.api
        self.url = self.http.url
        # Anyone can call these routes, and a forged token or signature still costs an
        # invocation (answered 403/401): every route is throttled, so a flood is refused
        # by API Gateway (429) before it reaches Lambda. Clicks are a trickle; webhooks
        # follow the send rate (about three per email), and a throttled webhook waits for
        # the provider's retry (docs/operations.md#flood-protection).
        self.http.add_function_routes(
            "Unsubscribe",
            function=self.unsubscribe_function,
            routes=UNSUBSCRIBE_ROUTES,
            throttle=unsubscribe_throttle,
        )
        # POST /webhooks/<provider> for each deployed provider with webhooks
        # (sendonce.handlers.events routes them by the path's provider).
        if events_function is not None and webhook_paths:
            self.http.add_function_routes(
                "Events",
                function=events_function,
                routes=[(POST, path) for path in webhook_paths],
                throttle=webhook_throttle,
            )
