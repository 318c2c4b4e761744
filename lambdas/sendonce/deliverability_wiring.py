"""Builds the deliverability services from validated settings. Nothing runs at import time."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import lru_cache

import boto3

from sendonce.adapters.dynamodb_campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb_ledger_events import DynamoDBLedgerEvents
from sendonce.adapters.dynamodb_suppressions import DynamoDBSuppressions
from sendonce.adapters.svix_webhooks import SvixWebhookVerifier
from sendonce.deliverability_settings import EventsSettings, UnsubscribeSettings
from sendonce.errors import SettingsError
from sendonce.provider_events import BrakeSettings, ProviderEventService
from sendonce.suppressions import SuppressionService
from sendonce.unknowns import UnknownOutcomes
from sendonce.unsubscribe import KeySet, UnsubscribeService, UnsubscribeTokens

# How long a function keeps the unsubscribe keys before reading the secret again
# (docs/deliverability.md, "The key").
UNSUBSCRIBE_KEYS_TTL_S = 300.0


def secret_value(session: boto3.session.Session, secret_name: str, what: str, *, fresh: bool = False) -> str:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

    provider = SecretsProvider(boto3_client=session.client("secretsmanager"))
    value = provider.get(secret_name, max_age=300, force_fetch=fresh)
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"secret {secret_name!r} holds no {what}")
    return value.strip()


def unsubscribe_tokens(
    session: boto3.session.Session,
    secret_name: str,
    *,
    ttl_s: float = UNSUBSCRIBE_KEYS_TTL_S,
    clock: Callable[[], float] = time.time,
) -> UnsubscribeTokens:
    """Tokens over a key set read now (a bad secret fails the cold start) and again every `ttl_s`."""

    def load() -> str:
        return secret_value(session, secret_name, "unsubscribe key", fresh=True)

    ring = KeySet(load, ttl_s=ttl_s, clock=clock)
    try:
        ring.keys()
    except ValueError as exc:
        raise SettingsError(f"secret {secret_name!r}: {exc}") from exc
    return UnsubscribeTokens(ring)


def suppressions(table_name: str, session: boto3.session.Session | None = None) -> DynamoDBSuppressions:
    session = session or boto3.session.Session()
    return DynamoDBSuppressions(client=session.client("dynamodb"), table_name=table_name)


def assemble_events(settings: EventsSettings, session: boto3.session.Session | None = None) -> ProviderEventService:
    session = session or boto3.session.Session()
    dynamodb = session.client("dynamodb")
    verifier = None
    if settings.resend_webhook_secret:
        try:
            verifier = SvixWebhookVerifier(secret=secret_value(session, settings.resend_webhook_secret, "webhook secret"))
        except ValueError as exc:
            raise SettingsError(f"secret {settings.resend_webhook_secret!r}: {exc}") from exc
    return ProviderEventService(
        ledger_events=DynamoDBLedgerEvents(
            client=dynamodb, ledger_table=settings.ledger_table, campaigns_table=settings.campaigns_table
        ),
        suppressions=DynamoDBSuppressions(client=dynamodb, table_name=settings.suppressions_table),
        campaigns=DynamoDBCampaignStore(client=dynamodb, table_name=settings.campaigns_table),
        brakes=BrakeSettings(
            complaint_rate=settings.complaint_rate_threshold,
            hard_bounce_rate=settings.hard_bounce_rate_threshold,
            min_sent=settings.brake_min_sent,
        ),
        verifier=verifier,
    )


@lru_cache(maxsize=4)
def events_service(settings: EventsSettings) -> ProviderEventService:
    """Built once per Lambda execution environment for these settings."""
    return assemble_events(settings)


def assemble_unsubscribe(
    settings: UnsubscribeSettings,
    session: boto3.session.Session | None = None,
    *,
    keys_ttl_s: float = UNSUBSCRIBE_KEYS_TTL_S,
    clock: Callable[[], float] = time.time,
) -> UnsubscribeService:
    session = session or boto3.session.Session()
    dynamodb = session.client("dynamodb")
    ledger_events = None
    if settings.ledger_table and settings.campaigns_table:
        ledger_events = DynamoDBLedgerEvents(
            client=dynamodb, ledger_table=settings.ledger_table, campaigns_table=settings.campaigns_table
        )
    return UnsubscribeService(
        tokens=unsubscribe_tokens(session, settings.unsubscribe_key_secret, ttl_s=keys_ttl_s, clock=clock),
        suppressions=DynamoDBSuppressions(client=dynamodb, table_name=settings.suppressions_table),
        ledger_events=ledger_events,
    )


@lru_cache(maxsize=4)
def unsubscribe_service(settings: UnsubscribeSettings) -> UnsubscribeService:
    return assemble_unsubscribe(settings)


def suppression_service(table_name: str, session: boto3.session.Session | None = None) -> SuppressionService:
    """What `sendonce suppression add|remove|list|import|check` calls."""
    return SuppressionService(suppressions(table_name, session))


def unknown_outcomes(
    ledger_table: str, campaigns_table: str, session: boto3.session.Session | None = None
) -> UnknownOutcomes:
    """What `sendonce campaign unknowns` and `campaign resume --include-unknown` call."""
    session = session or boto3.session.Session()
    return UnknownOutcomes(
        ledger_events=DynamoDBLedgerEvents(
            client=session.client("dynamodb"), ledger_table=ledger_table, campaigns_table=campaigns_table
        )
    )
