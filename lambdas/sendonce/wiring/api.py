"""The operator API's services (also the CLI's and the scheduled-start function's): the
campaign service with its jobs, and the campaign report.

Built from the API's own settings only. Its jobs go to the jobs queue when the settings name
one (the jobs worker runs them with its settings, jobs.py); without one they run in process,
and an audit job runs only where the caller gave an `auditor` (built from sending settings it
holds: the CLI's, a test's); elsewhere it fails saying this process has no sending settings.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from functools import lru_cache

from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.adapters.dynamodb.jobs import DynamoDBJobStore
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.report_aggregates import DynamoDBReportAggregates
from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import Provider
from sendonce.adapters.s3_objects import S3ObjectLines
from sendonce.adapters.sqs_queue import SqsJobQueue, SqsQueue
from sendonce.domain.audit.service import CampaignAudit
from sendonce.domain.campaigns.ab_results import variant_figures_of
from sendonce.domain.campaigns.report import ReportService
from sendonce.domain.campaigns.s3_forecast import S3Forecast
from sendonce.domain.campaigns.s3_publish import S3Publish
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.unknowns import UnknownOutcomes
from sendonce.domain.deliverability.group_caps import GroupPacing
from sendonce.domain.jobs.models import JobKind
from sendonce.domain.jobs.service import JobService
from sendonce.domain.jobs.work import Audit, PageWork
from sendonce.settings import ApiSettings, JobsSettings
from sendonce.wiring.clients import Clients, clients
from sendonce.wiring.operator import build_forecast_service
from sendonce.wiring.providers import configured_paces, configured_rates
from sendonce.wiring.stores import build_campaign_store, build_scheduler


def build_campaign_service(
    settings: ApiSettings | JobsSettings,
    clients: Clients,
    *,
    operator: str = "operator",
    providers: Mapping[str, Provider] | None = None,
    provider_rates: Mapping[str, float] | None = None,
    unknown_outcomes: Callable[[bool], UnknownOutcomes] | None = None,
    auditor: Callable[[str], CampaignAudit] | None = None,
    group_pacing: Callable[[], GroupPacing] | None = None,
) -> CampaignService:
    """Its jobs (resume, cancel, ...) go to the jobs queue when the settings name one, else
    run in process; either way each is recorded in the campaigns table. A campaign's max_rate
    is checked against `provider_rates`, by default those `settings` configure. `auditor`
    (provider name -> its audit): what an audit job run here audits with; without it such a
    job fails. `unknown_outcomes` (given accept_possible_duplicates): what `resume
    --include-unknown` as a job reads and reopens (the CLI's); without it such a job is refused.
    `group_pacing`: the deployment's mailbox groups, read when a campaign names one (the CLI's
    from the consumer function); by default those `settings` carry."""
    registered = providers if providers is not None else registry.registered()
    dynamodb, sqs = clients.dynamodb, clients.sqs
    campaigns, shards = build_campaign_store(settings.campaigns_table, dynamodb, counted=settings.counters)

    def jobs_of(service: CampaignService) -> JobService:
        # The service's own work, the audit's when given, and S3 publish and forecast as jobs
        # in parts, each part publishing through the service, or counting with its forecasts.
        work: dict[JobKind, PageWork] = dict(service.job_work(unknown_outcomes=unknown_outcomes))
        if auditor is not None:
            work[JobKind.AUDIT] = Audit(campaigns=campaigns, auditor=auditor)
        objects = S3ObjectLines(client=clients.s3)
        # The limiter's rate in force from the providers' paces these settings configure
        # (the API's carry the consumer's rates; the limiter's own state says the rest).
        forecasts = build_forecast_service(
            settings.campaigns_table,
            settings.suppressions_table,
            clients,
            campaigns=service,
            paces=configured_paces(settings, registered),
            providers=registered,
            groups=settings.group_pacing.groups,
            caps=settings.group_pacing.caps,
            warm=settings.warmup_schedules,
        )
        return JobService(
            jobs=DynamoDBJobStore(client=dynamodb, table_name=settings.campaigns_table),
            queue=SqsJobQueue(client=sqs, queue_url=settings.jobs_queue_url) if settings.jobs_queue_url else None,
            campaigns=campaigns,
            clock=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            work=work,
            parted={
                JobKind.PUBLISH_S3: S3Publish(service=service, objects=objects),
                JobKind.FORECAST_S3: S3Forecast(service=service, forecasts=forecasts, objects=objects),
            },
            on_finished=service.job_finished,
        )

    return CampaignService(
        campaigns=campaigns,
        ledger=DynamoDBLedger(client=dynamodb, table_name=settings.ledger_table, shards_of=shards),
        queue=SqsQueue(client=sqs, queue_url=settings.queue_url, dead_letter_queue_url=settings.dead_letter_queue_url),
        provider_names=registry.names(registered),
        batch_provider_names=registry.batch_names(registered),
        provider_rates=configured_rates(settings, registered) if provider_rates is None else provider_rates,
        group_pacing=group_pacing or _group_pacing_of(settings),
        operator=operator,
        counters=DynamoDBCounters(client=dynamodb, table_name=settings.campaigns_table),
        jobs=jobs_of,
        scheduler=build_scheduler(settings, clients) if isinstance(settings, ApiSettings) else None,
        # An A/B test's figures per variant (its pick's, its status'): the report's aggregates.
        variant_figures=variant_figures_of(
            DynamoDBReportAggregates(client=dynamodb, table_name=settings.campaigns_table)
        ),
    )


def _group_pacing_of(settings: ApiSettings | JobsSettings) -> Callable[[], GroupPacing]:
    return lambda: settings.group_pacing


@lru_cache(maxsize=4)
def campaign_service(settings: ApiSettings, operator: str = "operator") -> CampaignService:
    """The operator service used by the HTTP API and the scheduled-start function, built once
    per execution environment for these settings and operator."""
    return build_campaign_service(settings, clients(), operator=operator)


def build_campaign_reports(settings: ApiSettings, clients: Clients) -> ReportService:
    """`sendonce campaign report`: the operator service and the report aggregates."""
    return ReportService(
        campaigns=build_campaign_service(settings, clients),
        aggregates=DynamoDBReportAggregates(client=clients.dynamodb, table_name=settings.campaigns_table),
        clock=lambda: int(time.time() * 1000),
    )


@lru_cache(maxsize=4)
def campaign_reports(settings: ApiSettings) -> ReportService:
    return build_campaign_reports(settings, clients())
