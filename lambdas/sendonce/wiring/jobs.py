"""The jobs worker: the operator service's jobs (a finished resume completes the campaign
through it), with the audit's work built from the worker's own settings (its providers'
fields are the consumer's)."""

from __future__ import annotations

from functools import lru_cache

from sendonce.domain.jobs.service import JobService
from sendonce.settings import JobsSettings
from sendonce.wiring.api import build_campaign_service
from sendonce.wiring.audit import build_auditor
from sendonce.wiring.clients import Clients, clients


def build_job_service(settings: JobsSettings, clients: Clients) -> JobService:
    service = build_campaign_service(
        settings, clients, operator="sendonce (job)", auditor=build_auditor(lambda: settings, clients)
    )
    return service.jobs


@lru_cache(maxsize=4)
def job_service(settings: JobsSettings) -> JobService:
    """Built once per Lambda execution environment for these settings."""
    return build_job_service(settings, clients())
