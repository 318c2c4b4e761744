"""Provider events into the ledger: the events function, the providers' event sources
(each provider's own, sendonce_cdk/providers/), and the queue that keeps events the
function could not apply.

docs/deliverability.md describes what the function does with each event. Webhooks reach
the same function through the public HTTP API (sendonce_cdk/public_api.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ses as ses
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce_cdk.function import ServiceFunction

HANDLER = "sendonce.handlers.events.lambda_handler"
DEAD_LETTER_RETENTION = cdk.Duration.days(14)


@jsii.implements(lambda_.IDestination)
class _SendOnlyQueueDestination:
    """An on-failure destination queue that the function's role may only send to.

    `aws_lambda_destinations.SqsDestination` also grants sqs:GetQueueAttributes and
    sqs:GetQueueUrl; Lambda needs sqs:SendMessage alone to deliver a failed event.
    """

    def __init__(self, queue: sqs.IQueue) -> None:
        self._queue = queue

    def bind(
        self, _scope: Construct, fn: lambda_.IFunction, *, type: lambda_.DestinationType
    ) -> lambda_.DestinationConfig:
        fn.add_to_role_policy(iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[self._queue.queue_arn]))
        return lambda_.DestinationConfig(destination=self._queue.queue_arn)


class ProviderEvents(Construct):
    """The events function, its dead-letter queue, and each deployed provider's event
    sources (for SES: the configuration set, its EventBridge destination and the rule that
    sends its events to the function).

    Grants on the tables and the providers' secrets are the stack's to make.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        ledger_table: dynamodb.ITable,
        campaigns_table: dynamodb.ITable,
        suppressions_table: dynamodb.ITable,
        provider_settings: Mapping[str, str] | None = None,
        pacing: Mapping[str, str] | None = None,
        sources: Sequence[str] = (),
        reserved_concurrency: int | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)
        # sendonce.settings.EventsSettings, by field.
        settings = {
            "ledger_table": ledger_table.table_name,
            "campaigns_table": campaigns_table.table_name,
            "suppressions_table": suppressions_table.table_name,
        }
        # Each provider's settings, `<provider>_<field>`: webhook signing secrets by name
        # only (without one, every webhook of that provider is refused: 401).
        settings.update(provider_settings or {})
        # The mailbox groups a deferral slows (docs/deliverability.md#pacing-per-mailbox-provider).
        settings.update(pacing or {})

        # A complaint that is never applied is an address that is never suppressed: SES
        # events the function fails on, after Lambda's own retries, and events EventBridge
        # could not deliver at all, wait here for a look and a replay.
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            retention_period=DEAD_LETTER_RETENTION,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            removal_policy=removal_policy,
        )
        handler = ServiceFunction(
            self,
            "Handler",
            handler=HANDLER,
            # `sources`: what the registered providers' events are called ("SES events", ...).
            description=f"sendonce provider events: {' and '.join(sources) or 'none'} into the ledger",
            settings=settings,
            timeout=cdk.Duration.seconds(30),
            reserved_concurrency=reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )
        self.function = handler.function
        self.role = handler.role
        self.log_group = handler.log_group
        self.function.configure_async_invoke(
            on_failure=_SendOnlyQueueDestination(self.dead_letter_queue),
            retry_attempts=2,
            max_event_age=cdk.Duration.hours(6),
        )

        # Set by a provider whose events come through an event bus (sendonce_cdk/providers/ses.py).
        self.configuration_set: ses.ConfigurationSet | None = None
        self.tracked_configuration_set: ses.ConfigurationSet | None = None
        self.rule: events.Rule | None = None
