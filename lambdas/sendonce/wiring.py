"""Builds the real services from validated settings: the only place that builds clients,
reads secrets and registers providers. Nothing here runs at import time; each function's
service is built once per execution environment (`lru_cache` on the frozen settings).

Over 500 lines: a builder per function, together, so that no other module builds a client or
reads a secret (tests/unit/test_layering.py relies on that).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import boto3
from aws_lambda_powertools.utilities.parameters import SecretsProvider
from botocore.config import Config

from sendonce.adapters.aws_session import aws_session
from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.adapters.dynamodb.jobs import DynamoDBJobStore
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.ledger_events import DynamoDBLedgerEvents
from sendonce.adapters.dynamodb.ledger_keys import CampaignShards
from sendonce.adapters.dynamodb.limiter_slots import DynamoDBLimiterSlots
from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.adapters.dynamodb.recorded_test_sends import DynamoDBTestSendLog
from sendonce.adapters.dynamodb.report_aggregates import DynamoDBReportAggregates
from sendonce.adapters.dynamodb.suppressions import DynamoDBSuppressions
from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import Pace, Provider, ProviderEnv, event_readers
from sendonce.adapters.s3_objects import S3ObjectLines
from sendonce.adapters.scheduler import EventBridgeScheduler
from sendonce.adapters.sqs_queue import SqsJobQueue, SqsQueue
from sendonce.domain.audit.service import CampaignAudit
from sendonce.domain.campaigns.counters import CounterAggregator
from sendonce.domain.campaigns.ports import CampaignCounters, CampaignScheduler, CampaignStore, ReportAggregatesStore
from sendonce.domain.campaigns.preview import PreviewService, TestSendService
from sendonce.domain.campaigns.report import ReportService
from sendonce.domain.campaigns.s3_publish import S3Publish
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.unknowns import UnknownOutcomes
from sendonce.domain.deliverability.ports import Suppressions
from sendonce.domain.deliverability.provider_events import BrakeSettings, ProviderEventService, WebhookReader
from sendonce.domain.deliverability.suppressions import SuppressionService
from sendonce.domain.deliverability.unsubscribe import KeySet, UnsubscribeLinks, UnsubscribeService, UnsubscribeTokens
from sendonce.domain.errors import SettingsError
from sendonce.domain.jobs.models import JobKind
from sendonce.domain.jobs.service import JobService
from sendonce.domain.jobs.work import Audit
from sendonce.domain.sending.delivery import DeliveryService
from sendonce.domain.sending.guards import LedgerDeliveryGuard, LedgerGroupGuard
from sendonce.domain.sending.ports import EmailProvider, Ledger, Queue, RateLimiter
from sendonce.domain.sending.sending_now import CampaignProgress, SendingNow
from sendonce.settings import (
    AggregatorSettings,
    ApiSettings,
    ConsumerSettings,
    EventsSettings,
    JobsSettings,
    UnsubscribeSettings,
)

PROVIDER_NAMES = registry.names()


@dataclass(frozen=True)
class ConsumerRuntime:
    service: DeliveryService
    guard: LedgerDeliveryGuard
    group_guard: LedgerGroupGuard
    queue: Queue

    def register_lambda_context(self, context) -> None:
        self.guard.register_lambda_context(context)
        self.group_guard.register_lambda_context(context)


def build_providers(
    settings: ConsumerSettings,
    session: boto3.session.Session,
    providers: Mapping[str, Provider] | None = None,
) -> dict[str, EmailProvider]:
    """The provider registry's adapters: campaigns name a provider; an unregistered name is
    refused at creation. A provider its settings leave unconfigured is left out."""
    env = ProviderEnv(
        session=session,
        secret=lambda name, what: secret_value(session, name, what),
        timeout_seconds=settings.provider_timeout_seconds,
    )
    built: dict[str, EmailProvider] = {}
    for name, provider in (providers if providers is not None else registry.registered()).items():
        adapter = provider.build(settings.provider_settings(provider), env)
        if adapter is not None:
            built[name] = adapter
    return built


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
    counters: CampaignCounters | None = None
    scheduler: CampaignScheduler | None = None
    report_aggregates: ReportAggregatesStore | None = None


# Ledger writes are conditional, so a retried write that had in fact succeeded fails its
# condition and is read as "held" / "lease lost": safe. More attempts than botocore's
# default keep a throttled table from stranding deliveries (an SES send whose mark_sent
# fails ends unknown).
LEDGER_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 6})


def consumer_parts(
    settings: ConsumerSettings,
    session: boto3.session.Session | None = None,
    providers: Mapping[str, Provider] | None = None,
) -> ConsumerParts:
    session = session or aws_session()
    dynamodb = session.client("dynamodb", config=LEDGER_CLIENT_CONFIG)
    registered = providers if providers is not None else registry.registered()
    adapters = build_providers(settings, session, registered)
    limiter = None
    if settings.shared_rate_limit:
        paces = {
            name: registered[name].pace(settings.provider_settings(registered[name]), adapter)
            for name, adapter in adapters.items()
        }
        limiter = DynamoDBRateLimiter(
            client=dynamodb,
            table_name=settings.campaigns_table,
            rates={name: pace.rate for name, pace in paces.items()},
            reserve={name: pace.reserve for name, pace in paces.items() if pace.reserve},
            chunk=max(1, settings.send_concurrency // 2),
        )
        for name, adapter in adapters.items():
            watch = registered[name].watch_rate
            if watch is not None:
                watch(settings.provider_settings(registered[name]), adapter, limiter)
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
        providers=adapters,
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
        counters=DynamoDBCounters(client=dynamodb, table_name=settings.campaigns_table),
        scheduler=scheduler_for(settings, session),
        report_aggregates=DynamoDBReportAggregates(client=dynamodb, table_name=settings.campaigns_table),
    )


def scheduler_for(settings: ConsumerSettings | ApiSettings, session: boto3.session.Session) -> CampaignScheduler | None:
    """EventBridge Scheduler when the settings name the schedule group, role and target."""
    if settings.scheduler_group and settings.scheduler_role_arn and settings.scheduled_start_function_arn:
        return EventBridgeScheduler(
            client=session.client("scheduler"),
            group_name=settings.scheduler_group,
            target_arn=settings.scheduled_start_function_arn,
            role_arn=settings.scheduler_role_arn,
        )
    return None


def assemble_consumer(
    settings: ConsumerSettings, parts: ConsumerParts, *, window_clock_ms: Callable[[], int] | None = None
) -> ConsumerRuntime:
    """`window_clock_ms`: what time it is for send windows (a local stack's moved clock)."""
    guard = LedgerDeliveryGuard(parts.ledger)
    group_guard = LedgerGroupGuard(parts.ledger)
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
        counters=parts.counters,
        scheduler=parts.scheduler,
        window_clock_ms=window_clock_ms,
        report_aggregates=parts.report_aggregates,
    )
    return ConsumerRuntime(service=service, guard=guard, group_guard=group_guard, queue=parts.queue)


