"""The public HTTP API: one-click unsubscribe links and Resend's webhooks, no IAM.

Neither caller can sign with SigV4 (a mailbox provider following a List-Unsubscribe
link, Resend delivering a webhook): the handlers authorize each request themselves, by
the HMAC in the unsubscribe token and by the webhook's Svix signature.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.function import ServiceFunction
from infra.http_api import LoggedHttpApi

UNSUBSCRIBE_HANDLER = "sendonce.handlers.unsubscribe.lambda_handler"
UNSUBSCRIBE_PATH = "/u/{token}"
WEBHOOK_PATH = "/webhooks/resend"  # sendonce.handlers.events.WEBHOOK_PATH
UNSUBSCRIBE_RATE_LIMIT, UNSUBSCRIBE_BURST_LIMIT = 50, 100


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
        events_function: lambda_.IFunction | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)
        handler = ServiceFunction(
            self,
            "Unsubscribe",
            handler=UNSUBSCRIBE_HANDLER,
            description="sendonce one-click unsubscribe (RFC 8058)",
            environment={
                "SENDONCE_SUPPRESSIONS_TABLE": suppressions_table.table_name,
                "SENDONCE_UNSUBSCRIBE_KEY_SECRET": unsubscribe_key_secret_name,
                # The click is also noted on the delivery's ledger record.
                "SENDONCE_LEDGER_TABLE": ledger_table.table_name,
                "SENDONCE_CAMPAIGNS_TABLE": campaigns_table.table_name,
            },
            timeout=cdk.Duration.seconds(10),
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
        routes = self.api.add_routes(
            path=UNSUBSCRIBE_PATH,
            methods=[apigwv2.HttpMethod.GET, apigwv2.HttpMethod.POST],
            integration=integrations.HttpLambdaIntegration("Unsubscribe", self.unsubscribe_function),
        )
        # Clicks are a trickle, and an invalid token is one invocation each: bound what
        # a flood of them can cost. Webhooks are not throttled here: they follow the send
        # rate (about two per email), and a throttled webhook waits for Resend's retry.
        self.http.throttle_routes(routes, rate_limit=UNSUBSCRIBE_RATE_LIMIT, burst_limit=UNSUBSCRIBE_BURST_LIMIT)
        if events_function is not None:
            self.api.add_routes(
                path=WEBHOOK_PATH,
                methods=[apigwv2.HttpMethod.POST],
                integration=integrations.HttpLambdaIntegration("Events", events_function),
            )
