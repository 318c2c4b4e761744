"""The SQS consumer: the Lambda function that sends each batch through the ledger."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce_cdk.bundling import ARCHITECTURE, RUNTIME, lambda_code

HANDLER = "sendonce.handlers.consumer.lambda_handler"
SERVICE_NAME = "sendonce"
METRICS_NAMESPACE = "Sendonce"


class Consumer(Construct):
    """The consumer function, its log group and role, and its SQS event source.

    Grants on the tables, the DLQ, the secrets and SES are the stack's to make; the
    event source grants consuming from the source queue itself.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        max_receive_count: int,
        ledger_table: dynamodb.ITable,
        campaigns_table: dynamodb.ITable,
        suppressions_table: dynamodb.ITable,
        timeout: cdk.Duration,
        batch_size: int,
        max_concurrency: int,
        send_concurrency: int,
        send_rate: float,
        resend_requests_per_second: float,
        provider_timeout_seconds: int,
        safety_margin_ms: int,
        resend_api_key_secret_name: str | None = None,
        ses_configuration_set: str | None = None,
        unsubscribe_key_secret_name: str | None = None,
        unsubscribe_base_url: str | None = None,
        memory_size: int = 512,
        reserved_concurrency: int | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)

        self.log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=removal_policy
        )
        # An own role instead of AWSLambdaBasicExecutionRole: log writes are scoped to
        # this function's log group, not every log group in the account.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="sendonce consumer: ledger, campaigns, DLQ, provider sends",
        )
        self.log_group.grant_write(self.role)

        environment: dict[str, str] = {
            "SENDONCE_LEDGER_TABLE": ledger_table.table_name,
            "SENDONCE_CAMPAIGNS_TABLE": campaigns_table.table_name,
            # Read for every recipient before sending (docs/deliverability.md).
            "SENDONCE_SUPPRESSIONS_TABLE": suppressions_table.table_name,
            "SENDONCE_DEAD_LETTER_QUEUE_URL": dead_letter_queue.queue_url,
            "SENDONCE_SEND_CONCURRENCY": str(send_concurrency),
            # The send rate every concurrent consumer shares (a DynamoDB-paced limiter).
            "SENDONCE_SES_SEND_RATE": f"{send_rate:g}",
            "SENDONCE_RESEND_REQUESTS_PER_SECOND": f"{resend_requests_per_second:g}",
            "SENDONCE_PROVIDER_TIMEOUT_SECONDS": str(provider_timeout_seconds),
            "SENDONCE_SAFETY_MARGIN_MS": str(safety_margin_ms),
            # The consumer moves a batch to the DLQ itself on its last receive; it must
            # know the count at which SQS would.
            "SENDONCE_MAX_RECEIVE_COUNT": str(max_receive_count),
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            "LOG_LEVEL": "INFO",
        }
        if resend_api_key_secret_name:
            # The secret's name only; the value is read at cold start.
            environment["SENDONCE_RESEND_API_KEY_SECRET"] = resend_api_key_secret_name
        if ses_configuration_set:
            environment["SENDONCE_SES_CONFIGURATION_SET"] = ses_configuration_set
        if unsubscribe_key_secret_name and unsubscribe_base_url:
            # Both or neither (the settings model refuses one alone): without them emails
            # carry no List-Unsubscribe header.
            environment["SENDONCE_UNSUBSCRIBE_KEY_SECRET"] = unsubscribe_key_secret_name
            environment["SENDONCE_UNSUBSCRIBE_BASE_URL"] = unsubscribe_base_url

        self.function = lambda_.Function(
            self,
            "Function",
            description="sendonce consumer: sends each batch of a campaign once per recipient",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            code=code or lambda_code(),
            timeout=timeout,
            memory_size=memory_size,
            # The event source's MaximumConcurrency, reserved: no other function in the
            # account can take the consumer's capacity (docs/operations.md#flood-protection).
            reserved_concurrent_executions=reserved_concurrency,
            role=self.role,
            log_group=self.log_group,
            environment=environment,
        )

        self.event_source = event_sources.SqsEventSource(
            queue,
            batch_size=batch_size,
            report_batch_item_failures=True,
            max_concurrency=max_concurrency,
        )
        self.function.add_event_source(self.event_source)
