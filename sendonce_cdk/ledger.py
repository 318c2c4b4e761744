"""The delivery ledger, the campaigns table and the suppression list."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct


class LedgerTables(Construct):
    """Where every delivery's state and every campaign's state live, and who is never sent to.

    Ledger records have no TTL: a delivery's record must outlive every replay of its
    batch (SQS retention, the DLQ's 14 days, and redrives weeks later), or a replay
    would send again. Suppressions have none either: an unsubscribe or a complaint is
    for good (docs/deliverability.md).
    """

    def __init__(self, scope: Construct, id: str, *, removal_policy: cdk.RemovalPolicy) -> None:
        super().__init__(scope, id)
        common = dict(
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=removal_policy,
        )
        self.ledger = dynamodb.Table(
            self,
            "Ledger",
            partition_key=dynamodb.Attribute(name="campaign_id", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="recipient_id", type=dynamodb.AttributeType.STRING),
            **common,
        )
        self.campaigns = dynamodb.Table(
            self,
            "Campaigns",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            **common,
        )
        # One item per address, keyed by its fingerprint (the address is never stored).
        self.suppressions = dynamodb.Table(
            self,
            "Suppressions",
            partition_key=dynamodb.Attribute(name="fp", type=dynamodb.AttributeType.STRING),
            **common,
        )
