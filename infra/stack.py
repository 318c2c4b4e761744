"""The sendonce stack: the `SendOnce` construct, the stack outputs the CLI reads, tags."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from sendonce_cdk import SendOnce
from sendonce_cdk.config import SendonceConfig

OUTPUT_NAMES = (
    "QueueUrl",
    "QueueArn",
    "DeadLetterQueueUrl",
    "DeadLetterQueueArn",
    "LedgerTableName",
    "CampaignsTableName",
    "OnCallTopicArn",
    "ConsumerFunctionName",
    "SuppressionsTableName",
    "EventsFunctionName",
    "EventsDeadLetterQueueUrl",
    # execute-api URLs built from the APIs' Refs (moto creates no HTTP API: there they
    # read https://None.execute-api...).
    "ApiUrl",
    "PublicApiUrl",
)
# A construct with this id is left out of its children's logical ids: the template's
# resources keep the ids they had when the stack built them itself.
HIDDEN_ID = "Default"


class SendonceStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: SendonceConfig,
        code: lambda_.Code | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope,
            id,
            description=(
                "sendonce: campaign email delivery, each recipient once"
                " (SQS -> Lambda -> DynamoDB ledger -> SES/Resend)"
            ),
            **kwargs,
        )
        self.config = config
        self.sendonce = SendOnce.from_config(self, HIDDEN_ID, config=config, code=code)
        mail = self.sendonce

        self._output("QueueUrl", mail.queue.queue_url)
        self._output("QueueArn", mail.queue.queue_arn)
        self._output("DeadLetterQueueUrl", mail.dead_letter_queue.queue_url)
        self._output("DeadLetterQueueArn", mail.dead_letter_queue.queue_arn)
        self._output("LedgerTableName", mail.ledger_table.table_name)
        self._output("CampaignsTableName", mail.campaigns_table.table_name)
        self._output("OnCallTopicArn", mail.on_call_topic.topic_arn)
        self._output("ConsumerFunctionName", mail.consumer.function_name)
        self._output("SuppressionsTableName", mail.suppressions_table.table_name)
        self._output("EventsFunctionName", mail.provider_events.function.function_name)
        self._output("EventsDeadLetterQueueUrl", mail.provider_events.dead_letter_queue.queue_url)
        self._output("ApiUrl", mail.operator_api_url)
        # Resend's webhook URL is <PublicApiUrl>webhooks/resend; unsubscribe links are
        # <PublicApiUrl>u/<token> unless a custom domain fronts it (docs/deploy.md).
        self._output("PublicApiUrl", mail.public_api_url)

        # Not on the KMS key: moto 5.2.5's CloudFormation fails on AWS::KMS::Key tags
        # (KeyError 'TagKey'), and the local deploy runs this same template.
        cdk.Tags.of(self).add("project", "sendonce", exclude_resource_types=["AWS::KMS::Key"])

    def _output(self, name: str, value: str) -> None:
        output = cdk.CfnOutput(self, name, value=value)
        output.override_logical_id(name)
