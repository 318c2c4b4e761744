"""What the operator's CLI builds: unknown outcomes, the suppression list's service, the
shared limiter's view of who is sending now and the forecasts (the operator API's and the jobs
worker's too, from their own settings: api.py). (Its audit is audit.py's.)"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from sendonce.adapters.dynamodb.limiter_slots import DynamoDBLimiterSlots
from sendonce.adapters.dynamodb.warmup import DynamoDBWarmupBudget
from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import Pace, Provider
from sendonce.domain.campaigns.forecasting import ForecastService, SharingNow
from sendonce.domain.campaigns.unknowns import UnknownOutcomes
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups
from sendonce.domain.deliverability.suppressions import SuppressionService
from sendonce.domain.deliverability.warmup import Warmup
from sendonce.domain.sending.sending_now import CampaignProgress, SendingNow
from sendonce.wiring.clients import Clients
from sendonce.wiring.stores import build_ledger_events, build_suppressions


def build_unknown_outcomes(
    ledger_table: str, campaigns_table: str, clients: Clients, *, accept_possible_duplicates: bool = False
) -> UnknownOutcomes:
    """What `sendonce campaign unknowns` and `campaign resume --include-unknown` call."""
    return UnknownOutcomes(
        ledger_events=build_ledger_events(ledger_table, campaigns_table, clients.dynamodb),
        accept_possible_duplicates=accept_possible_duplicates,
    )


def build_suppression_service(table_name: str, clients: Clients) -> SuppressionService:
    """What `sendonce suppression add|remove|list|import|check` calls."""
    return SuppressionService(build_suppressions(table_name, clients.dynamodb))


def build_sending_now(
    campaigns_table: str,
    clients: Clients,
    *,
    campaigns: CampaignProgress,
    paces: Mapping[str, Pace],
    providers: Mapping[str, Provider] | None = None,
    clock: Callable[[], float] = time.time,
) -> SendingNow:
    """What `sendonce sending` and `campaign status|watch` read of the shared limiter: every
    registered provider's slot items (a provider nobody sends with has none: one empty
    Query). `paces`: the consumer's, for the rate in force (the SES account's own send
    quota, which the consumer also applies, is not read here)."""
    registered = providers if providers is not None else registry.registered()
    return SendingNow(
        slots=DynamoDBLimiterSlots(client=clients.dynamodb, table_name=campaigns_table, paces=paces),
        campaigns=campaigns,
        batch_sizes={name: p.capabilities.max_batch for name, p in registered.items()},
        clock=clock,
    )


def build_forecast_service(
    campaigns_table: str,
    suppressions_table: str | None,
    clients: Clients,
    *,
    campaigns: CampaignProgress,
    paces: Mapping[str, Pace],
    groups: MailboxGroups | None = None,
    caps: Mapping[str, float] | None = None,
    warm: Warmup | None = None,
    fallback_rate: Callable[[str], float | None] | None = None,
    providers: Mapping[str, Provider] | None = None,
) -> ForecastService:
    """`campaign forecast` and the API's forecasts: the campaign (from `campaigns`), the
    suppression list (None: not checked), who shares the provider's rate now (the limiter's
    slots, `paces` for the rate in force, `fallback_rate` for a provider it does not pace)."""
    return ForecastService(
        campaigns=campaigns,
        suppressions=build_suppressions(suppressions_table, clients.dynamodb) if suppressions_table else None,
        sharing=SharingNow(
            build_sending_now(campaigns_table, clients, campaigns=campaigns, paces=paces, providers=providers),
            fallback_rate=fallback_rate,
        ),
        groups=groups,
        caps=caps,
        warm=warm,
        # The sending domain's day item (a GetItem, only for a domain warming up).
        sent_on=DynamoDBWarmupBudget(client=clients.dynamodb, table_name=campaigns_table).sent,
    )
