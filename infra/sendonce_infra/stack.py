"""The sendonce stack: the `SendOnce` construct, the stack outputs the CLI reads, tags."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from sendonce.contract import Output
from sendonce_cdk import SendOnce
from sendonce_cdk.config import SendonceConfig

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
                " (SQS -> Lambda -> DynamoDB ledger -> "
                + "/".join(stack.descriptor.title for stack in config.provider_stacks.values())
                + ")"
            ),
            **kwargs,
        )
        self.config = config
        self.sendonce = SendOnce.from_config(self, HIDDEN_ID, config=config, code=code)
        mail = self.sendonce

        # Every name in sendonce.contract.Output, nothing else (tests/infra/test_contract.py).
        outputs = {
            Output.QUEUE_URL: mail.queue.queue_url,
            Output.QUEUE_ARN: mail.queue.queue_arn,
            Output.DEAD_LETTER_QUEUE_URL: mail.dead_letter_queue.queue_url,
            Output.DEAD_LETTER_QUEUE_ARN: mail.dead_letter_queue.queue_arn,
            Output.LEDGER_TABLE_NAME: mail.ledger_table.table_name,
            Output.CAMPAIGNS_TABLE_NAME: mail.campaigns_table.table_name,
            Output.ON_CALL_TOPIC_ARN: mail.on_call_topic.topic_arn,
            Output.CONSUMER_FUNCTION_NAME: mail.consumer.function_name,
            Output.SUPPRESSIONS_TABLE_NAME: mail.suppressions_table.table_name,
            Output.EVENTS_FUNCTION_NAME: mail.provider_events.function.function_name,
            Output.EVENTS_DEAD_LETTER_QUEUE_URL: mail.provider_events.dead_letter_queue.queue_url,
            Output.SCHEDULE_GROUP_NAME: mail.scheduled_start.group_name,
            Output.SCHEDULER_ROLE_ARN: mail.scheduled_start.scheduler_role.role_arn,
            Output.SCHEDULED_START_FUNCTION_ARN: mail.scheduled_start.function.function_arn,
            # execute-api URLs built from the APIs' Refs (moto creates no HTTP API: there they
            # read https://None.execute-api...).
            Output.API_URL: mail.operator_api_url,
            # A provider's webhook URL is <PublicApiUrl>webhooks/<provider>; unsubscribe links are
            # <PublicApiUrl>u/<token> unless a custom domain fronts it (docs/deploy.md).
            Output.PUBLIC_API_URL: mail.public_api_url,
        }
        for name, value in outputs.items():
            self._output(name, value)

        # Not on the KMS key: moto 5.2.5's CloudFormation fails on AWS::KMS::Key tags
        # (KeyError 'TagKey'), and the local deploy runs this same template.
        cdk.Tags.of(self).add("project", "sendonce", exclude_resource_types=["AWS::KMS::Key"])

    def _output(self, name: Output, value: str) -> None:
        # The logical id is the name itself: the CLI and the local deploy look outputs up by it.
        output = cdk.CfnOutput(self, name.value, value=value)
        output.override_logical_id(name.value)