@lru_cache(maxsize=4)
def consumer_runtime(settings: ConsumerSettings) -> ConsumerRuntime:
    """The runtime for these settings, built once per Lambda execution environment."""
    return assemble_consumer(settings, consumer_parts(settings))


@lru_cache(maxsize=4)
def campaign_service(settings: ApiSettings | JobsSettings, operator: str = "operator") -> CampaignService:
    """The operator service used by the HTTP API, the CLI and the jobs worker."""
    return assemble_campaign_service(settings, operator)


def configured_rates(
    settings: ConsumerSettings | ApiSettings | JobsSettings, providers: Mapping[str, Provider] | None = None
) -> dict[str, float]:
    """Each provider's rate in requests per second as `settings` configure it (the consumer's
    fields, or the API's part of them: `Provider.rate_settings`), before any provider states its
    own: what a campaign's max_rate may not exceed. A field they do not carry: its default."""
    return {name: pace.rate for name, pace in configured_paces(settings, providers).items()}


def configured_paces(
    settings: ConsumerSettings | ApiSettings | JobsSettings, providers: Mapping[str, Provider] | None = None
) -> dict[str, Pace]:
    """Each provider's pace (rate and reserve) as `settings` configure it; see `configured_rates`."""
    paces = {}
    for name, provider in (providers if providers is not None else registry.registered()).items():
        fields = type(settings).model_fields
        given = {f: getattr(settings, f"{name}_{f}") for f in provider.settings.model_fields if f"{name}_{f}" in fields}
        paces[name] = provider.pace(provider.settings(**given), None)
    return paces


