"""The counters' aggregator: the ledger's and the campaigns table's streams into
per-campaign counters (docs/scale.md, "Counters")."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce.contract import AGGREGATOR_BATCH_SIZE, AGGREGATOR_BATCHING_WINDOW_SECONDS, BATCH_RECORD_SK_PREFIX
from sendonce_cdk.function import ServiceFunction

HANDLER = "sendonce.handlers.aggregator.lambda_handler"
TIMEOUT = cdk.Duration.seconds(120)
# A record applied twice counts once, so retrying is safe; a batch that still fails is
# bisected down to its poison record, whose position goes to the dead-letter queue (the
# counters then drift from the ledger by it: `sendonce campaign reconcile` shows by how much).
RETRY_ATTEMPTS = 20
RECORD_MAX_AGE = cdk.Duration.hours(24)


class Aggregator(Construct):
    """The function and its two stream mappings; grants on the campaigns table are the stack's.

    One invocation per stream shard at a time (parallelization 1): a counter item keeps the
    last sequence number applied from its partition-key value, which holds only if that
    key's records arrive in order.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        ledger_table: dynamodb.ITable,
        campaigns_table: dynamodb.ITable,
        reserved_concurrency: int | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            retention_period=cdk.Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            removal_policy=removal_policy,
        )
        handler = ServiceFunction(
            self,
            "Handler",
            handler=HANDLER,
            description="sendonce counters: the ledger's and the campaigns table's streams into per-campaign counts",
            # sendonce.settings.AggregatorSettings, by field.
            settings={"campaigns_table": campaigns_table.table_name},
            timeout=TIMEOUT,
            memory_size=512,
            reserved_concurrency=reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )
        self.function = handler.function
        self.role = handler.role
        self.log_group = handler.log_group
        common = dict(
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=AGGREGATOR_BATCH_SIZE,
            max_batching_window=cdk.Duration.seconds(AGGREGATOR_BATCHING_WINDOW_SECONDS),
            bisect_batch_on_error=True,
            retry_attempts=RETRY_ATTEMPTS,
            max_record_age=RECORD_MAX_AGE,
            parallelization_factor=1,
            on_failure=event_sources.SqsDlq(self.dead_letter_queue),
        )
        self.function.add_event_source(event_sources.DynamoEventSource(ledger_table, **common))
        # Of the campaigns table only inserted batch records count (once per batch), under
        # any of a campaign's batch shard keys; their enqueued markers and groups do not pass.
        self.function.add_event_source(
            event_sources.DynamoEventSource(
                campaigns_table,
                filters=[
                    lambda_.FilterCriteria.filter(
                        {
                            "eventName": lambda_.FilterRule.is_equal("INSERT"),
                            "dynamodb": {"Keys": {"sk": {"S": lambda_.FilterRule.begins_with(BATCH_RECORD_SK_PREFIX)}}},
                        }
                    )
                ],
                **common,
            )
        )
