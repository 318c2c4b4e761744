"""The account health check: the provider's account (from the provider registry: SES reads
GetAccount), the check's record and the campaigns it pauses, in the campaigns table."""

from __future__ import annotations

import time
from functools import lru_cache

from sendonce.adapters.dynamodb.account_health import DynamoDBHealthRecords
from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import ProviderEnv
from sendonce.domain.deliverability.account_health import AccountHealthService
from sendonce.settings import AccountHealthSettings
from sendonce.wiring.clients import Clients, clients
from sendonce.wiring.secrets import build_secret_reader
from sendonce.wiring.stores import build_campaign_store

# The account read's timeout: a failed or slow read fails this check; the next one reads again.
ACCOUNT_READ_TIMEOUT_S = 10.0


def build_account_health_service(settings: AccountHealthSettings, clients: Clients) -> AccountHealthService:
    read_account = registry.registered()[settings.provider].account
    if read_account is None:  # the settings model refuses such a provider; a registry may change
        raise ValueError(f"{settings.provider!r} has no account state to read")
    env = ProviderEnv(clients=clients, secret=build_secret_reader(clients), timeout_seconds=ACCOUNT_READ_TIMEOUT_S)
    campaigns, _ = build_campaign_store(settings.campaigns_table, clients.dynamodb)
    return AccountHealthService(
        account=read_account(env),
        records=DynamoDBHealthRecords(client=clients.dynamodb, table_name=settings.campaigns_table),
        campaigns=campaigns,
        clock_ms=lambda: int(time.time() * 1000),
    )


@lru_cache(maxsize=4)
def account_health_service(settings: AccountHealthSettings) -> AccountHealthService:
    """Built once per Lambda execution environment for these settings."""
    return build_account_health_service(settings, clients())
