"""The campaign send queue and its dead-letter queue."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_sqs as sqs
from constructs import Construct

SOURCE_RETENTION = cdk.Duration.days(4)
# The DLQ keeps messages longer than the source did, so a message that aged in the
# source queue still has 14 days here for someone to look at and redrive it.
DEAD_LETTER_RETENTION = cdk.Duration.days(14)


class SendQueues(Construct):
    """Batches of recipients waiting to be sent, and the batches that could not be."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        visibility_timeout: cdk.Duration,
        max_receive_count: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, id)
        self.max_receive_count = max_receive_count

        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            retention_period=DEAD_LETTER_RETENTION,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            removal_policy=removal_policy,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            visibility_timeout=visibility_timeout,
            retention_period=SOURCE_RETENTION,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=max_receive_count),
            removal_policy=removal_policy,
        )
