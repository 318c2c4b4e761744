"""The work of each paged kind of job: one page of it (domain/jobs/service.py takes the rest).

Each is a function `(job) -> Page` built with what it reads and writes; the jobs service is
given a mapping from kind to that function when it is built (wiring), and a kind missing from
it is one this process cannot run (`UNAVAILABLE` says why).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sendonce.domain.audit.service import AuditOutsideRetentionError, CampaignAudit
from sendonce.domain.campaigns.batches import bodies_for
from sendonce.domain.campaigns.ports import CampaignCounters, CampaignStore
from sendonce.domain.campaigns.status import reconciliation_of
from sendonce.domain.campaigns.unknowns import UnknownOutcomes
from sendonce.domain.errors import InvalidCampaignError, SettingsError
from sendonce.domain.jobs.models import Job, JobKind
from sendonce.domain.jobs.pages import Page
from sendonce.domain.models import DeliveryState, Recipient
from sendonce.domain.sending.ports import DeliveryReads, Queue

PageWork = Callable[[Job], Page]

PAGE_BATCHES = 25  # batch records per step: at most 2,500 recipients, 25 ledger BatchGetItems
PAGE_RECORDS = 1_000  # ledger records per reconcile step: one Query (at most 1 MB)
# Batch records an enqueue_recorded step reads (at most 10,000 recipients: one BatchGetItem
# of their markers, ten SendMessageBatch requests each after a lease renewal).
PAGE_RECORDED_BATCHES = 100
PAGE_UNKNOWNS = 500  # unknown deliveries a resume_unknown step reopens (a conditional write each)
# A reconcile job's progress: records read, and one count per ledger state ("ledger_sent", ...).
LEDGER_PREFIX = "ledger_"

# Why a process given no work of a kind cannot run (or start) a job of that kind.
UNAVAILABLE = {
    JobKind.RECONCILE: "reconcile: this service keeps no counters",
    JobKind.AUDIT: "audit: this process has no sending settings to read the provider's records",
    JobKind.RESUME_UNKNOWN: "resume --include-unknown: this process cannot read the unknown outcomes",
    JobKind.ENQUEUE_RECORDED: "enqueue_recorded: this process holds no publish leases",
}

# A page of a started campaign's recorded batches onto the queue, under the lease of `holder`
# (the campaign service's, which holds the leases): (campaign_id, holder, cursor, limit) ->
# (batches enqueued, next cursor, why it stopped early or None).
EnqueuePage = Callable[[str, str, str | None, int], tuple[int, str | None, str | None]]


class Republish:
    """A page of a republish job: publish once more every recipient of a page of batch
    records whose delivery is in the job's states (never claimed counts as pending)."""

    def __init__(
        self, *, campaigns: CampaignStore, ledger: DeliveryReads, queue: Queue, page_batches: int = PAGE_BATCHES
    ) -> None:
        self._campaigns = campaigns
        self._ledger = ledger
        self._queue = queue
        self._page_batches = page_batches

    def __call__(self, job: Job) -> Page:
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
            self._queue.publish(campaign_id, bodies)
        return Page(
            cursor=cursor,
            progress={
                "batches_read": len(batches),
                "recipients_read": len(recipients),
                "republished": len(remaining),
                "messages": len(bodies),
            },
        )


class EnqueueRecorded:
    """A page of an enqueue_recorded job, done by the campaign service (it holds the lease)."""

    def __init__(self, enqueue_page: EnqueuePage) -> None:
        self._enqueue_page = enqueue_page

    def __call__(self, job: Job) -> Page:
        enqueued, cursor, stopped = self._enqueue_page(
            job.campaign_id, job.params["holder"], job.cursor, PAGE_RECORDED_BATCHES
        )
        if stopped is not None:
            return Page(cursor=None, progress={"enqueued": enqueued}, result=lambda _p: {"stopped": stopped})
        return Page(
            cursor=cursor,
            progress={"enqueued": enqueued, "pages": 1},
            result=(lambda progress: {"enqueued": progress.get("enqueued", 0)}) if cursor is None else None,
        )


class Reconcile:
    """A page of a reconcile job: one page of the ledger counted by state; the last compares
    the counts with the counters."""

    def __init__(self, *, ledger: DeliveryReads, counters: CampaignCounters, page_records: int = PAGE_RECORDS) -> None:
        self._ledger = ledger
        self._counters = counters
        self._page_records = page_records

    def __call__(self, job: Job) -> Page:
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
            totals = self._counters.totals(campaign_id)
            return reconciliation_of(campaign_id, totals, recorded).as_dict()

        return result


class Audit:
    """An audit job's one page: the whole audit, read-only, by the audit of the campaign's
    provider (`auditor`: built from the sending settings)."""

    def __init__(self, *, campaigns: CampaignStore, auditor: Callable[[str], CampaignAudit]) -> None:
        self._campaigns = campaigns
        self._auditor = auditor

    def __call__(self, job: Job) -> Page:
        campaign = self._campaigns.get(job.campaign_id)
        try:
            audited = self._auditor(campaign.provider).run(job.campaign_id, settle=False)
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


class ResumeUnknown:
    """A page of a resume_unknown job (`resume --include-unknown`): the unknown outcomes
    (given accept_possible_duplicates) reopen a page of unknowns; once every eligible one is
    reopened, `after_reopening` (the campaign service's) resumes the campaign, and its result
    is the job's."""

    def __init__(
        self,
        *,
        unknown_outcomes: Callable[[bool], UnknownOutcomes],
        after_reopening: Callable[[Job, dict[str, int]], dict[str, Any]],
    ) -> None:
        self._unknown_outcomes = unknown_outcomes
        self._after_reopening = after_reopening

    def __call__(self, job: Job) -> Page:
        params = job.params
        outcomes = self._unknown_outcomes(bool(params["accept_possible_duplicates"]))
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
        after = self._after_reopening

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
