"""The events function: provider events from an event bus and webhooks over HTTP."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.adapters.dynamodb.engagement import DynamoDBEngagement
from sendonce.adapters.dynamodb.group_caps import DynamoDBGroupCaps
from sendonce.adapters.dynamodb.ledger_events import DynamoDBLedgerEvents
from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import Provider, event_readers
from sendonce.domain.deliverability.engagement import EngagementRecorder
from sendonce.domain.deliverability.provider_events import BrakeSettings, ProviderEventService, WebhookReader
from sendonce.settings import EventsSettings
from sendonce.wiring.clients import Clients, clients
from sendonce.wiring.secrets import build_secret_reader
from sendonce.wiring.stores import build_campaign_store, build_suppressions


def build_events_service(
    settings: EventsSettings, clients: Clients, *, providers: Mapping[str, Provider] | None = None
) -> ProviderEventService:
    dynamodb = clients.dynamodb
    registered = providers if providers is not None else registry.registered()
    secret = build_secret_reader(clients)
    webhooks: dict[str, WebhookReader] = {}
    for name, provider in registered.items():
        if provider.webhook is not None:
            reader = provider.webhook(settings.provider_settings(provider), secret)
            if reader is not None:
                webhooks[name] = reader
    campaigns, shards = build_campaign_store(settings.campaigns_table, dynamodb)
    return ProviderEventService(
        ledger_events=DynamoDBLedgerEvents(
            client=dynamodb,
            ledger_table=settings.ledger_table,
            campaigns_table=settings.campaigns_table,
            shards_of=shards,
        ),
        suppressions=build_suppressions(settings.suppressions_table, dynamodb),
        campaigns=campaigns,
        brakes=BrakeSettings(
            complaint_rate=settings.complaint_rate_threshold,
            hard_bounce_rate=settings.hard_bounce_rate_threshold,
            min_sent=settings.brake_min_sent,
        ),
        event_readers=event_readers(registered),
        webhooks=webhooks,
        # A deferral slows its mailbox group: the factor the consumers' group caps read.
        group_caps=DynamoDBGroupCaps(client=dynamodb, table_name=settings.campaigns_table),
        pacing=settings.group_pacing,
        # Opens and clicks of the campaigns that track them, apart from the ledger.
        engagement=EngagementRecorder(
            store=DynamoDBEngagement(client=dynamodb, table_name=settings.campaigns_table),
            campaign_of=campaigns.get,
        ),
        # A counted campaign's `sent` for the brakes: the aggregator's totals, not 'sent' shards.
        counters=DynamoDBCounters(client=dynamodb, table_name=settings.campaigns_table),
    )


@lru_cache(maxsize=4)
def events_service(settings: EventsSettings) -> ProviderEventService:
    """Built once per Lambda execution environment for these settings."""
    return build_events_service(settings, clients())
