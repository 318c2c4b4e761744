"""Provider events into the ledger: the events function, SES event publishing through
EventBridge, and the queue that keeps events the function could not apply.

docs/deliverability.md describes what the function does with each event. Resend's
webhooks reach the same function through the public HTTP API (sendonce_cdk/public_api.py).
"""

from __future__ import annotations

import aws_cdk as cdk
import jsii
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ses as ses
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce_cdk.function import ServiceFunction

HANDLER = "sendonce.handlers.events.lambda_handler"
# What SES publishes to EventBridge for the configuration set; SEND is required: the brakes
# divide by it and it resolves unknown outcomes. Opens and clicks are not recorded.
SES_EVENTS = (
    ses.EmailSendingEvent.SEND,
    ses.EmailSendingEvent.DELIVERY,
    ses.EmailSendingEvent.BOUNCE,
    ses.EmailSendingEvent.COMPLAINT,
    ses.EmailSendingEvent.REJECT,
    ses.EmailSendingEvent.DELIVERY_DELAY,
    ses.EmailSendingEvent.RENDERING_FAILURE,
)
# EventBridge's detail-type for the same events (sendonce.domain.deliverability.provider_events.SES_DETAIL_TYPES).
SES_DETAIL_TYPES = (
    "Email Sent",
    "Email Delivered",
    "Email Delivery Delayed",
    "Email Bounced",
    "Email Complaint Received",
    "Email Rejected",
    "Email Rendering Failed",
)
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
    """The events function, its dead-letter queue, and (SES) the configuration set, its
    EventBridge destination and the rule that sends its events to the function.

    Grants on the tables and the webhook secret are the stack's to make.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        ledger_table: dynamodb.ITable,
        campaigns_table: dynamodb.ITable,
        suppressions_table: dynamodb.ITable,
        resend_webhook_secret_name: str | None = None,
        ses_configuration_set_name: str | None = None,
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
        if resend_webhook_secret_name:
            # The secret's name only; without it every webhook is refused (401).
            settings["resend_webhook_secret"] = resend_webhook_secret_name

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
            description="sendonce provider events: SES events and Resend webhooks into the ledger",
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

        self.configuration_set: ses.ConfigurationSet | None = None
        self.rule: events.Rule | None = None
        if ses_configuration_set_name:
            default_bus = events.EventBus.from_event_bus_name(self, "DefaultBus", "default")
            self.configuration_set = ses.ConfigurationSet(
                self, "ConfigurationSet", configuration_set_name=ses_configuration_set_name
            )
            self.configuration_set.add_event_destination(
                "EventBridge",
                destination=ses.EventDestination.event_bus(default_bus),
                events=list(SES_EVENTS),
            )
            self.rule = events.Rule(
                self,
                "SesEvents",
                description="SES sending events of the sendonce configuration set to the events function",
                event_pattern=events.EventPattern(
                    source=["aws.ses"],
                    detail_type=list(SES_DETAIL_TYPES),
                    # Only this stack's sends: other configuration sets in the account publish
                    # to the same default bus.
                    detail={"mail": {"tags": {"ses:configuration-set": [ses_configuration_set_name]}}},
                ),
                targets=[
                    targets.LambdaFunction(
                        self.function,
                        dead_letter_queue=self.dead_letter_queue,
                        retry_attempts=185,
                        max_event_age=cdk.Duration.hours(24),
                    )
                ],
            )
