"""Operator-facing domain: create, publish, pause, resume, cancel, delivery status.

The CLI and the HTTP API both call this service; neither holds any logic of its own.
Checkpoints come from the ledger, never from a cursor: resume re-reads which recipients
have not ended and publishes exactly those.

CampaignService is one facade over the operations it serves, each a module of its own:
publishing.py (create, publish), control.py (pause, cancel, resume), reads.py (status,
deliveries, dead letters, reconcile), scheduling.py (scheduled sends) and window_pauses.py
(send windows' openings). This module builds it and its jobs.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping

from sendonce.domain.campaigns.batches import batch_id_for
from sendonce.domain.campaigns.control import OperatorControl
from sendonce.domain.campaigns.picks import PICK_PREFIX, FiguresOf, VariantPicks
from sendonce.domain.campaigns.ports import CampaignCounters, CampaignScheduler, CampaignStore
from sendonce.domain.campaigns.publishing import Publishing, PublishReport
from sendonce.domain.campaigns.reads import (
    CampaignReads,
    DeadLetter,
    DeadLetterGroup,
    DeadLetterMessage,
    DeadLetterSummary,
)
from sendonce.domain.campaigns.scheduling import ScheduledSends
from sendonce.domain.campaigns.status import DeliveryStatus
from sendonce.domain.campaigns.unknowns import UnknownOutcomes
from sendonce.domain.campaigns.window_pauses import WindowOpenings
from sendonce.domain.deliverability.group_caps import GroupPacing
from sendonce.domain.jobs.models import Job, JobKind
from sendonce.domain.jobs.service import InMemoryJobStore, JobService
from sendonce.domain.jobs.work import EnqueueRecorded, PageWork, Reconcile, Republish, ResumeUnknown
from sendonce.domain.sending.ports import DeliveryReads, Queue

# Re-exported: what callers import from here.
__all__ = [
    "CampaignService",
    "DeadLetter",
    "DeadLetterGroup",
    "DeadLetterMessage",
    "DeadLetterSummary",
    "DeliveryStatus",
    "JobsOf",
    "PublishReport",
    "batch_id_for",
]


def _system_clock() -> int:
    return int(time.time() * 1000)


def _iso_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


# The jobs of a campaign service, built from it (wiring: its job store and queue, and the
# work of each kind, some of it the service's own).
JobsOf = Callable[["CampaignService"], JobService]


class CampaignService(Publishing, OperatorControl, CampaignReads, ScheduledSends, WindowOpenings, VariantPicks):
    def __init__(
        self,
        *,
        campaigns: CampaignStore,
        ledger: DeliveryReads,
        queue: Queue,
        provider_names: Iterable[str],
        batch_provider_names: Iterable[str] | None = None,
        provider_rates: Mapping[str, float] | None = None,
        group_pacing: Callable[[], GroupPacing] | None = None,
        operator: str = "operator",
        clock_ms: Callable[[], int] = _system_clock,
        jobs: JobsOf | None = None,
        counters: CampaignCounters | None = None,
        scheduler: CampaignScheduler | None = None,
        variant_figures: FiguresOf | None = None,
    ):
        self._clock_ms = clock_ms
        # An A/B test's figures per variant, read by its pick (None: none kept; it picks the control).
        self._variant_figures = variant_figures
        self._counters = counters
        self._scheduler = scheduler
        self._campaigns = campaigns
        self._ledger = ledger
        self._queue = queue
        self._provider_names = frozenset(provider_names)
        # None: every provider named may send batches (the wiring passes the registry's answer).
        self._batch_provider_names = frozenset(
            self._provider_names if batch_provider_names is None else batch_provider_names
        )
        # Each provider's configured rate (requests/s), read only for a campaign with a max_rate
        # (the CLI's reads the deployment's when first asked). None or a provider not in it: unchecked.
        self._provider_rates: Mapping[str, float] = {} if provider_rates is None else provider_rates
        # The deployment's mailbox groups and caps, read when a campaign names a group (the
        # CLI reads them from the deployed consumer): a campaign's own caps name its groups.
        self._group_pacing = group_pacing or GroupPacing
        self._operator = operator
        # Resume and cancel republish as a job: in the deployed stack on the jobs queue (the
        # API answers at once); without one, run here a page at a time. Built last: its work
        # is this service's.
        self._jobs = jobs(self) if jobs is not None else self._in_process_jobs()

    def _in_process_jobs(self) -> JobService:
        return JobService(
            jobs=InMemoryJobStore(),
            queue=None,
            campaigns=self._campaigns,
            clock=_iso_now,
            work=self.job_work(),
            on_finished=self.job_finished,
        )

    def job_work(self, *, unknown_outcomes: Callable[[bool], UnknownOutcomes] | None = None) -> dict[JobKind, PageWork]:
        """The work of the paged jobs this service starts (domain/jobs/work.py): republish,
        reconcile (with counters), enqueue_recorded (under this service's publish leases) and,
        given `unknown_outcomes` (given accept_possible_duplicates), resume_unknown, whose end
        resumes the campaign here."""
        work: dict[JobKind, PageWork] = {
            JobKind.REPUBLISH: Republish(campaigns=self._campaigns, ledger=self._ledger, queue=self._queue),
            JobKind.ENQUEUE_RECORDED: EnqueueRecorded(self._enqueue_recorded_page),
        }
        if self._counters is not None:
            work[JobKind.RECONCILE] = Reconcile(ledger=self._ledger, counters=self._counters)
        if unknown_outcomes is not None:
            work[JobKind.RESUME_UNKNOWN] = ResumeUnknown(
                unknown_outcomes=unknown_outcomes, after_reopening=self._resume_after_reopening
            )
        return work

    @property
    def jobs(self) -> JobService:
        return self._jobs

    def job_finished(self, job: Job) -> None:
        """A republish job has read the whole campaign: if every recipient has ended (nothing
        was left to republish, or consumers finished before the job), complete it now. A
        start's job ends its lease first (scheduling.py)."""
        if job.kind is JobKind.REPUBLISH and job.params.get("prefix") in ("r", PICK_PREFIX):
            self.complete_if_done(job.campaign_id)
        elif job.kind is JobKind.ENQUEUE_RECORDED:
            self.enqueue_recorded_finished(job)

    def acting_as(self, operator: str) -> CampaignService:
        """The same service recording `operator` as who changes campaign state (per API caller)."""
        return CampaignService(
            campaigns=self._campaigns,
            ledger=self._ledger,
            queue=self._queue,
            provider_names=self._provider_names,
            batch_provider_names=self._batch_provider_names,
            provider_rates=self._provider_rates,
            operator=operator,
            clock_ms=self._clock_ms,
            jobs=lambda _service: self._jobs,  # the same jobs: theirs are this service's
            counters=self._counters,
            scheduler=self._scheduler,
            variant_figures=self._variant_figures,
        )
