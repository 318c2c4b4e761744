"""Jobs: O(recipients) work on a campaign, in pages, resumable and idempotent.

A job is an item (JobStore) and a message naming it (JobQueue). A worker takes the message
and makes one step: it reads the job, does one page of work from the job's cursor, then
moves the job on with a write conditional on the version it read, and only then submits the
next step. So:

- a worker that dies after its page but before the write leaves the job where it was: the
  message comes back and the same page is done again (every kind of page is safe to
  repeat: a republished recipient is sent once whatever happens, the ledger decides);
- one that dies after the write but before submitting the next step: the message comes
  back and the next page is done (the job's cursor, not the message, says where);
- two workers on the same step (a message received twice): one write wins; the other
  finds the version moved and stops, so one chain of steps goes on.

Without a queue (tests, the CLI against a small local campaign) `start` runs every step in
process, through the same `step`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sendonce.domain.campaigns.batches import bodies_for
from sendonce.domain.campaigns.status import reconciliation_of
from sendonce.domain.errors import CampaignNotFoundError, InvalidCampaignError, JobNotFoundError
from sendonce.domain.jobs.models import Job, JobKind, JobState
from sendonce.domain.models import DeliveryState, Recipient
from sendonce.domain.ports import CampaignCounters, CampaignStore, JobQueue, JobStore, Ledger, Queue

logger = logging.getLogger(__name__)

PAGE_BATCHES = 25  # batch records per step: at most 2,500 recipients, 25 ledger BatchGetItems
PAGE_RECORDS = 1_000  # ledger records per reconcile step: one Query (at most 1 MB)
# A reconcile job's progress: records read, and one count per ledger state ("ledger_sent", ...).
LEDGER_PREFIX = "ledger_"


@dataclass(frozen=True)
class Page:
    """What one step did: where the next starts (None: the job is finished) and its counts."""

    cursor: str | None
    progress: dict[str, int] = field(default_factory=dict)
    # The last page's (cursor None): what the job found, from its whole progress.
    result: Callable[[dict[str, int]], dict[str, Any]] | None = None


class JobService:
    def __init__(
        self,
        *,
        jobs: JobStore,
        queue: JobQueue | None,
        campaigns: CampaignStore,
        ledger: Ledger,
        campaign_queue: Queue,
        clock: Callable[[], str],
        on_finished: Callable[[Job], None] | None = None,
        page_batches: int = PAGE_BATCHES,
        counters: CampaignCounters | None = None,
        page_records: int = PAGE_RECORDS,
    ) -> None:
        self._jobs = jobs
        self._queue = queue
        self._campaigns = campaigns
        self._ledger = ledger
        self._campaign_queue = campaign_queue
        self._clock = clock
        self.on_finished = on_finished  # set once by the service whose jobs these are
        self._page_batches = page_batches
        self._counters = counters
        self._page_records = page_records
        self._pages: dict[JobKind, Callable[[Job], Page]] = {
            JobKind.REPUBLISH: self._republish_page,
            JobKind.RECONCILE: self._reconcile_page,
        }

    # --- starting and reading -----------------------------------------------------------

    def start_republish(
        self,
        campaign_id: str,
        states: Iterable[DeliveryState],
        *,
        prefix: str,
        by: str,
        reason: str | None = None,
        job_id: str | None = None,
    ) -> Job:
        """A job publishing once more every published recipient whose delivery is in
        `states` (never claimed counts as pending). `job_id` makes starting idempotent:
        a job that exists is returned (and submitted again), not started twice."""
        job = Job(
            job_id=job_id or f"{campaign_id}-{JobKind.REPUBLISH.value}-{uuid.uuid4().hex[:12]}",
            kind=JobKind.REPUBLISH,
            campaign_id=campaign_id,
            params={"states": sorted(s.value for s in states), "prefix": prefix, "reason": reason},
            by=by,
            created_at=self._clock(),
        )
        return self._start(job)

    def start_reconcile(self, campaign_id: str, *, by: str, job_id: str | None = None) -> Job:
        """A job counting the campaign's ledger records by state, a page of one shard a
        step, then comparing the counts with the counters (its result: the drifts)."""
        if self._counters is None:
            raise InvalidCampaignError("reconcile: this service keeps no counters")
        self._campaigns.get(campaign_id)  # raises CampaignNotFoundError
        job = Job(
            job_id=job_id or f"{campaign_id}-{JobKind.RECONCILE.value}-{uuid.uuid4().hex[:12]}",
            kind=JobKind.RECONCILE,
            campaign_id=campaign_id,
            by=by,
            created_at=self._clock(),
        )
        return self._start(job)

    def _start(self, job: Job) -> Job:
        job = self._jobs.create(job)
        if job.done:
            return job
        if self._queue is None:
            return self.run(job.job_id)
        self._queue.submit(job.job_id)
        return job

    def get(self, job_id: str) -> Job:
        return self._jobs.get(job_id)

    def kick(self, job_id: str) -> Job:
        """Submit a running job's next step again (after its messages were dead-lettered)."""
        job = self._jobs.get(job_id)
        if not job.done and self._queue is not None:
            self._queue.submit(job.job_id)
        return job

    # --- stepping -----------------------------------------------------------------------

    def step(self, job_id: str) -> Job | None:
        """One page of the job; the job as moved on, or None when there was nothing to do
        (finished, or another worker moved it first)."""
        job = self._jobs.get(job_id)
        if job.done:
            return None
        error: str | None = None
        try:
            page = self._pages[job.kind](job)
        except (CampaignNotFoundError, InvalidCampaignError) as exc:
            # Will not get better by trying again; anything else (throttling, a network
            # error) fails the worker's turn, and the message brings the step back.
            page, error = Page(cursor=job.cursor), str(exc)
        progress = dict(job.progress)
        for name, n in page.progress.items():
            progress[name] = progress.get(name, 0) + n
        finished = page.cursor is None or error is not None
        result = page.result(progress) if page.result is not None and error is None and page.cursor is None else None
        moved = job.model_copy(
            update={
                "cursor": page.cursor,
                "steps": job.steps + 1,
                "progress": progress,
                "state": (JobState.FAILED if error else JobState.DONE) if finished else JobState.RUNNING,
                "error": error,
                "result": result,
                "updated_at": self._clock(),
                "version": job.version + 1,
            }
        )
        if not self._jobs.advance(job, moved):
            return None
        if moved.done:
            logger.info("job finished", extra={"job_id": job.job_id, "state": moved.state.value, **progress})
            if self.on_finished is not None and moved.state is JobState.DONE:
                self.on_finished(moved)
        return moved

    def work(self, job_id: str) -> Job | None:
        """A worker's turn: one step, then the next step submitted if there is one."""
        moved = self.step(job_id)
        if moved is not None and not moved.done and self._queue is not None:
            self._queue.submit(job_id)
        return moved

    def run(self, job_id: str) -> Job:
        """Every step, in process, until the job is finished."""
        while (moved := self.step(job_id)) is not None and not moved.done:
            pass
        return self._jobs.get(job_id)

    # --- the kinds of page --------------------------------------------------------------

    def _republish_page(self, job: Job) -> Page:
        campaign_id = job.campaign_id
        batches, cursor = self._campaigns.batches_page(campaign_id, job.cursor, self._page_batches)
        states = {DeliveryState(s) for s in job.params["states"]}
        recipients: dict[str, Recipient] = {}
        for batch in batches:
            for recipient in batch.recipients:
                recipients.setdefault(recipient.recipient_id, recipient)
        records = self._ledger.get_many(campaign_id, list(recipients))
        remaining = [
            recipient
            for rid, recipient in recipients.items()
            if (records[rid].state if rid in records else DeliveryState.PENDING) in states
        ]
        bodies = bodies_for(campaign_id, remaining, prefix=job.params["prefix"])
        if bodies:
            self._campaign_queue.publish(bodies)
        return Page(
            cursor=cursor,
            progress={
                "batches_read": len(batches),
                "recipients_read": len(recipients),
                "republished": len(remaining),
                "messages": len(bodies),
            },
        )

    def _reconcile_page(self, job: Job) -> Page:
        # Each record is counted once: the counts go into the job with the same write that
        # moves its cursor past them (a page read twice is counted by one write only).
        records, cursor = self._ledger.records_page(job.campaign_id, job.cursor, self._page_records)
        progress: dict[str, int] = {"records_read": len(records)}
        for record in records:
            name = LEDGER_PREFIX + record.state.value
            progress[name] = progress.get(name, 0) + 1
        return Page(
            cursor=cursor, progress=progress, result=self._reconciled(job.campaign_id) if cursor is None else None
        )

    def _reconciled(self, campaign_id: str) -> Callable[[dict[str, int]], dict[str, Any]]:
        def result(progress: dict[str, int]) -> dict[str, Any]:
            recorded = {
                name.removeprefix(LEDGER_PREFIX): n for name, n in progress.items() if name.startswith(LEDGER_PREFIX)
            }
            # Read after the ledger: at rest, both say the same.
            totals = self._counters.totals(campaign_id) if self._counters is not None else None
            return reconciliation_of(campaign_id, totals, recorded).as_dict()

        return result


class InMemoryJobStore:
    """Jobs kept in process, for a service that runs its jobs there (no jobs queue): the job
    still goes a page a step, but nothing outlives the call."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}

    def create(self, job: Job) -> Job:
        return self.jobs.setdefault(job.job_id, job)

    def get(self, job_id: str) -> Job:
        if job_id not in self.jobs:
            raise JobNotFoundError(f"job {job_id!r} does not exist")
        return self.jobs[job_id]

    def advance(self, old: Job, new: Job) -> bool:
        if self.jobs[old.job_id].version != old.version:
            return False
        self.jobs[old.job_id] = new
        return True
