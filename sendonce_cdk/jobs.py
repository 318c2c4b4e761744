"""The jobs worker: its queue (one message per step of a job, naming the job), that queue's
dead-letter queue, and the function that takes one step per message (sendonce.handlers.jobs).

Grants on the tables and the campaign queue are the stack's to make (SendOnce._grant_jobs).
"""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce_cdk.config import JOBS_RESERVED
from sendonce_cdk.function import ServiceFunction

HANDLER = "sendonce.handlers.jobs.lambda_handler"
# A republish step reads 25 batch records and their deliveries (25 BatchGetItems) and
# publishes what is left: seconds; a reconcile step, one Query per shard up to 1,000 records.
# An S3 publish part publishes one byte range (2 MB: ~20,000 recipients, 200 batch records):
# tens of seconds. Five minutes leaves room on a throttled table; the queue's visibility is
# six times that, as for the consumer, so a step still running is not given to a second worker.
TIMEOUT = cdk.Duration.minutes(5)
VISIBILITY = cdk.Duration.minutes(30)
# A step that keeps failing (its job item unreadable, the campaign queue refusing) is kept
# for on-call after this many tries; `sendonce job status` shows the job still running.
MAX_RECEIVE_COUNT = 10


class JobsWorker(Construct):
    """Public attributes: `queue`, `dead_letter_queue`, `function`, `role`, `log_group`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        ledger_table: dynamodb.ITable,
        campaigns_table: dynamodb.ITable,
        campaign_queue: sqs.IQueue,
        campaign_dead_letter_queue: sqs.IQueue,
        suppressions_table: dynamodb.ITable | None = None,
        provider_settings: Mapping[str, str] | None = None,
        pacing: Mapping[str, str] | None = None,
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
        self.queue = sqs.Queue(
            self,
            "Queue",
            visibility_timeout=VISIBILITY,
            retention_period=cdk.Duration.days(4),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=MAX_RECEIVE_COUNT),
            removal_policy=removal_policy,
        )
        worker = ServiceFunction(
            self,
            "Handler",
            handler=HANDLER,
            description="sendonce jobs worker: resume, cancel, reconcile, S3 publish and forecast, a page or part a step",
            # sendonce.settings.JobsSettings, by field.
            settings={
                "ledger_table": ledger_table.table_name,
                "campaigns_table": campaigns_table.table_name,
                "queue_url": campaign_queue.queue_url,
                "dead_letter_queue_url": campaign_dead_letter_queue.queue_url,
                "jobs_queue_url": self.queue.queue_url,
                # A forecast_s3 job's parts read the suppression list (BatchGetItem only).
                **({"suppressions_table": suppressions_table.table_name} if suppressions_table else {}),
                # The providers' rates, as the consumer's (a forecast_s3 job times its result at
                # them, as the API does an inline one), and an audit job's provider reads
                # (ProviderStack.audit_settings), prefixed.
                **(provider_settings or {}),
                # The deployment's mailbox groups: a forecast_s3 job counts the audience by them.
                **(pacing or {}),
            },
            timeout=TIMEOUT,
            memory_size=512,
            # Jobs are few (an operator's resume or cancel): a handful at once is plenty, and
            # bounds what a runaway loop could take from the account's pool.
            reserved_concurrency=JOBS_RESERVED,
            removal_policy=removal_policy,
            code=code,
        )
        self.function = worker.function
        self.role = worker.role
        self.log_group = worker.log_group
        # Capped at the function's reservation, as the consumer's is: beyond it Lambda would be
        # throttled, and a throttled receive counts toward the queue's maxReceiveCount.
        self.event_source = event_sources.SqsEventSource(
            self.queue, batch_size=1, report_batch_item_failures=True, max_concurrency=JOBS_RESERVED
        )
        self.function.add_event_source(self.event_source)
