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
from typing import Any

from sendonce.domain.audit.service import AuditOutsideRetentionError, CampaignAudit
from sendonce.domain.campaigns.batches import bodies_for
from sendonce.domain.campaigns.status import reconciliation_of
from sendonce.domain.campaigns.unknowns import DEFAULT_UNKNOWN_WINDOW_S, UnknownOutcomes
from sendonce.domain.errors import CampaignNotFoundError, InvalidCampaignError, SettingsError
from sendonce.domain.jobs.memory import InMemoryJobStore as InMemoryJobStore  # re-exported
from sendonce.domain.jobs.models import LISTED_MOST, Job, JobKind, JobState
from sendonce.domain.jobs.pages import Page, PartedWork
from sendonce.domain.models import DeliveryState, Recipient
from sendonce.domain.ports import CampaignCounters, CampaignStore, JobQueue, JobStore, Ledger, Queue

logger = logging.getLogger(__name__)

PAGE_BATCHES = 25  # batch records per step: at most 2,500 recipients, 25 ledger BatchGetItems
PAGE_RECORDS = 1_000  # ledger records per reconcile step: one Query (at most 1 MB)
# Batch records an enqueue_recorded step reads (at most 10,000 recipients: one BatchGetItem
# of their markers, ten SendMessageBatch requests each after a lease renewal).
PAGE_RECORDED_BATCHES = 100
PAGE_UNKNOWNS = 500  # unknown deliveries a resume_unknown step reopens (a conditional write each)
# A reconcile job's progress: records read, and one count per ledger state ("ledger_sent", ...).
LEDGER_PREFIX = "ledger_"


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
            JobKind.AUDIT: self._audit_page,
            JobKind.RESUME_UNKNOWN: self._resume_unknown_page,
            JobKind.ENQUEUE_RECORDED: self._enqueue_recorded_page,
        }
        # A page of a started campaign's recorded batches onto the queue, under the lease of
        # `holder` (set by the campaign service, which holds the leases): (campaign_id, holder,
        # cursor, limit) -> (batches enqueued, next cursor, why it stopped early or None).
        self.enqueue_recorded: Callable[[str, str, str | None, int], tuple[int, str | None, str | None]] | None = None
        # `resume --include-unknown`'s parts, set by whoever has them: the unknown outcomes
        # (given accept_possible_duplicates), and what resumes the campaign once every
        # eligible unknown is reopened (the campaign service: its result is the job's).
        self.unknown_outcomes: Callable[[bool], UnknownOutcomes] | None = None
        self.after_reopening: Callable[[Job, dict[str, int]], dict[str, Any]] | None = None
        # The audit of a campaign of a given provider (set by the wiring from the sending
        # settings; None: this process cannot audit, and an audit job fails saying so).
        self.auditor: Callable[[str], CampaignAudit] | None = None
        # Kinds done in parts (params["parts"] of them, params["phase"] names the phase),
        # registered by whoever can do them (wiring: S3 publish).
        self.parted: dict[JobKind, PartedWork] = {}

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
        if self.unknown_outcomes is None or self.after_reopening is None:
            raise InvalidCampaignError("resume --include-unknown: this service cannot read the unknown outcomes")
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

    def _start(self, job: Job) -> Job:
        job = self._jobs.create(job)
        if job.done:
            return job
        if self._queue is None:
            return self.run(job.job_id)
        if job.kind in self.parted:
            self._queue.submit_parts(job.job_id, self._missing_parts(job))
        else:
            self._queue.submit(job.job_id)
        return job

    def start_parted(self, job: Job) -> Job:
        """Start a job in parts (its kind registered in `parted`): one message a part."""
        if job.kind not in self.parted:
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
            if job.kind in self.parted:
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
        """Every step (or every part not yet recorded), in process, until the job is finished."""
        job = self._jobs.get(job_id)
        if job.kind in self.parted:
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
            outcome = self.parted[job.kind].part(job, part)
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
            if self.on_finished is not None and moved.state is JobState.DONE:
                self.on_finished(moved)
        elif not moved.parts and submit and self._queue is not None:
            self._queue.submit_parts(job_id, self._missing_parts(moved))
        return moved

    def _end_phase(self, job: Job) -> Job:
        end = self.parted[job.kind].phase_end(job)
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
            self._campaign_queue.publish(campaign_id, bodies)
        return Page(
            cursor=cursor,
            progress={
                "batches_read": len(batches),
                "recipients_read": len(recipients),
                "republished": len(remaining),
                "messages": len(bodies),
            },
        )

    def _enqueue_recorded_page(self, job: Job) -> Page:
        if self.enqueue_recorded is None:
            raise InvalidCampaignError("enqueue_recorded: this process holds no publish leases")
        enqueued, cursor, stopped = self.enqueue_recorded(
            job.campaign_id, job.params["holder"], job.cursor, PAGE_RECORDED_BATCHES
        )
        if stopped is not None:
            return Page(cursor=None, progress={"enqueued": enqueued}, result=lambda _p: {"stopped": stopped})
        return Page(
            cursor=cursor,
            progress={"enqueued": enqueued, "pages": 1},
            result=(lambda progress: {"enqueued": progress.get("enqueued", 0)}) if cursor is None else None,
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

    def _audit_page(self, job: Job) -> Page:
        campaign = self._campaigns.get(job.campaign_id)
        if self.auditor is None:
            raise InvalidCampaignError("audit: this process has no sending settings to read the provider's records")
        try:
            audited = self.auditor(campaign.provider).run(job.campaign_id, settle=False)
        except (AuditOutsideRetentionError, SettingsError) as exc:
            raise InvalidCampaignError(f"audit: {exc}") from exc
        artefact = audited.artefact()
        findings, run = artefact["findings"], artefact["run"]
        summary = {
            "clean": findings["clean"],
            "digest": artefact["digest"],
            "provider": findings["provider"],
            "listing_complete": findings["listing_complete"],
            "proves_absence": findings["proves_absence"],
            "counts": findings["counts"],
            # Bounded: the full artefact is the CLI's (`campaign audit --out FILE`).
            "duplicates": [d["recipient_id"] for d in findings["duplicates"]][:100],
            "must_run_before": run["must_run_before"],
            "provider_requests": run["provider_requests"],
        }
        return Page(
            cursor=None,
            progress={"recipients_judged": sum(findings["counts"].values()), "listed_emails": run["listed_emails"]},
            result=lambda _progress: summary,
        )

    def _resume_unknown_page(self, job: Job) -> Page:
        if self.unknown_outcomes is None or self.after_reopening is None:
            raise InvalidCampaignError("resume --include-unknown: this process cannot read the unknown outcomes")
        params = job.params
        outcomes = self.unknown_outcomes(bool(params["accept_possible_duplicates"]))
        report, cursor = outcomes.reopen_page(
            job.campaign_id,
            job.cursor,
            PAGE_UNKNOWNS,
            recipient_ids=params["recipient_ids"],
            older_than_s=int(params["older_than_s"]),
            by=job.by or "operator",
        )
        listed = {"reopened": report.reopened, "confirmed_sent": report.confirmed_sent}
        counts = {"reopened": len(report.reopened), "confirmed_sent": len(report.confirmed_sent)}
        if cursor is not None:
            return Page(cursor=cursor, progress=counts, listed=listed)
        after = self.after_reopening

        def result(progress: dict[str, int]) -> dict[str, Any]:
            # Resuming is safe to repeat (a resume republishes; the ledger sends each once).
            return after(job, progress)

        named = params["recipient_ids"]
        if named is not None:
            done = set(job.listed.get("reopened", [])) | set(report.reopened) | set(report.confirmed_sent)
            done |= set(job.listed.get("confirmed_sent", []))
            listed["not_reopened"] = [r for r in named if r not in done]
            counts["not_reopened"] = len(listed["not_reopened"])
        return Page(cursor=None, progress=counts, listed=listed, result=result)

    def _reconciled(self, campaign_id: str) -> Callable[[dict[str, int]], dict[str, Any]]:
        def result(progress: dict[str, int]) -> dict[str, Any]:
            recorded = {
                name.removeprefix(LEDGER_PREFIX): n for name, n in progress.items() if name.startswith(LEDGER_PREFIX)
            }
            # Read after the ledger: at rest, both say the same.
            totals = self._counters.totals(campaign_id) if self._counters is not None else None
            return reconciliation_of(campaign_id, totals, recorded).as_dict()

        return result
