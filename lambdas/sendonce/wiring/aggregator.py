"""The counters' aggregator: counter items and markers in the campaigns table; it completes
a campaign its counters say is done."""

from __future__ import annotations

import time
from functools import lru_cache

from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.domain.campaigns.counters import CounterAggregator
from sendonce.settings import AggregatorSettings
from sendonce.wiring.clients import Clients, clients
from sendonce.wiring.stores import build_campaign_store


def build_aggregator_service(settings: AggregatorSettings, clients: Clients) -> CounterAggregator:
    dynamodb = clients.patient_dynamodb
    campaigns, _ = build_campaign_store(settings.campaigns_table, dynamodb)
    return CounterAggregator(
        counters=DynamoDBCounters(client=dynamodb, table_name=settings.campaigns_table),
        campaigns=campaigns,
        clock_ms=lambda: int(time.time() * 1000),
    )


@lru_cache(maxsize=4)
def aggregator_service(settings: AggregatorSettings) -> CounterAggregator:
    """Built once per Lambda execution environment for these settings."""
    return build_aggregator_service(settings, clients())
