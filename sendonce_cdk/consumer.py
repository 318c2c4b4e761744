"""The SQS consumer: the Lambda function that sends each batch through the ledger."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce_cdk.function import ServiceFunction

HANDLER = "sendonce.handlers.consumer.lambda_handler"


class Consumer(ServiceFunction):
    """The consumer function (log group, role: `ServiceFunction`) and its SQS event source.

    A subclass, not a wrapper: the function, role and log group stay direct children of
    this construct, so their logical ids are the ones deployed stacks already have.

    `timeout` sizes a full batch; the queue's visibility timeout must stay at least six
    times it (SendonceConfig.visibility_timeout_seconds), or a batch still being sent
    becomes visible to a second consumer.

    Grants on the tables, the DLQ, the secrets and the providers are the stack's to make;
    the event source grants consuming from the source queue itself.

    Public attributes: those of `ServiceFunction`, and `event_source`.
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
        provider_timeout_seconds: int,
        safety_margin_ms: int,
        provider_settings: Mapping[str, str] | None = None,
        unsubscribe_key_secret_name: str | None = None,
        unsubscribe_base_url: str | None = None,
        feedback_id: Mapping[str, str] | None = None,
        pacing: Mapping[str, str] | None = None,
        memory_size: int = 512,
        reserved_concurrency: int | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        # sendonce.settings.ConsumerSettings, by field.
        settings: dict[str, str] = {
            "ledger_table": ledger_table.table_name,
            "campaigns_table": campaigns_table.table_name,
            # Read for every recipient before sending (docs/deliverability.md).
            "suppressions_table": suppressions_table.table_name,
            "dead_letter_queue_url": dead_letter_queue.queue_url,
            "send_concurrency": str(send_concurrency),
            "provider_timeout_seconds": str(provider_timeout_seconds),
            "safety_margin_ms": str(safety_margin_ms),
            # The consumer moves a batch to the DLQ itself on its last receive; it must
            # know the count at which SQS would.
            "max_receive_count": str(max_receive_count),
        }
        # Each provider's settings, `<provider>_<field>` (sendonce_cdk/providers/): send
        # rates, and secrets by name only (their values are read at cold start).
        settings.update(provider_settings or {})
        if unsubscribe_key_secret_name and unsubscribe_base_url:
            # Both or neither (the settings model refuses one alone): without them emails
            # carry no List-Unsubscribe header.
            settings["unsubscribe_key_secret"] = unsubscribe_key_secret_name
            settings["unsubscribe_base_url"] = unsubscribe_base_url
        # feedback_id_sender_id, _stream, _customer: the Feedback-ID header every email carries.
        settings.update(feedback_id or {})
        # mailbox_groups, pacing: the caps per mailbox-provider group it paces by.
        settings.update(pacing or {})

        super().__init__(
            scope,
            id,
            handler=HANDLER,
            description="sendonce consumer: sends each batch of a campaign once per recipient",
            role_description="sendonce consumer: ledger, campaigns, DLQ, provider sends",
            settings=settings,
            timeout=timeout,
            memory_size=memory_size,
            # The event source's MaximumConcurrency, reserved: no other function in the
            # account can take the consumer's capacity (docs/operations.md#flood-protection).
            reserved_concurrency=reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )

        self.event_source = event_sources.SqsEventSource(
            queue,
            batch_size=batch_size,
            # Without it one failed batch would make SQS redeliver every batch of the invocation.
            report_batch_item_failures=True,
            max_concurrency=max_concurrency,
        )
        self.function.add_event_source(self.event_source)
