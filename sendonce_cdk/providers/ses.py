"""Amazon SES in the CDK app: send permission on the sender identity and the stack's
configuration set, the account's quota read, and the configuration set whose events reach
the events function through EventBridge."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ses as ses

from sendonce.adapters.providers.descriptor import Provider
from sendonce.adapters.providers.ses.provider import EVENT_SOURCE, PROVIDER
from sendonce_cdk.providers.base import MailConstruct, ProviderConfig, ProviderStack

if TYPE_CHECKING:
    from sendonce_cdk.provider_events import ProviderEvents

CONFIGURATION_SET_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# What SES publishes to EventBridge for the configuration set; SEND is required: the brakes
# divide by it and it resolves unknown outcomes. Opens and clicks only for the tracked one.
SES_EVENTS = (
    ses.EmailSendingEvent.SEND,
    ses.EmailSendingEvent.DELIVERY,
    ses.EmailSendingEvent.BOUNCE,
    ses.EmailSendingEvent.COMPLAINT,
    ses.EmailSendingEvent.REJECT,
    ses.EmailSendingEvent.DELIVERY_DELAY,
    ses.EmailSendingEvent.RENDERING_FAILURE,
)
# EventBridge's detail-type for the same events (sendonce.adapters.providers.ses.events.SES_DETAIL_TYPES).
SES_DETAIL_TYPES = (
    "Email Sent",
    "Email Delivered",
    "Email Delivery Delayed",
    "Email Bounced",
    "Email Complaint Received",
    "Email Rejected",
    "Email Rendering Failed",
    "Email Opened",
    "Email Clicked",
)
# The tracked configuration set publishes these too: SES then adds the open pixel and rewrites
# the links of every email sent through it (a campaign whose spec asks: `tracking`).
SES_TRACKED_EVENTS = (*SES_EVENTS, ses.EmailSendingEvent.OPEN, ses.EmailSendingEvent.CLICK)


def configuration_set_name(config: ProviderConfig) -> str | None:
    """The SES configuration set the stack creates and every SES send names (SES only)."""
    if PROVIDER.name not in config.providers:
        return None
    return config.provider_value("ses_configuration_set") or f"{config.stack_name[:57]}-events"


def tracked_configuration_set_name(config: ProviderConfig) -> str | None:
    """The configuration set a campaign that tracks opens or clicks names (SES only)."""
    name = configuration_set_name(config)
    return None if name is None else f"{name[:56]}-tracked"


@dataclass(frozen=True)
class SesStack(ProviderStack):
    descriptor: Provider = PROVIDER
    # The configuration set the stack creates (with its EventBridge event destination);
    # None -> "<stack_name>-events".
    context: dict[str, Any] = field(default_factory=lambda: {"ses_configuration_set": None})

    def parse_context(self, value: Any) -> dict[str, Any]:
        raw = value("ses_configuration_set")
        return {"ses_configuration_set": None if raw is None else str(raw)}

    def problems(self, config: ProviderConfig) -> list[str]:
        name = config.provider_value("ses_configuration_set")
        if name is not None and not CONFIGURATION_SET_NAME.fullmatch(name):
            return ["ses_configuration_set must be 1-64 letters, digits, '-' or '_'"]
        return []

    def standing_consumer_settings(self, config: ProviderConfig) -> dict[str, str]:
        # The send rate every concurrent consumer shares (a DynamoDB-paced limiter).
        return {"send_rate": f"{config.send_rate:g}"}

    def consumer_settings(self, config: ProviderConfig) -> dict[str, str]:
        return {
            "configuration_set": str(configuration_set_name(config)),
            "tracked_configuration_set": str(tracked_configuration_set_name(config)),
        }

    def grant_consumer(self, mail: MailConstruct, function: lambda_.IFunction) -> None:
        stack = cdk.Stack.of(mail)
        resources = [
            stack.format_arn(service="ses", resource="identity", resource_name=mail.config.sender_domain),
            # Every SES send names the stack's configuration set, so that its events
            # reach the events function.
            stack.format_arn(
                service="ses", resource="configuration-set", resource_name=configuration_set_name(mail.config)
            ),
            stack.format_arn(
                service="ses", resource="configuration-set", resource_name=tracked_configuration_set_name(mail.config)
            ),
        ]
        function.add_to_role_policy(
            iam.PolicyStatement(sid="SendAsSenderIdentity", actions=["ses:SendEmail"], resources=resources)
        )
        # The account's MaxSendRate caps the shared send rate. GetAccount is read-only
        # and has no resource-level permissions, so it cannot be scoped further.
        function.add_to_role_policy(
            iam.PolicyStatement(sid="ReadSendQuota", actions=["ses:GetAccount"], resources=["*"])
        )

    def grant_account_health(self, mail: MailConstruct, function: lambda_.IFunction) -> None:
        # SendingEnabled and EnforcementStatus; GetAccount has no resource-level permissions.
        function.add_to_role_policy(
            iam.PolicyStatement(sid="ReadAccountHealth", actions=["ses:GetAccount"], resources=["*"])
        )
        if function.role is not None:
            cdk.Validations.of(function.role).acknowledge(
                cdk.Acknowledgment(
                    id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                    reason=(
                        "Only ses:GetAccount (statement ReadAccountHealth): the account's sending state,"
                        " read-only, which SES does not scope to resources."
                    ),
                )
            )

    def add_event_sources(self, scope: ProviderEvents, config: ProviderConfig) -> None:
        name = configuration_set_name(config)
        default_bus = events.EventBus.from_event_bus_name(scope, "DefaultBus", "default")
        scope.configuration_set = ses.ConfigurationSet(scope, "ConfigurationSet", configuration_set_name=name)
        scope.configuration_set.add_event_destination(
            "EventBridge",
            destination=ses.EventDestination.event_bus(default_bus),
            events=list(SES_EVENTS),
        )
        tracked = tracked_configuration_set_name(config)
        scope.tracked_configuration_set = ses.ConfigurationSet(
            scope, "TrackedConfigurationSet", configuration_set_name=tracked
        )
        scope.tracked_configuration_set.add_event_destination(
            "EventBridge",
            destination=ses.EventDestination.event_bus(default_bus),
            events=list(SES_TRACKED_EVENTS),
        )
        scope.rule = events.Rule(
            scope,
            "SesEvents",
            description="SES sending events of the sendonce configuration set to the events function",
            event_pattern=events.EventPattern(
                source=[EVENT_SOURCE],
                detail_type=list(SES_DETAIL_TYPES),
                # Only this stack's sends: other configuration sets in the account publish
                # to the same default bus.
                detail={"mail": {"tags": {"ses:configuration-set": [name, tracked]}}},
            ),
            targets=[
                targets.LambdaFunction(
                    scope.function,
                    dead_letter_queue=scope.dead_letter_queue,
                    retry_attempts=185,
                    max_event_age=cdk.Duration.hours(24),
                )
            ],
        )

    def acknowledge(self, mail: MailConstruct) -> None:
        cdk.Validations.of(mail.consumer_parts.role).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason=(
                    "Only ses:GetAccount (statement ReadSendQuota): a read-only quota lookup that SES"
                    " does not scope to resources. Sends stay scoped to the sender identity."
                ),
            )
        )


STACK = SesStack()