def assemble_campaign_service(
    settings: ApiSettings | JobsSettings,
    operator: str = "operator",
    session: boto3.session.Session | None = None,
    providers: Mapping[str, Provider] | None = None,
    provider_rates: Mapping[str, float] | None = None,
    unknown_outcomes: Callable[[bool], UnknownOutcomes] | None = None,
) -> CampaignService:
    """Its jobs (resume, cancel) go to the jobs queue when the settings name one, else run in
    process; either way each is recorded in the campaigns table. A campaign's max_rate is
    checked against `provider_rates`, by default those `settings` configure. An audit job
    audits with the jobs worker's settings, or (the API, the CLI) with the consumer's sending
    settings read from the environment when it runs. `unknown_outcomes` (given
    accept_possible_duplicates): what `resume --include-unknown` as a job reads and reopens
    (the CLI's); without it such a job is refused."""
    registered = providers if providers is not None else registry.registered()
    session = session or aws_session()
    dynamodb = session.client("dynamodb")
    sqs = session.client("sqs")
    campaigns, shards = campaign_store(dynamodb, settings.campaigns_table, counted=settings.counters)
    ledger = DynamoDBLedger(client=dynamodb, table_name=settings.ledger_table, shards_of=shards)
    queue = SqsQueue(client=sqs, queue_url=settings.queue_url, dead_letter_queue_url=settings.dead_letter_queue_url)
    counters = DynamoDBCounters(client=dynamodb, table_name=settings.campaigns_table)
    sending_settings = (lambda: settings) if isinstance(settings, JobsSettings) else consumer_settings_now

    def jobs_of(service: CampaignService) -> JobService:
        # The service's own work, the audit's, and S3 publish as a job in parts, each part
        # publishing through the service.
        return JobService(
            jobs=DynamoDBJobStore(client=dynamodb, table_name=settings.campaigns_table),
            queue=SqsJobQueue(client=sqs, queue_url=settings.jobs_queue_url) if settings.jobs_queue_url else None,
            campaigns=campaigns,
            clock=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            work={
                **service.job_work(unknown_outcomes=unknown_outcomes),
                JobKind.AUDIT: Audit(campaigns=campaigns, auditor=auditor_of(sending_settings)),
            },
            parted={JobKind.PUBLISH_S3: S3Publish(service=service, objects=S3ObjectLines(client=session.client("s3")))},
            on_finished=service.job_finished,
        )

    scheduler = scheduler_for(settings, session) if isinstance(settings, ApiSettings) else None
    return CampaignService(
        campaigns=campaigns,
        ledger=ledger,
        queue=queue,
        provider_names=registry.names(registered),
        batch_provider_names=registry.batch_names(registered),
        provider_rates=configured_rates(settings, registered) if provider_rates is None else provider_rates,
        operator=operator,
        counters=counters,
        jobs=jobs_of,
        scheduler=scheduler,
    )


def consumer_settings_now() -> ConsumerSettings:
    """The consumer's sending settings as this process's environment holds them now (an audit
    run by the API: the local stack's, or none, and the audit job fails saying so)."""
    return ConsumerSettings.from_env(os.environ)


def job_service(settings: JobsSettings) -> JobService:
    """The jobs worker's service: the operator service's jobs (a finished resume completes
    the campaign through it)."""
    return campaign_service(settings, operator="sendonce (job)").jobs


def campaign_reports(settings: ApiSettings) -> ReportService:
    """`sendonce campaign report`: the operator service and the report aggregates."""
    dynamodb = aws_session().client("dynamodb")
    return ReportService(
        campaigns=campaign_service(settings),
        aggregates=DynamoDBReportAggregates(client=dynamodb, table_name=settings.campaigns_table),
        clock=lambda: int(time.time() * 1000),
    )


@dataclass(frozen=True)
class OperatorSending:
    """Preview and test sends, built from the consumer's own parts (its settings: providers,
    shared send rate, suppression list, unsubscribe links), so they show and send exactly
    what the consumer would."""

    preview: PreviewService
    test_sends: TestSendService


def operator_sending(
    settings: ConsumerSettings,
    session: boto3.session.Session | None = None,
    providers: Mapping[str, Provider] | None = None,
) -> OperatorSending:
    session = session or aws_session()
    parts = consumer_parts(settings, session, providers)
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


def sending_now(
    campaigns_table: str,
    campaigns: CampaignProgress,
    *,
    paces: Mapping[str, Pace],
    session: boto3.session.Session | None = None,
    providers: Mapping[str, Provider] | None = None,
    clock: Callable[[], float] = time.time,
) -> SendingNow:
    """What `sendonce sending` and `campaign status|watch` read of the shared limiter: every
    registered provider's slot items (a provider nobody sends with has none: one empty
    Query). `paces`: the consumer's, for the rate in force (the SES account's own send
    quota, which the consumer also applies, is not read here)."""
    session = session or aws_session()
    registered = providers if providers is not None else registry.registered()
    return SendingNow(
        slots=DynamoDBLimiterSlots(client=session.client("dynamodb"), table_name=campaigns_table, paces=paces),
        campaigns=campaigns,
        batch_sizes={name: p.capabilities.max_batch for name, p in registered.items()},
        clock=clock,
    )


def recorded_test_sends(campaigns_table: str, session: boto3.session.Session | None = None) -> DynamoDBTestSendLog:
    """The record of test sends (`campaign status` reads it)."""
    session = session or aws_session()
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
    session = session or aws_session()
    return DynamoDBSuppressions(client=session.client("dynamodb"), table_name=table_name)


