"""Builds the real services from validated settings: the only place that builds clients,
reads secrets and registers providers. Nothing here runs at import time; each function's
service is built once per execution environment (`lru_cache` on the frozen settings)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import boto3
from aws_lambda_powertools.utilities.parameters import SecretsProvider
from botocore.config import Config

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.ledger_events import DynamoDBLedgerEvents
from sendonce.adapters.dynamodb.ledger_keys import CampaignShards
from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.adapters.dynamodb.suppressions import DynamoDBSuppressions
from sendonce.adapters.dynamodb.test_sends import DynamoDBTestSendLog
from sendonce.adapters.idempotency import PowertoolsDeliveryGuard, PowertoolsGroupGuard
from sendonce.adapters.providers.resend_provider import ResendProvider
from sendonce.adapters.providers.ses_provider import SEND_CLIENT_CONFIG, SesProvider
from sendonce.adapters.scheduler import EventBridgeScheduler
from sendonce.adapters.sqs_queue import SqsQueue
from sendonce.adapters.svix_webhooks import SvixWebhookVerifier
from sendonce.domain.campaigns.preview import PreviewService, TestSendService
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.unknowns import UnknownOutcomes
from sendonce.domain.deliverability.provider_events import BrakeSettings, ProviderEventService
from sendonce.domain.deliverability.suppressions import SuppressionService
from sendonce.domain.deliverability.unsubscribe import KeySet, UnsubscribeLinks, UnsubscribeService, UnsubscribeTokens
from sendonce.domain.errors import SettingsError
from sendonce.domain.ports import CampaignStore, EmailProvider, Ledger, Queue, RateLimiter, Suppressions
from sendonce.domain.sending.delivery import DeliveryService
from sendonce.settings import ApiSettings, ConsumerSettings, EventsSettings, UnsubscribeSettings

PROVIDER_NAMES = ("ses", "resend")


@dataclass(frozen=True)
class ConsumerRuntime:
    service: DeliveryService
    guard: PowertoolsDeliveryGuard
    group_guard: PowertoolsGroupGuard
    queue: Queue

    def register_lambda_context(self, context) -> None:
        self.guard.register_lambda_context(context)
        self.group_guard.register_lambda_context(context)


def build_providers(settings: ConsumerSettings, session: boto3.session.Session) -> dict[str, EmailProvider]:
    """The provider registry: campaigns name a provider; an unregistered name is refused at creation."""
    providers: dict[str, EmailProvider] = {
        "ses": SesProvider(
            client=session.client("sesv2", config=SEND_CLIENT_CONFIG), configuration_set=settings.ses_configuration_set
        )
    }
    if settings.resend_api_key_secret:
        providers["resend"] = ResendProvider(
            api_key=secret_value(session, settings.resend_api_key_secret, "Resend API key"),
            api_url=settings.resend_api_url,
            timeout_seconds=settings.provider_timeout_seconds,
        )
    return providers


@dataclass(frozen=True)
class ConsumerParts:
    """The adapters a consumer is made of; local tooling may wrap them before assembly."""

    ledger: Ledger
    campaigns: CampaignStore
    providers: dict[str, EmailProvider]
    queue: Queue
    limiter: RateLimiter | None = None
    suppressions: Suppressions | None = None
    unsubscribe: UnsubscribeLinks | None = None


# Ledger writes are conditional, so a retried write that had in fact succeeded fails its
# condition and is read as "held" / "lease lost": safe. More attempts than botocore's
# default keep a throttled table from stranding deliveries (an SES send whose mark_sent
# fails ends unknown).
LEDGER_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 6})


def consumer_parts(settings: ConsumerSettings, session: boto3.session.Session | None = None) -> ConsumerParts:
    session = session or boto3.session.Session()
    dynamodb = session.client("dynamodb", config=LEDGER_CLIENT_CONFIG)
    providers = build_providers(settings, session)
    limiter = None
    if settings.shared_rate_limit:
        ses_rate = settings.ses_send_rate
        account_rate = providers["ses"].max_send_rate()
        if account_rate:
            ses_rate = min(ses_rate, account_rate)
        limiter = DynamoDBRateLimiter(
            client=dynamodb,
            table_name=settings.campaigns_table,
            rates={"ses": ses_rate, "resend": settings.resend_requests_per_second},
            reserve={"resend": settings.resend_rate_reserve},
            chunk=max(1, settings.send_concurrency // 2),
        )
        resend_provider = providers.get("resend")
        if settings.resend_rate_from_headers and isinstance(resend_provider, ResendProvider):
            # Every Resend answer states the team's limit: the shared rate follows it.
            resend_provider.report_rate_limits_to(limiter)
    campaigns, shards = campaign_store(dynamodb, settings.campaigns_table)
    unsubscribe = None
    if settings.unsubscribe_key_secret and settings.unsubscribe_base_url:
        unsubscribe = UnsubscribeLinks(
            unsubscribe_tokens(session, settings.unsubscribe_key_secret),
            settings.unsubscribe_base_url,
            created_at_of=lambda campaign_id: campaigns.get(campaign_id).created_at,
        )
    return ConsumerParts(
        ledger=DynamoDBLedger(client=dynamodb, table_name=settings.ledger_table, shards_of=shards),
        campaigns=campaigns,
        providers=providers,
        queue=SqsQueue(
            client=session.client("sqs"), queue_url="", dead_letter_queue_url=settings.dead_letter_queue_url
        ),
        limiter=limiter,
        suppressions=(
            DynamoDBSuppressions(client=dynamodb, table_name=settings.suppressions_table)
            if settings.suppressions_table
            else None
        ),
        unsubscribe=unsubscribe,
    )


def assemble_consumer(settings: ConsumerSettings, parts: ConsumerParts) -> ConsumerRuntime:
    guard = PowertoolsDeliveryGuard(parts.ledger)
    group_guard = PowertoolsGroupGuard(parts.ledger)
    service = DeliveryService(
        ledger=parts.ledger,
        guard=guard,
        group_guard=group_guard,
        limiter=parts.limiter,
        suppressions=parts.suppressions,
        unsubscribe=parts.unsubscribe,
        campaigns=parts.campaigns,
        providers=parts.providers,
        queue=parts.queue,
        send_concurrency=settings.send_concurrency,
        safety_margin_ms=settings.safety_margin_ms,
        throttle_retries=settings.throttle_retries,
        max_receive_count=settings.max_receive_count,
    )
    return ConsumerRuntime(service=service, guard=guard, group_guard=group_guard, queue=parts.queue)


@lru_cache(maxsize=4)
def consumer_runtime(settings: ConsumerSettings) -> ConsumerRuntime:
    """The runtime for these settings, built once per Lambda execution environment."""
    return assemble_consumer(settings, consumer_parts(settings))


@lru_cache(maxsize=4)
def campaign_service(settings: ApiSettings, operator: str = "operator") -> CampaignService:
    """The operator service used by the HTTP API and the CLI."""
    session = boto3.session.Session()
    dynamodb = session.client("dynamodb")
    campaigns, shards = campaign_store(dynamodb, settings.campaigns_table)
    scheduler = None
    if settings.scheduler_group and settings.scheduler_role_arn and settings.scheduled_start_function_arn:
        scheduler = EventBridgeScheduler(
            client=session.client("scheduler"),
            group_name=settings.scheduler_group,
            target_arn=settings.scheduled_start_function_arn,
            role_arn=settings.scheduler_role_arn,
        )
    return CampaignService(
        campaigns=campaigns,
        ledger=DynamoDBLedger(client=dynamodb, table_name=settings.ledger_table, shards_of=shards),
        queue=SqsQueue(
            client=session.client("sqs"),
            queue_url=settings.queue_url,
            dead_letter_queue_url=settings.dead_letter_queue_url,
        ),
        provider_names=PROVIDER_NAMES,
        operator=operator,
        scheduler=scheduler,
    )


@dataclass(frozen=True)
class OperatorSending:
    """Preview and test sends, built from the consumer's own parts (its settings: providers,
    shared send rate, suppression list, unsubscribe links), so they show and send exactly
    what the consumer would."""

    preview: PreviewService
    test_sends: TestSendService


def operator_sending(settings: ConsumerSettings, session: boto3.session.Session | None = None) -> OperatorSending:
    session = session or boto3.session.Session()
    parts = consumer_parts(settings, session)
    return OperatorSending(
        preview=PreviewService(campaigns=parts.campaigns, unsubscribe=parts.unsubscribe),
        test_sends=TestSendService(
            campaigns=parts.campaigns,
            providers=parts.providers,
            log=DynamoDBTestSendLog(client=session.client("dynamodb"), table_name=settings.campaigns_table),
            limiter=parts.limiter,
            suppressions=parts.suppressions,
            unsubscribe=parts.unsubscribe,
        ),
    )


@lru_cache(maxsize=4)
def operator_sending_for(settings: ConsumerSettings) -> OperatorSending:
    """Built once per Lambda execution environment for these settings (the operator API)."""
    return operator_sending(settings)


def recorded_test_sends(campaigns_table: str, session: boto3.session.Session | None = None) -> DynamoDBTestSendLog:
    """The record of test sends (`campaign status` reads it)."""
    session = session or boto3.session.Session()
    return DynamoDBTestSendLog(client=session.client("dynamodb"), table_name=campaigns_table)


# --- deliverability -------------------------------------------------------------------

# How long a function keeps the unsubscribe keys before reading the secret again
# (docs/deliverability.md, "The key").
UNSUBSCRIBE_KEYS_TTL_S = 300.0


def secret_value(session: boto3.session.Session, secret_name: str, what: str, *, fresh: bool = False) -> str:
    """The one secret reader: Powertools' SecretsProvider (cached 300 s), refusing an empty secret."""
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
            verifier = SvixWebhookVerifier(
                secret=secret_value(session, settings.resend_webhook_secret, "webhook secret")
            )
        except ValueError as exc:
            raise SettingsError(f"secret {settings.resend_webhook_secret!r}: {exc}") from exc
    campaigns, shards = campaign_store(dynamodb, settings.campaigns_table)
    return ProviderEventService(
        ledger_events=DynamoDBLedgerEvents(
            client=dynamodb,
            ledger_table=settings.ledger_table,
            campaigns_table=settings.campaigns_table,
            shards_of=shards,
        ),
        suppressions=DynamoDBSuppressions(client=dynamodb, table_name=settings.suppressions_table),
        campaigns=campaigns,
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
        ledger_events = ledger_events_of(dynamodb, settings.ledger_table, settings.campaigns_table)
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
    return UnknownOutcomes(ledger_events=ledger_events_of(session.client("dynamodb"), ledger_table, campaigns_table))


def ledger_events_of(dynamodb, ledger_table: str, campaigns_table: str) -> DynamoDBLedgerEvents:
    """Provider events on the ledger, with the campaigns' shard counts read from their items."""
    _, shards = campaign_store(dynamodb, campaigns_table)
    return DynamoDBLedgerEvents(
        client=dynamodb, ledger_table=ledger_table, campaigns_table=campaigns_table, shards_of=shards
    )


def campaign_store(dynamodb, table_name: str) -> tuple[DynamoDBCampaignStore, CampaignShards]:
    """The campaign store, and the ledger's shard counts read from it: learnt from every
    campaign the store reads, so a service that reads the campaign anyway (the consumer,
    once per message) never reads it again for its ledger keys."""
    shards = CampaignShards(lambda campaign_id: campaigns.get(campaign_id))
    campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=table_name, on_read=shards.learn)
    return campaigns, shards
