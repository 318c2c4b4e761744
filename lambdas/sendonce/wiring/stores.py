"""The stores several functions share, each over the DynamoDB client its caller gives
(`clients.dynamodb`, or `clients.patient_dynamodb` on the send path), and the scheduler."""

from __future__ import annotations

from typing import Any

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.ledger_events import DynamoDBLedgerEvents
from sendonce.adapters.dynamodb.ledger_keys import CampaignShards
from sendonce.adapters.dynamodb.recorded_test_sends import DynamoDBTestSendLog
from sendonce.adapters.dynamodb.suppressions import DynamoDBSuppressions
from sendonce.adapters.scheduler import EventBridgeScheduler
from sendonce.domain.campaigns.ports import CampaignScheduler
from sendonce.settings import ApiSettings, ConsumerSettings
from sendonce.wiring.clients import Clients


def build_campaign_store(
    table_name: str, dynamodb: Any, *, counted: bool = False
) -> tuple[DynamoDBCampaignStore, CampaignShards]:
    """The campaign store, and the ledger's shard counts read from it: learnt from every
    campaign the store reads, so a service that reads the campaign anyway (the consumer,
    once per message) never reads it again for its ledger keys."""
    shards = CampaignShards(lambda campaign_id: campaigns.get(campaign_id))
    campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=table_name, on_read=shards.learn, counted=counted)
    return campaigns, shards


def build_ledger_events(ledger_table: str, campaigns_table: str, dynamodb: Any) -> DynamoDBLedgerEvents:
    """Provider events on the ledger, with the campaigns' shard counts read from their items."""
    _, shards = build_campaign_store(campaigns_table, dynamodb)
    return DynamoDBLedgerEvents(
        client=dynamodb, ledger_table=ledger_table, campaigns_table=campaigns_table, shards_of=shards
    )


def build_suppressions(table_name: str, dynamodb: Any) -> DynamoDBSuppressions:
    return DynamoDBSuppressions(client=dynamodb, table_name=table_name)


def build_test_send_log(campaigns_table: str, dynamodb: Any) -> DynamoDBTestSendLog:
    """The record of test sends (`campaign status` and the API's test-sends route read it)."""
    return DynamoDBTestSendLog(client=dynamodb, table_name=campaigns_table)


def build_scheduler(settings: ConsumerSettings | ApiSettings, clients: Clients) -> CampaignScheduler | None:
    """EventBridge Scheduler when the settings name the schedule group, role and target."""
    if settings.scheduler_group and settings.scheduler_role_arn and settings.scheduled_start_function_arn:
        return EventBridgeScheduler(
            client=clients.scheduler,
            group_name=settings.scheduler_group,
            target_arn=settings.scheduled_start_function_arn,
            role_arn=settings.scheduler_role_arn,
        )
    return None
