"""The unsubscribe function behind the HTTP API's custom domain."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import lru_cache

from sendonce.domain.deliverability.unsubscribe import UnsubscribeService
from sendonce.settings import UnsubscribeSettings
from sendonce.wiring.clients import Clients, clients
from sendonce.wiring.secrets import UNSUBSCRIBE_KEYS_TTL_S, build_unsubscribe_tokens
from sendonce.wiring.stores import build_ledger_events, build_suppressions


def build_unsubscribe_service(
    settings: UnsubscribeSettings,
    clients: Clients,
    *,
    keys_ttl_s: float = UNSUBSCRIBE_KEYS_TTL_S,
    clock: Callable[[], float] = time.time,
) -> UnsubscribeService:
    dynamodb = clients.dynamodb
    ledger_events = None
    if settings.ledger_table and settings.campaigns_table:
        ledger_events = build_ledger_events(settings.ledger_table, settings.campaigns_table, dynamodb)
    return UnsubscribeService(
        tokens=build_unsubscribe_tokens(settings.unsubscribe_key_secret, clients, ttl_s=keys_ttl_s, clock=clock),
        suppressions=build_suppressions(settings.suppressions_table, dynamodb),
        ledger_events=ledger_events,
    )


@lru_cache(maxsize=4)
def unsubscribe_service(settings: UnsubscribeSettings) -> UnsubscribeService:
    """Built once per Lambda execution environment for these settings."""
    return build_unsubscribe_service(settings, clients())
