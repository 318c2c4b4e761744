"""The account health check: a function that reads the provider's sending account on a
schedule (an EventBridge rule) and pauses that provider's sending campaigns when the account
cannot send (domain/deliverability/account_health.py). SES only: its `GetAccount` says
`SendingEnabled` and `EnforcementStatus`; the alarms on what it publishes are on-call's."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from sendonce_cdk.config import ACCOUNT_HEALTH_RESERVED
from sendonce_cdk.function import ServiceFunction

HANDLER = "sendonce.handlers.account_health.lambda_handler"
# Every few minutes: an account stopped by SES keeps refusing sends meanwhile (each refused
# send halts its campaign anyway); the check pauses the rest at once and pages.
CHECK_EVERY = cdk.Duration.minutes(5)
TIMEOUT = cdk.Duration.seconds(60)


class AccountHealth(Construct):
    """Public attributes: `function`, `role`, `log_group`, `rule`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        campaigns_table: dynamodb.ITable,
        provider: str,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)
        handler = ServiceFunction(
            self,
            "Handler",
            handler=HANDLER,
            description=f"sendonce account health: reads the {provider} account every"
            f" {CHECK_EVERY.to_minutes()} minutes; pauses its sending campaigns when it cannot send",
            # sendonce.settings.AccountHealthSettings, by field.
            settings={"campaigns_table": campaigns_table.table_name, "provider": provider},
            timeout=TIMEOUT,
            # One check at a time is all it takes; the reservation is also its cap.
            reserved_concurrency=ACCOUNT_HEALTH_RESERVED,
            removal_policy=removal_policy,
            code=code,
        )
        self.function = handler.function
        self.role = handler.role
        self.log_group = handler.log_group
        self.rule = events.Rule(
            self,
            "Schedule",
            description=f"sendonce: read the {provider} account's health",
            schedule=events.Schedule.rate(CHECK_EVERY),
            # A missed check is not retried: the next one reads the account anew.
            targets=[targets.LambdaFunction(self.function, retry_attempts=0, max_event_age=CHECK_EVERY)],
        )
