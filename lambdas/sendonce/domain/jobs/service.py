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
from collections.abc import Callable, Iterable, Mapping

from sendonce.domain.campaigns.ports import CampaignStore
from sendonce.domain.campaigns.unknowns import DEFAULT_UNKNOWN_WINDOW_S
from sendonce.domain.errors import CampaignNotFoundError, InvalidCampaignError
from sendonce.domain.jobs.memory import InMemoryJobStore as InMemoryJobStore  # re-exported
from sendonce.domain.jobs.models import LISTED_MOST, Job, JobKind, JobState
from sendonce.domain.jobs.pages import Page, PartedWork
from sendonce.domain.jobs.ports import JobQueue, JobStore
from sendonce.domain.jobs.work import UNAVAILABLE, PageWork
from sendonce.domain.models import DeliveryState

logger = logging.getLogger(__name__)


class JobService:
    """Starts jobs and takes their steps. Built whole: `work` runs one page of each paged kind
    this process can run (domain/jobs/work.py), `parted` does the parts of each kind done in
    parts (params["parts"] of them, params["phase"] names the phase), and `on_finished` hears
    of each job that ends done (the service whose jobs these are)."""

    def __init__(
        self,
        *,
        jobs: JobStore,
        queue: JobQueue | None,
        campaigns: CampaignStore,
        clock: Callable[[], str],
        work: Mapping[JobKind, PageWork],
        parted: Mapping[JobKind, PartedWork] | None = None,
        on_finished: Callable[[Job], None] | None = None,
    ) -> None:
        self._jobs = jobs
        self._queue = queue
        self._campaigns = campaigns
        self._clock = clock
        self._work: Mapping[JobKind, PageWork] = dict(work)
        self._parted: Mapping[JobKind, PartedWork] = dict(parted or {})
        self._on_finished = on_finished

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
        self._require(JobKind.RECONCILE, "reconcile: this service keeps no counters")
        self._campaigns.get(campaign_id)  # raises CampaignNotFoundError
        job = Job(
            job_id=job_id or f"{campaign_id}-{JobKind.RECONCILE.value}-{uuid.uuid4().hex[:12]}",
            kind=JobKind.RECONCILE,
            campaign_id=campaign_id,
            by=by,
            created_at=self._clock(),
        )
        return self._start(job)

    def start_audit(self, campaign_id: str, *, by: str, job_id: str | None = None) -> Job:
        """A job auditing the campaign against its provider's own records, read-only (it
        settles nothing: `sendonce campaign audit --settle` does, with the operator's
        credentials). Its result: the verdict counts, clean or not, and the findings' digest."""
        self._campaigns.get(campaign_id)  # raises CampaignNotFoundError
        job = Job(
            job_id=job_id or f"{campaign_id}-{JobKind.AUDIT.value}-{uuid.uuid4().hex[:12]}",
            kind=JobKind.AUDIT,
            campaign_id=campaign_id,
            by=by,
            created_at=self._clock(),
        )
        return self._start(job)

    def start_enqueue_recorded(self, campaign_id: str, *, holder: str, by: str, job_id: str) -> Job:
        """A job enqueuing, a page a step, every recorded batch of a started campaign that
        never reached the queue, renewing `holder`'s publish lease (taken by the caller) before
        each request and ending it after the last page. Idempotent by `job_id`: a firing
        repeated finds its job (and submits it again if it is still running)."""
        job = Job(
            job_id=job_id,
            kind=JobKind.ENQUEUE_RECORDED,
            campaign_id=campaign_id,
            params={"holder": holder},
            by=by,
            created_at=self._clock(),
        )
        return self._start(job)

    def start_resume_unknown(
        self,
        campaign_id: str,
        *,
        by: str,
        recipient_ids: Iterable[str] | None = None,
        older_than_s: int = DEFAULT_UNKNOWN_WINDOW_S,
        accept_possible_duplicates: bool = False,
        include_dead_lettered: bool = True,
        reason: str | None = None,
    ) -> Job:
        """A job reopening, a page at a time, every unknown delivery an audit proved not sent
        (accepting possible duplicates: every one unknown for `older_than_s`), then resuming
        the campaign. Its result names the resume's republish job."""
        self._require(JobKind.RESUME_UNKNOWN, "resume --include-unknown: this service cannot read the unknown outcomes")
        self._campaigns.get(campaign_id)  # raises CampaignNotFoundError
        job = Job(
            job_id=f"{campaign_id}-{JobKind.RESUME_UNKNOWN.value}-{uuid.uuid4().hex[:12]}",
            kind=JobKind.RESUME_UNKNOWN,
            campaign_id=campaign_id,
            params={
                "recipient_ids": None if recipient_ids is None else list(dict.fromkeys(recipient_ids)),
                "older_than_s": older_than_s,
                "accept_possible_duplicates": accept_possible_duplicates,
                "include_dead_lettered": include_dead_lettered,
                "reason": reason,
            },
            by=by,
            created_at=self._clock(),
        )
        return self._start(job)

    def _require(self, kind: JobKind, why: str) -> None:
        if kind not in self._work:
            raise InvalidCampaignError(why)

    def _page_work(self, kind: JobKind) -> PageWork:
        if kind not in self._work:
            raise InvalidCampaignError(UNAVAILABLE.get(kind, f"jobs of kind {kind.value!r} cannot be run here"))
        return self._work[kind]

    def _start(self, job: Job) -> Job:
        job = self._jobs.create(job)
        if job.done:
            return job
        if self._queue is None:
            return self.run(job.job_id)
        if job.kind in self._parted:
            self._queue.submit_parts(job.job_id, self._missing_parts(job))
        else:
            self._queue.submit(job.job_id)
        return job

    def parted_work(self, kind: JobKind) -> PartedWork:
        """The work of a kind done in parts, as this service was given it (the API starts an S3
        publish, and an S3 forecast, through it)."""
        if kind not in self._parted:
            raise InvalidCampaignError(f"jobs of kind {kind.value!r} cannot be run here")
        return self._parted[kind]

    def start_parted(self, job: Job) -> Job:
        """Start a job in parts (its kind registered in `parted`): one message a part."""
        if job.kind not in self._parted:
            raise InvalidCampaignError(f"jobs of kind {job.kind.value!r} cannot be run here")
        return self._start(job if job.created_at else job.model_copy(update={"created_at": self._clock()}))

    @staticmethod
    def _missing_parts(job: Job) -> list[int]:
        return [n for n in range(int(job.params["parts"])) if str(n) not in job.parts]

    def get(self, job_id: str) -> Job:
        return self._jobs.get(job_id)

    def kick(self, job_id: str) -> Job:
        """Submit a running job's next step again (after its messages were dead-lettered)."""
        job = self._jobs.get(job_id)
        if not job.done and self._queue is not None:
            if job.kind in self._parted:
                self._queue.submit_parts(job.job_id, self._missing_parts(job))
            else:
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
            page = self._page_work(job.kind)(job)
        except (CampaignNotFoundError, InvalidCampaignError) as exc:
            # Will not get better by trying again; anything else (throttling, a network
            # error) fails the worker's turn, and the message brings the step back.
            page, error = Page(cursor=job.cursor), str(exc)
        progress = dict(job.progress)
        for name, n in page.progress.items():
            progress[name] = progress.get(name, 0) + n
        finished = page.cursor is None or error is not None
        result = page.result(progress) if page.result is not None and error is None and page.cursor is None else None
        listed = {name: list(ids) for name, ids in job.listed.items()}
        for name, ids in page.listed.items():
            listed[name] = (listed.get(name, []) + ids)[:LISTED_MOST]
        moved = job.model_copy(
            update={
                "cursor": page.cursor,
                "steps": job.steps + 1,
                "progress": progress,
                "listed": listed,
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
            if self._on_finished is not None and moved.state is JobState.DONE:
                self._on_finished(moved)
        return moved

    def work(self, job_id: str) -> Job | None:
        """A worker's turn: one step, then the next step submitted if there is one."""
        moved = self.step(job_id)
        if moved is not None and not moved.done and self._queue is not None:
            self._queue.submit(job_id)
        return moved

    def run(self, job_id: str) -> Job:
        """Every step (or every part not yet recorded), in process, until the job is finished."""
        job = self._jobs.get(job_id)
        if job.kind in self._parted:
            while not job.done:
                for part in self._missing_parts(job):
                    self.work_part(job_id, part, submit=False)
                job = self._jobs.get(job_id)
            return job
        while (moved := self.step(job_id)) is not None and not moved.done:
            pass
        return self._jobs.get(job_id)

    # --- jobs in parts ------------------------------------------------------------------

    def work_part(self, job_id: str, part: int, *, submit: bool = True) -> Job | None:
        """A worker's turn on one part: do it, then record its outcome with a write
        conditional on the job's version, unless the part is recorded already (a message
        received twice, a worker that died after the write) or the job moved to another
        phase. The write that records the phase's last part ends the phase; after it the
        next phase's parts are submitted. Returns the job as moved, or None."""
        job = self._jobs.get(job_id)
        if job.done or str(part) in job.parts:
            return None
        phase = job.params.get("phase")
        try:
            outcome = self._parted[job.kind].part(job, part)
        except (CampaignNotFoundError, InvalidCampaignError) as exc:
            return self._fail(job_id, str(exc))
        while True:
            job = self._jobs.get(job_id)
            if job.done or job.params.get("phase") != phase or str(part) in job.parts:
                return None
            progress = dict(job.progress)
            for name, n in outcome.get("counts", {}).items():
                progress[name] = progress.get(name, 0) + n
            kept = {name: value for name, value in outcome.items() if name != "counts"}  # counts: in progress
            moved = job.model_copy(
                update={
                    "parts": {**job.parts, str(part): kept},
                    "progress": progress,
                    "steps": job.steps + 1,
                    "updated_at": self._clock(),
                    "version": job.version + 1,
                }
            )
            if len(moved.parts) == int(job.params["parts"]):
                moved = self._end_phase(moved)
            if self._jobs.advance(job, moved):
                break
        if moved.done:
            logger.info("job finished", extra={"job_id": job_id, "state": moved.state.value, **moved.progress})
            if self._on_finished is not None and moved.state is JobState.DONE:
                self._on_finished(moved)
        elif not moved.parts and submit and self._queue is not None:
            self._queue.submit_parts(job_id, self._missing_parts(moved))
        return moved

    def _end_phase(self, job: Job) -> Job:
        end = self._parted[job.kind].phase_end(job)
        if end.state is JobState.RUNNING:
            return job.model_copy(update={"params": {**job.params, **end.params}, "parts": {}})
        return job.model_copy(update={"state": end.state, "result": end.result, "error": end.error})

    def _fail(self, job_id: str, error: str) -> Job | None:
        while True:
            job = self._jobs.get(job_id)
            if job.done:
                return None
            moved = job.model_copy(
                update={
                    "state": JobState.FAILED,
                    "error": error,
                    "updated_at": self._clock(),
                    "version": job.version + 1,
                }
            )
            if self._jobs.advance(job, moved):
                return moved
