"""The sendonce stack: builds the units, wires and grants between them."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.config import MAX_RECEIVE_COUNT, SendonceConfig
from infra.consumer import Consumer
from infra.dashboard import Dashboard
from infra.ledger import LedgerTables
from infra.oncall import OnCall
from infra.queues import SendQueues

OUTPUT_NAMES = (
    "QueueUrl",
    "QueueArn",
    "DeadLetterQueueUrl",
    "DeadLetterQueueArn",
    "LedgerTableName",
    "CampaignsTableName",
    "OnCallTopicArn",
    "ConsumerFunctionName",
)


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
        removal_policy = cdk.RemovalPolicy.RETAIN if config.retain else cdk.RemovalPolicy.DESTROY
        function_timeout = cdk.Duration.seconds(config.function_timeout_seconds)

        self.queues = SendQueues(
            self,
            "Queues",
            visibility_timeout=cdk.Duration.seconds(config.visibility_timeout_seconds),
            max_receive_count=MAX_RECEIVE_COUNT,
            removal_policy=removal_policy,
        )
        self.tables = LedgerTables(self, "Tables", removal_policy=removal_policy)
        self.consumer = Consumer(
            self,
            "Consumer",
            queue=self.queues.queue,
            dead_letter_queue=self.queues.dead_letter_queue,
            max_receive_count=self.queues.max_receive_count,
            ledger_table=self.tables.ledger,
            campaigns_table=self.tables.campaigns,
            timeout=function_timeout,
            batch_size=config.batch_size,
            max_concurrency=config.max_concurrency,
            send_concurrency=config.send_concurrency,
            send_rate=config.send_rate,
            resend_requests_per_second=config.resend_requests_per_second,
            provider_timeout_seconds=config.provider_timeout_seconds,
            safety_margin_ms=config.safety_margin_ms,
            resend_api_key_secret_name=config.resend_api_key_secret_name if config.uses_resend else None,
            ses_configuration_set=config.ses_configuration_set if config.uses_ses else None,
            removal_policy=removal_policy,
            code=code,
        )
        self._grant_consumer()

        self.oncall = OnCall(
            self,
            "OnCall",
            queue=self.queues.queue,
            dead_letter_queue=self.queues.dead_letter_queue,
            function=self.consumer.function,
            queue_age_threshold=cdk.Duration.minutes(config.queue_age_alarm_minutes),
            email=config.oncall_email,
            https_url=config.oncall_https_url,
            removal_policy=removal_policy,
        )
        self.dashboard = Dashboard(
            self,
            "Dashboard",
            dashboard_name=config.stack_name,
            queue=self.queues.queue,
            dead_letter_queue=self.queues.dead_letter_queue,
            function=self.consumer.function,
            function_timeout=function_timeout,
            alarm_names=self.oncall.alarm_names,
        )

        self._output("QueueUrl", self.queues.queue.queue_url)
        self._output("QueueArn", self.queues.queue.queue_arn)
        self._output("DeadLetterQueueUrl", self.queues.dead_letter_queue.queue_url)
        self._output("DeadLetterQueueArn", self.queues.dead_letter_queue.queue_arn)
        self._output("LedgerTableName", self.tables.ledger.table_name)
        self._output("CampaignsTableName", self.tables.campaigns.table_name)
        self._output("OnCallTopicArn", self.oncall.topic.topic_arn)
        self._output("ConsumerFunctionName", self.consumer.function.function_name)

        # Not on the KMS key: moto 5.2.5's CloudFormation fails on AWS::KMS::Key tags
        # (KeyError 'TagKey'), and the local deploy runs this same template.
        cdk.Tags.of(self).add("project", "sendonce", exclude_resource_types=["AWS::KMS::Key"])
        self._acknowledge_findings()

    def _grant_consumer(self) -> None:
        function = self.consumer.function
        self.tables.ledger.grant_read_write_data(function)
        self.tables.campaigns.grant_read_write_data(function)
        # Poison batches are moved to the DLQ by the consumer itself.
        self.queues.dead_letter_queue.grant_send_messages(function)

        if self.config.uses_resend:
            self.resend_api_key = secretsmanager.Secret.from_secret_name_v2(
                self, "ResendApiKey", self.config.resend_api_key_secret_name
            )
            function.add_to_role_policy(
                iam.PolicyStatement(
                    sid="ReadResendApiKey",
                    actions=["secretsmanager:GetSecretValue"],
                    # Secrets Manager appends six random characters to the name.
                    resources=[f"{self.resend_api_key.secret_arn}-??????"],
                )
            )
        if self.config.uses_ses:
            resources = [
                self.format_arn(service="ses", resource="identity", resource_name=self.config.sender_domain)
            ]
            if self.config.ses_configuration_set:
                resources.append(
                    self.format_arn(
                        service="ses", resource="configuration-set", resource_name=self.config.ses_configuration_set
                    )
                )
            function.add_to_role_policy(
                iam.PolicyStatement(sid="SendAsSenderIdentity", actions=["ses:SendEmail"], resources=resources)
            )
            # The account's MaxSendRate caps the shared send rate. GetAccount is read-only
            # and has no resource-level permissions, so it cannot be scoped further.
            function.add_to_role_policy(
                iam.PolicyStatement(sid="ReadSendQuota", actions=["ses:GetAccount"], resources=["*"])
            )

    def _output(self, name: str, value: str) -> None:
        output = cdk.CfnOutput(self, name, value=value)
        output.override_logical_id(name)

    def _acknowledge_findings(self) -> None:
        """cdk-nag AwsSolutions findings this design accepts, each with its reason."""
        cdk.Validations.of(self.consumer.function).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions::AwsSolutions-L1",
                reason=(
                    "Python 3.12 on purpose: the bundle is built from cp312 manylinux2014_aarch64 wheels"
                    " (pydantic-core, markupsafe) that must match the runtime, and the Lambda code is"
                    " tested on 3.12. Moving to a newer runtime changes RUNTIME and PYTHON_VERSION in"
                    " infra/bundling.py together, after the tests pass on it."
                ),
            )
        )
        if self.config.uses_ses:
            cdk.Validations.of(self.consumer.role).acknowledge(
                cdk.Acknowledgment(
                    id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                    reason=(
                        "Only ses:GetAccount (statement ReadSendQuota): a read-only quota lookup that SES"
                        " does not scope to resources. Sends stay scoped to the sender identity."
                    ),
                )
            )