def assemble_events(
    settings: EventsSettings,
    session: boto3.session.Session | None = None,
    providers: Mapping[str, Provider] | None = None,
) -> ProviderEventService:
    session = session or aws_session()
    dynamodb = session.client("dynamodb")
    registered = providers if providers is not None else registry.registered()
    webhooks: dict[str, WebhookReader] = {}
    for name, provider in registered.items():
        if provider.webhook is not None:
            reader = provider.webhook(
                settings.provider_settings(provider), lambda secret, what: secret_value(session, secret, what)
            )
            if reader is not None:
                webhooks[name] = reader
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
        event_readers=event_readers(registered),
        webhooks=webhooks,
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
    session = session or aws_session()
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
    ledger_table: str,
    campaigns_table: str,
    session: boto3.session.Session | None = None,
    *,
    accept_possible_duplicates: bool = False,
) -> UnknownOutcomes:
    """What `sendonce campaign unknowns` and `campaign resume --include-unknown` call."""
    session = session or aws_session()
    return UnknownOutcomes(
        ledger_events=ledger_events_of(session.client("dynamodb"), ledger_table, campaigns_table),
        accept_possible_duplicates=accept_possible_duplicates,
    )


def ledger_events_of(dynamodb, ledger_table: str, campaigns_table: str) -> DynamoDBLedgerEvents:
    """Provider events on the ledger, with the campaigns' shard counts read from their items."""
    _, shards = campaign_store(dynamodb, campaigns_table)
    return DynamoDBLedgerEvents(
        client=dynamodb, ledger_table=ledger_table, campaigns_table=campaigns_table, shards_of=shards
    )


def campaign_store(dynamodb, table_name: str, *, counted: bool = False) -> tuple[DynamoDBCampaignStore, CampaignShards]:
    """The campaign store, and the ledger's shard counts read from it: learnt from every
    campaign the store reads, so a service that reads the campaign anyway (the consumer,
    once per message) never reads it again for its ledger keys."""
    shards = CampaignShards(lambda campaign_id: campaigns.get(campaign_id))
    campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=table_name, on_read=shards.learn, counted=counted)
    return campaigns, shards


def auditor_of(
    settings: Callable[[], ConsumerSettings | JobsSettings], session: boto3.session.Session | None = None
) -> Callable[[str], CampaignAudit]:
    """An audit job's auditor (jobs/work.py's Audit): the campaign's provider's own records,
    with that provider's settings (`settings()`, read when an audit runs)."""

    def auditor(provider: str) -> CampaignAudit:
        return campaign_audit(settings(), provider, session)

    return auditor


def campaign_audit(
    settings: ConsumerSettings | JobsSettings,
    provider: str,
    session: boto3.session.Session | None = None,
    *,
    retention_days: float | None = None,
    share: float = 0.5,
) -> CampaignAudit:
    """What `sendonce campaign audit` calls: the campaign's provider's own records (Resend's
    listing, at a lower priority than sending on the shared rate limit; SES's recorded events)."""
    from sendonce.adapters.dynamodb.event_records import LedgerEventRecords
    from sendonce.domain.audit.records import ProviderRecords

    session = session or aws_session()
    dynamodb = session.client("dynamodb", config=LEDGER_CLIENT_CONFIG)
    campaigns, shards = campaign_store(dynamodb, settings.campaigns_table)
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
        env = ProviderEnv(
            session=session,
            secret=lambda name, what: secret_value(session, name, what),
            timeout_seconds=settings.provider_timeout_seconds,
        )
        records = described.records(own, env, limiter, retention_days, share)
    else:
        records = LedgerEventRecords(
            client=dynamodb, ledger_table=settings.ledger_table, shards_of=shards, provider=provider
        )
    return CampaignAudit(
        campaigns=campaigns,
        ledger=DynamoDBLedger(client=dynamodb, table_name=settings.ledger_table, shards_of=shards),
        ledger_events=ledger_events_of(dynamodb, settings.ledger_table, settings.campaigns_table),
        records=records,
    )


def assemble_aggregator(
    settings: AggregatorSettings, session: boto3.session.Session | None = None
) -> CounterAggregator:
    """The counters' aggregator: counter items and markers in the campaigns table; it
    completes a campaign its counters say is done."""
    session = session or aws_session()
    dynamodb = session.client("dynamodb", config=LEDGER_CLIENT_CONFIG)
    campaigns, _ = campaign_store(dynamodb, settings.campaigns_table)
    return CounterAggregator(
        counters=DynamoDBCounters(client=dynamodb, table_name=settings.campaigns_table),
        campaigns=campaigns,
        clock_ms=lambda: int(time.time() * 1000),
    )


@lru_cache(maxsize=4)
def aggregator_service(settings: AggregatorSettings) -> CounterAggregator:
    """Built once per Lambda execution environment for these settings."""
    return assemble_aggregator(settings)
