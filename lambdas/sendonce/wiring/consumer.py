"""The consumer: its parts (the adapters it is made of, which local tooling and the chaos
tests may wrap), the runtime built from them, and that runtime once per execution environment."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.adapters.dynamodb.group_caps import DynamoDBGroupCaps
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.adapters.dynamodb.report_aggregates import DynamoDBReportAggregates
from sendonce.adapters.dynamodb.warmup import DynamoDBWarmupBudget
from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import Provider
from sendonce.adapters.sqs_queue import SqsQueue
from sendonce.domain.campaigns.ports import CampaignCounters, CampaignScheduler, CampaignStore, ReportAggregatesStore
from sendonce.domain.deliverability.ports import GroupCaps, Suppressions, WarmupBudget
from sendonce.domain.deliverability.unsubscribe import UnsubscribeLinks
from sendonce.domain.sending.delivery import DeliveryService
from sendonce.domain.sending.guards import LedgerDeliveryGuard, LedgerGroupGuard
from sendonce.domain.sending.ports import EmailProvider, Ledger, Queue, RateLimiter
from sendonce.settings import ConsumerSettings
from sendonce.wiring.clients import Clients, clients
from sendonce.wiring.providers import build_providers
from sendonce.wiring.secrets import build_unsubscribe_tokens
from sendonce.wiring.stores import build_campaign_store, build_scheduler, build_suppressions


@dataclass(frozen=True)
class ConsumerParts:
    """The adapters a consumer is made of; local tooling may wrap them before the runtime is built."""

    ledger: Ledger
    campaigns: CampaignStore
    providers: dict[str, EmailProvider]
    queue: Queue
    limiter: RateLimiter | None = None
    group_caps: GroupCaps | None = None
    warmup_budget: WarmupBudget | None = None
    suppressions: Suppressions | None = None
    unsubscribe: UnsubscribeLinks | None = None
    counters: CampaignCounters | None = None
    scheduler: CampaignScheduler | None = None
    report_aggregates: ReportAggregatesStore | None = None


@dataclass(frozen=True)
class ConsumerRuntime:
    service: DeliveryService
    guard: LedgerDeliveryGuard
    group_guard: LedgerGroupGuard
    queue: Queue

    def register_lambda_context(self, context) -> None:
        self.guard.register_lambda_context(context)
        self.group_guard.register_lambda_context(context)


def build_consumer_parts(
    settings: ConsumerSettings, clients: Clients, *, providers: Mapping[str, Provider] | None = None
) -> ConsumerParts:
    dynamodb = clients.patient_dynamodb
    registered = providers if providers is not None else registry.registered()
    adapters = build_providers(settings, clients, providers=registered)
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
    group_caps = None
    if settings.shared_rate_limit:
        # Asked only for a request to a capped group (the deployment's caps or a campaign's).
        group_caps = DynamoDBGroupCaps(
            client=dynamodb, table_name=settings.campaigns_table, chunk=max(1, settings.send_concurrency // 2)
        )
    campaigns, shards = build_campaign_store(settings.campaigns_table, dynamodb)
    unsubscribe = None
    if settings.unsubscribe_key_secret and settings.unsubscribe_base_url:
        unsubscribe = UnsubscribeLinks(
            build_unsubscribe_tokens(settings.unsubscribe_key_secret, clients),
            settings.unsubscribe_base_url,
            created_at_of=lambda campaign_id: campaigns.get(campaign_id).created_at,
        )
    return ConsumerParts(
        ledger=DynamoDBLedger(
            client=dynamodb,
            table_name=settings.ledger_table,
            shards_of=shards,
            mailbox_groups=settings.group_pacing.groups,
        ),
        campaigns=campaigns,
        providers=adapters,
        queue=SqsQueue(client=clients.sqs, queue_url="", dead_letter_queue_url=settings.dead_letter_queue_url),
        limiter=limiter,
        group_caps=group_caps,
        # Counted only for a campaign whose sending domain is warming up.
        warmup_budget=DynamoDBWarmupBudget(client=dynamodb, table_name=settings.campaigns_table),
        suppressions=build_suppressions(settings.suppressions_table, dynamodb) if settings.suppressions_table else None,
        unsubscribe=unsubscribe,
        counters=DynamoDBCounters(client=dynamodb, table_name=settings.campaigns_table),
        scheduler=build_scheduler(settings, clients),
        report_aggregates=DynamoDBReportAggregates(client=dynamodb, table_name=settings.campaigns_table),
    )


def build_consumer_runtime(
    settings: ConsumerSettings, parts: ConsumerParts, *, window_clock_ms: Callable[[], int] | None = None
) -> ConsumerRuntime:
    """The consumer from its `parts`. `window_clock_ms`: what time it is for send windows (a
    local stack's moved clock)."""
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
        feedback_id=settings.feedback_id,
        group_caps=parts.group_caps,
        pacing=settings.group_pacing,
        warmup=settings.warmup_schedules,
        warmup_budget=parts.warmup_budget,
    )
    return ConsumerRuntime(service=service, guard=guard, group_guard=group_guard, queue=parts.queue)


@lru_cache(maxsize=4)
def consumer_runtime(settings: ConsumerSettings) -> ConsumerRuntime:
    """The runtime for these settings, built once per Lambda execution environment."""
    return build_consumer_runtime(settings, build_consumer_parts(settings, clients()))
