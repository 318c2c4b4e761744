"""The delivery ledger, the campaigns table and the suppression list."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from sendonce.contract import CAMPAIGNS_BY_STATE_INDEX, CAMPAIGNS_TTL_ATTRIBUTE


class LedgerTables(Construct):
    """Where every delivery's state and every campaign's state live, and who is never sent to.

    Ledger records have no TTL: a delivery's record must outlive every replay of its
    batch (SQS retention, the DLQ's 14 days, and redrives weeks later), or a replay
    would send again. Suppressions have none either: an unsubscribe or a complaint is
    for good (docs/deliverability.md). The campaigns table's TTL reads `expires_at`,
    which only the shared limiter's one-second slots carry.
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
            # Read by the counters' aggregator (sendonce_cdk/aggregator.py); a stream is an
            # in-place update of a deployed table.
            stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
            **common,
        )
        # TTL and the index are in-place updates of a deployed table, never a replacement.
        self.campaigns = dynamodb.Table(
            self,
            "Campaigns",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            time_to_live_attribute=CAMPAIGNS_TTL_ATTRIBUTE,
            # Its inserted batch records count the published recipients.
            stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
            **common,
        )
        # Sparse and keys-only: only campaign state items carry `state`, and a campaign's
        # per-message updates (counts, leases) never write to it. `campaign list` queries it.
        self.campaigns.add_global_secondary_index(
            index_name=CAMPAIGNS_BY_STATE_INDEX,
            partition_key=dynamodb.Attribute(name="state", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="campaign_id", type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.KEYS_ONLY,
        )
        # One item per address, keyed by its fingerprint (the address is never stored).
        self.suppressions = dynamodb.Table(
            self,
            "Suppressions",
            partition_key=dynamodb.Attribute(name="fp", type=dynamodb.AttributeType.STRING),
            **common,
        )
