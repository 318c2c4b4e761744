"""Builds the real services from validated settings. Nothing here runs at import time."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import boto3
from botocore.config import Config

from sendonce.adapters.dynamodb_campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb_ledger import DynamoDBLedger
from sendonce.adapters.dynamodb_rate_limiter import DynamoDBRateLimiter
from sendonce.adapters.dynamodb_suppressions import DynamoDBSuppressions
from sendonce.deliverability_ports import Suppressions
from sendonce.unsubscribe import UnsubscribeLinks
from sendonce.adapters.idempotency import PowertoolsDeliveryGuard, PowertoolsGroupGuard
from sendonce.adapters.resend_provider import ResendProvider
from sendonce.adapters.ses_provider import SEND_CLIENT_CONFIG, SesProvider
from sendonce.adapters.sqs_queue import SqsQueue
from sendonce.campaigns import CampaignService
from sendonce.delivery import DeliveryService
from sendonce.errors import SettingsError
from sendonce.ports import CampaignStore, EmailProvider, Ledger, Queue, RateLimiter
from sendonce.settings import ApiSettings, ConsumerSettings

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


def _resend_api_key(session: boto3.session.Session, secret_name: str) -> str:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

    provider = SecretsProvider(boto3_client=session.client("secretsmanager"))
    value = provider.get(secret_name, max_age=300)
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"secret {secret_name!r} holds no Resend API key")
    return value.strip()


def build_providers(settings: ConsumerSettings, session: boto3.session.Session) -> dict[str, EmailProvider]:
    """The provider registry: campaigns name a provider; an unregistered name is refused at creation."""
    providers: dict[str, EmailProvider] = {
        "ses": SesProvider(
            client=session.client("sesv2", config=SEND_CLIENT_CONFIG), configuration_set=settings.ses_configuration_set
        )
    }
    if settings.resend_api_key_secret:
        providers["resend"] = ResendProvider(
            api_key=_resend_api_key(session, settings.resend_api_key_secret),
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
    campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=settings.campaigns_table)
    unsubscribe = None
    if settings.unsubscribe_key_secret and settings.unsubscribe_base_url:
        from sendonce.deliverability_wiring import unsubscribe_tokens

        unsubscribe = UnsubscribeLinks(
            unsubscribe_tokens(session, settings.unsubscribe_key_secret),
            settings.unsubscribe_base_url,
            created_at_of=lambda campaign_id: campaigns.get(campaign_id).created_at,
        )
    return ConsumerParts(
        ledger=DynamoDBLedger(client=dynamodb, table_name=settings.ledger_table),
        campaigns=campaigns,
        providers=providers,
        queue=SqsQueue(client=session.client("sqs"), queue_url="", dead_letter_queue_url=settings.dead_letter_queue_url),
        limiter=limiter,
        suppressions=(
            DynamoDBSuppressions(client=dynamodb, table_name=settings.suppressions_table) if settings.suppressions_table else None
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
    return CampaignService(
        campaigns=DynamoDBCampaignStore(client=dynamodb, table_name=settings.campaigns_table),
        ledger=DynamoDBLedger(client=dynamodb, table_name=settings.ledger_table),
        queue=SqsQueue(
            client=session.client("sqs"),
            queue_url=settings.queue_url,
            dead_letter_queue_url=settings.dead_letter_queue_url,
        ),
        provider_names=PROVIDER_NAMES,
        operator=operator,
    )
