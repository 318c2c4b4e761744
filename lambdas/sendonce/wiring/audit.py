"""A campaign's audit against its provider's own records: `sendonce campaign audit`, and the
work of an audit job (the jobs worker's, or the CLI's when it runs jobs in process). It reads
the provider with the consumer's sending settings (or the jobs worker's: the same fields),
which the caller gives: no function reads another's settings."""

from __future__ import annotations

from collections.abc import Callable

from sendonce.adapters.dynamodb.event_records import LedgerEventRecords
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.adapters.providers import registry
from sendonce.domain.audit.records import ProviderRecords
from sendonce.domain.audit.service import CampaignAudit
from sendonce.settings import ConsumerSettings, JobsSettings
from sendonce.wiring.clients import Clients
from sendonce.wiring.providers import build_provider_env
from sendonce.wiring.stores import build_campaign_store, build_ledger_events


def build_campaign_audit(
    settings: ConsumerSettings | JobsSettings,
    provider: str,
    clients: Clients,
    *,
    retention_days: float | None = None,
    share: float = 0.5,
) -> CampaignAudit:
    """The campaign's provider's own records (Resend's listing, at a lower priority than
    sending on the shared rate limit; SES's recorded events) set against the ledger."""
    dynamodb = clients.patient_dynamodb
    campaigns, shards = build_campaign_store(settings.campaigns_table, dynamodb)
    described = registry.registered().get(provider)
    records: ProviderRecords
    if described is not None and described.records is not None:
        own = settings.provider_settings(described)
        pace = described.pace(own, None)
        limiter = DynamoDBRateLimiter(
            client=dynamodb,
            table_name=settings.campaigns_table,
            rates={provider: pace.rate},
            reserve={provider: pace.reserve},
        )
        records = described.records(own, build_provider_env(settings, clients), limiter, retention_days, share)
    else:
        records = LedgerEventRecords(
            client=dynamodb, ledger_table=settings.ledger_table, shards_of=shards, provider=provider
        )
    return CampaignAudit(
        campaigns=campaigns,
        ledger=DynamoDBLedger(client=dynamodb, table_name=settings.ledger_table, shards_of=shards),
        ledger_events=build_ledger_events(settings.ledger_table, settings.campaigns_table, dynamodb),
        records=records,
    )


def build_auditor(
    settings: Callable[[], ConsumerSettings | JobsSettings], clients: Clients
) -> Callable[[str], CampaignAudit]:
    """An audit job's auditor (jobs/work.py's Audit): the campaign's provider's audit, with
    the sending settings `settings()` gives when an audit runs (a SettingsError it raises
    fails the job with its reason)."""

    def auditor(provider: str) -> CampaignAudit:
        return build_campaign_audit(settings(), provider, clients)

    return auditor
