"""Operator-facing domain: create, publish, pause, resume, cancel, delivery status.

The CLI and the HTTP API both call this service; neither holds any logic of its own.
Checkpoints come from the ledger, never from a cursor: resume re-reads which recipients
have not ended and publishes exactly those.

Over 500 lines: each operator verb is a lifecycle row plus what follows it (publish's
batches, resume's republish, cancel's closing), and they share the campaign's guards;
status, counters, scheduling, unknowns and jobs are modules of their own.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.batches import OversizedRecipientError, batch_id_for, pack
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.scheduling import (
    MESSAGES_PER_SEND,
    PUBLISH_LEASE_MS,
    ScheduledSends,
    check_future,
    iso,
    new_holder,
)
from sendonce.domain.campaigns.status import (
    DeliveryStatus,
    Reconciliation,
    complete_if_done,
    delivery_status,
    reconcile,
)
from sendonce.domain.campaigns.unknowns import DEFAULT_UNKNOWN_WINDOW_S, UnknownOutcomes
from sendonce.domain.campaigns.window_pauses import WindowOpenings
from sendonce.domain.errors import (
    ConflictingRequestError,
    IllegalTransitionError,
    InvalidCampaignError,
    UnknownProviderError,
)
from sendonce.domain.jobs.models import Job, JobKind
from sendonce.domain.jobs.service import InMemoryJobStore, JobService
from sendonce.domain.models import (
    FINAL_STATES,
    MAX_RECIPIENTS_PER_BATCH,
    SCHEMA_VERSION,
    BatchMessage,
    Campaign,
    CampaignState,
    DeliveryKey,
    DeliveryRecord,
    DeliveryState,
    Recipient,
)
from sendonce.domain.ports import (
    BatchStatus,
    CampaignCounters,
    CampaignScheduler,
    CampaignStore,
    Ledger,
    Queue,
    ReopenReport,
)
from sendonce.domain.sending.rendering import RenderError, check_content

logger = logging.getLogger(__name__)


@dataclass
class PublishReport:
    campaign_id: str
    accepted: int = 0
    duplicates_in_input: list[str] = field(default_factory=list)
    batches_new: int = 0
    batches_already_enqueued: int = 0  # published before: not sent again (resume does that)
    messages_sent: int = 0
    # Scheduled (publish --at, or a spec's send_at): recorded, enqueued when the send starts.
    batches_recorded: int = 0
    send_at: str | None = None


@dataclass(frozen=True)
class DeadLetter:
    """One message read (not consumed) from the dead-letter queue."""

    message_id: str
    body: str
    poison_reason: str | None = None  # the consumer's reason when it judged the message poison
    sent_at_ms: int | None = None


@dataclass
class DeadLetterMessage:
    message_id: str
    campaign_id: str | None  # None: the body is no batch of any campaign
    batch_id: str | None
    recipients: int
    dead_lettered: int  # of its recipients, how many the ledger holds as dead-lettered
    error: str | None
    sent_at_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DeadLetterGroup:
    campaign_id: str | None
    messages: int = 0
    recipients: int = 0
    dead_lettered: int = 0
    last_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DeadLetterSummary:
    groups: list[DeadLetterGroup]
    messages: list[DeadLetterMessage]

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": len(self.messages),
            "campaigns": [g.as_dict() for g in self.groups],
            "details": [m.as_dict() for m in self.messages],
        }


def _system_clock() -> int:
    return int(time.time() * 1000)


def _iso_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class CampaignService(ScheduledSends, WindowOpenings):
    def __init__(
        self,
        *,
        campaigns: CampaignStore,
        ledger: Ledger,
        queue: Queue,
        provider_names: Iterable[str],
        batch_provider_names: Iterable[str] | None = None,
        provider_rates: Mapping[str, float] | None = None,
        operator: str = "operator",
        clock_ms: Callable[[], int] = _system_clock,
        jobs: JobService | None = None,
        counters: CampaignCounters | None = None,
        scheduler: CampaignScheduler | None = None,
    ):
        self._clock_ms = clock_ms
        self._counters = counters
        self._scheduler = scheduler
        self._campaigns = campaigns
        self._ledger = ledger
        self._queue = queue
        # Resume and cancel republish as a job: in the deployed stack on the jobs queue (the
        # API answers at once); without one, run here a page at a time.
        self._jobs = jobs or JobService(
            jobs=InMemoryJobStore(),
            queue=None,
            campaigns=campaigns,
            ledger=ledger,
            campaign_queue=queue,
            clock=_iso_now,
            counters=counters,
        )
        if self._jobs.on_finished is None:
            self._jobs.on_finished = self.job_finished
        if self._jobs.after_reopening is None:
            self._jobs.after_reopening = self._resume_after_reopening
        if self._jobs.enqueue_recorded is None:
            self._jobs.enqueue_recorded = self._enqueue_recorded_page
        self._provider_names = frozenset(provider_names)
        # None: every provider named may send batches (the wiring passes the registry's answer).
        self._batch_provider_names = frozenset(
            self._provider_names if batch_provider_names is None else batch_provider_names
        )
        # Each provider's configured rate (requests/s), read only for a campaign with a max_rate
        # (the CLI's reads the deployment's when first asked). None or a provider not in it: unchecked.
        self._provider_rates: Mapping[str, float] = {} if provider_rates is None else provider_rates
        self._operator = operator

    def create(self, campaign: Campaign) -> Campaign:
        if campaign.provider not in self._provider_names:
            raise UnknownProviderError(
                f"provider: {campaign.provider!r} is not registered (known: {', '.join(sorted(self._provider_names))})"
            )
        if campaign.delivery_mode == "batch" and campaign.provider not in self._batch_provider_names:
            raise InvalidCampaignError(
                f"delivery_mode: 'batch' needs a provider with batch sends ({', '.join(sorted(self._batch_provider_names))}),"
                f" not {campaign.provider!r}"
            )
        rate = self._provider_rates.get(campaign.provider) if campaign.max_rate is not None else None
        if campaign.max_rate is not None and rate is not None and campaign.max_rate > rate:
            # Well formed: the deployment's configured rate refuses it (409), as for an unconfigured
            # provider; the same spec is accepted once the provider is configured faster.
            raise ConflictingRequestError(
                f"max_rate: {campaign.max_rate:g} is above provider {campaign.provider!r}'s rate of {rate:g} requests/s"
            )
        if campaign.content is None:
            raise InvalidCampaignError("content: required")
        if campaign.send_at_ms is not None:
            self._require_scheduler()
            check_future(campaign.send_at_ms, now_ms=self._clock_ms())
        try:
            check_content(campaign.content)
        except RenderError as exc:
            raise InvalidCampaignError(f"content: {exc}") from exc
        return self._campaigns.create(campaign)

    def get(self, campaign_id: str) -> Campaign:
        return self._campaigns.get(campaign_id)

    def list_campaigns(self, state: CampaignState | None = None) -> list[Campaign]:
        return list(self._campaigns.list(state))

    def publish(
        self,
        campaign_id: str,
        recipients: Iterable[Recipient],
        *,
        batch_size: int = MAX_RECIPIENTS_PER_BATCH,
        on_batch: Callable[[PublishReport], None] | None = None,
        send_at_ms: int | None = None,
    ) -> PublishReport:
        """Record and enqueue recipients in batches; safe to repeat (batch ids are content-addressed
        and the ledger dedups deliveries). Streams: holds one batch and the set of ids seen.
        With `send_at_ms` (or a draft whose spec set send_at) the campaign is scheduled: the
        batches are recorded and none enqueued until its schedule starts the send."""
        if not 1 <= batch_size <= MAX_RECIPIENTS_PER_BATCH:
            raise InvalidCampaignError(f"batch_size must be 1..{MAX_RECIPIENTS_PER_BATCH}")
        before = self._campaigns.get(campaign_id)
        if send_at_ms is None and before.state is CampaignState.DRAFT:
            send_at_ms = before.send_at_ms  # the spec's send_at
        if send_at_ms is not None:
            self._require_scheduler()
            send_at_ms = check_future(send_at_ms, now_ms=self._clock_ms())
        report = PublishReport(campaign_id=campaign_id, send_at=iso(send_at_ms) if send_at_ms else None)
        holder = new_holder()
        opened = self._open_publish(campaign_id, holder=holder, send_at_ms=send_at_ms)
        try:
            if before.state is CampaignState.DRAFT and opened.state is CampaignState.SENDING and before.open_batches:
                # Batches an unschedule left recorded go out with this publish, as a job under
                # a lease of its own (taken here, so that nothing completes in between).
                job_holder = new_holder()
                self._open_publish(campaign_id, holder=job_holder)
                job = self._enqueue_recorded_job(campaign_id, job_holder, f"{campaign_id}-enqueue-{job_holder}")
                report.messages_sent += job.progress.get("enqueued", 0)
            seen: set[str] = set()

            def unique() -> Iterator[Recipient]:
                for recipient in recipients:
                    if recipient.recipient_id in seen:
                        report.duplicates_in_input.append(recipient.recipient_id)
                        continue
                    seen.add(recipient.recipient_id)
                    yield recipient

            chunks: list[list[Recipient]] = []
            try:
                for chunk in pack(campaign_id, unique(), batch_size=batch_size):
                    chunks.append(chunk)
                    if len(chunks) == MESSAGES_PER_SEND:
                        self._enqueue(chunks, campaign_id, report, holder)
                        chunks = []
                        if on_batch:
                            on_batch(report)
            except OversizedRecipientError as exc:
                # Everything before it is published (nothing recorded is left unqueued); the
                # offending recipient and everything after it are not.
                if chunks:
                    self._enqueue(chunks, campaign_id, report, holder)
                raise OversizedRecipientError(
                    f"{exc}; the {report.accepted:,} recipient(s) before it were published, none after it"
                    " (publishing again is safe)"
                ) from exc
            if chunks:
                self._enqueue(chunks, campaign_id, report, holder)
                if on_batch:
                    on_batch(report)
        finally:
            self._campaigns.end_publish(campaign_id, holder, now_ms=self._clock_ms())
        if send_at_ms is not None:
            self._set_schedule(campaign_id, send_at_ms)
            return report
        # Read after the lease is gone: a consumer that settled the last open batch while it
        # was live could not complete the campaign, so the publisher does; one that settles
        # later sees no lease and completes it. Nothing sent: no consumer will settle a batch
        # of this publish, and it may have reopened a campaign that is already done.
        if not report.messages_sent or self._campaigns.get(campaign_id).open_batches <= 0:
            self.complete_if_done(campaign_id)
        return report

    def _open_publish(self, campaign_id: str, *, holder: str, send_at_ms: int | None = None) -> Campaign:
        """Take (or renew) `holder`'s publish lease and the shared one; a draft or completed
        campaign starts sending, a draft given `send_at_ms` is scheduled."""
        scheduling = send_at_ms is not None
        try:
            return lifecycle.apply(
                self._campaigns,
                campaign_id,
                CampaignEvent.SCHEDULE if scheduling else CampaignEvent.PUBLISH,
                by=self._operator,
                reason=f"scheduled for {iso(send_at_ms)}" if send_at_ms is not None else "published",
                publishing_until_ms=self._clock_ms() + PUBLISH_LEASE_MS,
                holder=holder,
                send_at_ms=send_at_ms,
            )
        except IllegalTransitionError as exc:
            # A valid request the campaign's state refuses: a conflict (409), as for pause or resume.
            state = self._campaigns.get(campaign_id).state
            if scheduling:
                raise IllegalTransitionError(
                    f"campaign {campaign_id!r} is {state.value}; only a draft can be scheduled"
                    + (" (reschedule moves it)" if state is CampaignState.SCHEDULED else "")
                ) from exc
            raise IllegalTransitionError(
                f"campaign {campaign_id!r} is {state.value}; nothing can be published to it"
            ) from exc

    def _enqueue(self, chunks: list[list[Recipient]], campaign_id: str, report: PublishReport, holder: str) -> None:
        batches = []
        for chunk in chunks:
            batch = BatchMessage(
                schema_version=SCHEMA_VERSION,
                campaign_id=campaign_id,
                batch_id=batch_id_for(campaign_id, chunk),
                recipients=chunk,
            )
            report.accepted += len(chunk)
            status = self._campaigns.add_batch(batch)
            if status is BatchStatus.ENQUEUED:
                report.batches_already_enqueued += 1
                continue
            # A batch recorded before but never confirmed on the queue (a publisher that
            # crashed in between) is enqueued now; sending it twice is harmless.
            report.batches_new += status is BatchStatus.NEW
            batches.append(batch)
        if not batches:
            return
        # Renew the lease before each request to the queue, and read the state in the same
        # write: while scheduled, the batches stay recorded and the start enqueues them (it
        # cannot have read them yet: they were recorded before this renewal saw `scheduled`).
        if self._open_publish(campaign_id, holder=holder).state is CampaignState.SCHEDULED:
            report.batches_recorded += len(batches)
            return
        self._queue.publish(campaign_id, [b.to_body() for b in batches])
        report.messages_sent += len(batches)
        for batch in batches:
            self._campaigns.mark_batch_enqueued(campaign_id, batch.batch_id)

    def pause(self, campaign_id: str, *, reason: str | None = None) -> Campaign:
        return lifecycle.apply(self._campaigns, campaign_id, CampaignEvent.PAUSE, by=self._operator, reason=reason)

    def cancel(self, campaign_id: str, *, reason: str | None = None) -> tuple[Campaign, Job]:
        """Cancelled, then a job publishes every recipient that has not ended once more so
        that consumers close each one as the ledger says: cancelled, or unknown where an
        attempt may have been accepted. A delivery a live consumer holds ends as that
        consumer decides; one a dead consumer held is closed when its lease has run out.

        Idempotent: cancelling a cancelled campaign starts its closing job if it never
        started (a cancel whose answer was lost, retried), else returns that job."""
        try:
            campaign = lifecycle.apply(
                self._campaigns, campaign_id, CampaignEvent.CANCEL, by=self._operator, reason=reason
            )
        except IllegalTransitionError:
            campaign = self._campaigns.get(campaign_id)
            if campaign.state is not CampaignState.CANCELLED:
                raise
        if campaign.send_at_ms is not None and self._scheduler is not None:
            self._scheduler.delete(campaign_id)  # a firing would find it cancelled anyway
        job = self._jobs.start_republish(
            campaign_id,
            {DeliveryState.PENDING, DeliveryState.DEAD_LETTERED, DeliveryState.CLAIMED, DeliveryState.IN_FLIGHT},
            prefix="x",
            by=self._operator,
            reason="cancel: close every delivery not ended",
            job_id=f"{campaign_id}-cancel",
        )
        return campaign, job

    def resume(
        self, campaign_id: str, *, include_dead_lettered: bool = True, reason: str | None = None
    ) -> tuple[Campaign, Job]:
        """Back to sending, then a job publishes every recipient that has not ended. A
        campaign already sending may be resumed too (a resume whose answer was lost, retried;
        messages lost from the queue): republishing is always safe, the ledger sends each
        delivery once. Two resumes at once are two jobs; each publishes everyone not ended."""
        campaign = lifecycle.apply(
            self._campaigns, campaign_id, CampaignEvent.RESUME, by=self._operator, reason=reason or "resumed"
        )
        # The republished messages now stand for every batch not yet settled: each settles
        # below zero, which makes its consumer ask whether the campaign is done.
        self._campaigns.reset_open_batches(campaign_id, 0)
        republish = {DeliveryState.PENDING, DeliveryState.CLAIMED, DeliveryState.IN_FLIGHT}
        if include_dead_lettered:
            republish.add(DeliveryState.DEAD_LETTERED)
        job = self._jobs.start_republish(
            campaign_id,
            republish,
            prefix="r",
            by=self._operator,
            reason=reason or "resume: republish every delivery not ended",
            job_id=f"{campaign_id}-resume-{campaign.version}",
        )
        logger.info("campaign resumed", extra={"campaign_id": campaign_id, "job_id": job.job_id})
        if job.done:
            campaign = self._campaigns.get(campaign_id)
        return campaign, job

    @property
    def jobs(self) -> JobService:
        return self._jobs

    def job_finished(self, job: Job) -> None:
        """A republish job has read the whole campaign: if every recipient has ended (nothing
        was left to republish, or consumers finished before the job), complete it now. A
        start's job ends its lease first (scheduling.py)."""
        if job.kind is JobKind.REPUBLISH and job.params.get("prefix") == "r":
            self.complete_if_done(job.campaign_id)
        elif job.kind is JobKind.ENQUEUE_RECORDED:
            self.enqueue_recorded_finished(job)

    def resume_including_unknown(
        self,
        campaign_id: str,
        unknowns: UnknownOutcomes,
        *,
        recipient_ids: Iterable[str] | None = None,
        older_than_s: int = DEFAULT_UNKNOWN_WINDOW_S,
        include_dead_lettered: bool = True,
        reason: str | None = None,
    ) -> tuple[Campaign, Job | None, ReopenReport]:
        """`resume --include-unknown`: move the chosen unknown deliveries back to pending (the
        operator accepts that they may be sent twice), then resume. A campaign that completed
        with unknown outcomes is paused first so that it can be resumed."""
        by = self._operator
        campaign = self._campaigns.get(campaign_id)
        if not (
            lifecycle.can(CampaignEvent.RESUME, campaign.state)
            or lifecycle.can(CampaignEvent.REOPEN_UNKNOWN, campaign.state)
        ):
            raise IllegalTransitionError(f"campaign {campaign_id!r} is {campaign.state.value}; it cannot be resumed")
        report = unknowns.reopen(campaign_id, recipient_ids=recipient_ids, older_than_s=older_than_s, by=by)
        if campaign.state is CampaignState.COMPLETED:
            if not report.reopened:
                return campaign, None, report
            lifecycle.apply(
                self._campaigns,
                campaign_id,
                CampaignEvent.REOPEN_UNKNOWN,
                by=by,
                reason=f"reopened {len(report.reopened)} unknown outcome(s)",
            )
        campaign, job = self.resume(
            campaign_id,
            include_dead_lettered=include_dead_lettered,
            reason=reason
            or (f"resumed with {len(report.reopened)} reopened unknown outcome(s)" if report.reopened else None),
        )
        return campaign, job, report

    def start_resume_including_unknown(
        self,
        campaign_id: str,
        *,
        recipient_ids: Iterable[str] | None = None,
        older_than_s: int = DEFAULT_UNKNOWN_WINDOW_S,
        accept_possible_duplicates: bool = False,
        include_dead_lettered: bool = True,
        reason: str | None = None,
    ) -> Job:
        """`resume_including_unknown` as a job (a page of unknowns a step, then the resume):
        the same rules; `jobs.unknown_outcomes` must be set (the CLI sets it). The job's
        `listed` names the reopened recipients, its result the resume's republish job."""
        campaign = self._campaigns.get(campaign_id)
        if not (
            lifecycle.can(CampaignEvent.RESUME, campaign.state)
            or lifecycle.can(CampaignEvent.REOPEN_UNKNOWN, campaign.state)
        ):
            raise IllegalTransitionError(f"campaign {campaign_id!r} is {campaign.state.value}; it cannot be resumed")
        return self._jobs.start_resume_unknown(
            campaign_id,
            by=self._operator,
            recipient_ids=recipient_ids,
            older_than_s=older_than_s,
            accept_possible_duplicates=accept_possible_duplicates,
            include_dead_lettered=include_dead_lettered,
            reason=reason,
        )

    def _resume_after_reopening(self, job: Job, progress: dict[str, int]) -> dict[str, Any]:
        """The end of a resume_unknown job, as `resume_including_unknown` ends: a completed
        campaign with reopened unknowns is reopened, then resumed. Safe to repeat (a second
        resume republishes once more; the ledger sends each recipient once)."""
        reopened = progress.get("reopened", 0)
        by = job.by or self._operator
        campaign = self._campaigns.get(job.campaign_id)
        if campaign.state is CampaignState.COMPLETED:
            if not reopened:
                return {"resumed": False, "republish_job": None, "state": campaign.state.value}
            lifecycle.apply(
                self._campaigns,
                job.campaign_id,
                CampaignEvent.REOPEN_UNKNOWN,
                by=by,
                reason=f"reopened {reopened} unknown outcome(s)",
            )
        campaign, republish = self.acting_as(by).resume(
            job.campaign_id,
            include_dead_lettered=bool(job.params.get("include_dead_lettered", True)),
            reason=job.params.get("reason")
            or (f"resumed with {reopened} reopened unknown outcome(s)" if reopened else None),
        )
        return {"resumed": True, "republish_job": republish.job_id, "state": campaign.state.value}

    def status(self, campaign_id: str) -> DeliveryStatus:
        """Counts by ledger state (from the counters when the campaign has them). Never changes the campaign: completion is the consumer's
        `complete` event (or `complete_if_done`)."""
        return delivery_status(self._campaigns, self._ledger, campaign_id, self._counters)

    def complete_if_done(self, campaign_id: str) -> Campaign | None:
        return complete_if_done(
            self._campaigns, self._ledger, campaign_id, now_ms=self._clock_ms(), counters=self._counters
        )

    def reconcile(self, campaign_id: str) -> Reconciliation:
        """The counters against a full read of the ledger: every drift (O(recipients))."""
        if self._counters is None:
            raise InvalidCampaignError("reconcile: this service keeps no counters")
        return reconcile(self._campaigns, self._ledger, self._counters, campaign_id)

    def start_reconcile(self, campaign_id: str) -> Job:
        """`reconcile` as a job (a page of the ledger a step): its result is the
        Reconciliation's `as_dict`. Not idempotent by id: each call reads the ledger anew."""
        return self._jobs.start_reconcile(campaign_id, by=self._operator)

    def records(self, campaign_id: str) -> Iterator[DeliveryRecord]:
        return self._ledger.records(campaign_id)

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
            jobs=self._jobs,
            counters=self._counters,
            scheduler=self._scheduler,
        )

    def delivery(self, campaign_id: str, recipient_id: str) -> DeliveryRecord | None:
        """The ledger record of one delivery (None: not claimed yet, or never published)."""
        self._campaigns.get(campaign_id)  # raises CampaignNotFoundError
        return self._ledger.get(DeliveryKey(campaign_id=campaign_id, recipient_id=recipient_id))

    def dead_lettered(self, campaign_id: str) -> list[DeliveryRecord]:
        """Deliveries whose batch reached the DLQ unsent, each with the last error the ledger kept."""
        return [r for r in self._ledger.records(campaign_id) if r.state is DeliveryState.DEAD_LETTERED]

    def dead_letter_summary(self, letters: Iterable[DeadLetter]) -> DeadLetterSummary:
        """Group dead-letter messages by campaign. A message's error is the poison reason the
        consumer attached, else the reason the ledger recorded for its dead-lettered recipients."""
        parsed: list[tuple[DeadLetter, BatchMessage | None]] = []
        members: dict[str, set[str]] = {}
        for letter in letters:
            try:
                batch = BatchMessage.model_validate_json(letter.body)
            except ValidationError:
                batch = None
            parsed.append((letter, batch))
            if batch:
                members.setdefault(batch.campaign_id, set()).update(r.recipient_id for r in batch.recipients)
        dead: dict[tuple[str, str], DeliveryRecord] = {}
        for campaign_id, ids in members.items():  # the letters' recipients only, never the whole campaign
            for recipient_id, record in self._ledger.get_many(campaign_id, sorted(ids)).items():
                if record.state is DeliveryState.DEAD_LETTERED:
                    dead[(campaign_id, recipient_id)] = record
        messages: list[DeadLetterMessage] = []
        for letter, batch in parsed:
            keys = [(batch.campaign_id, r.recipient_id) for r in batch.recipients] if batch else []
            records = [dead[key] for key in keys if key in dead]
            latest = max(records, key=lambda r: r.updated_at or "", default=None)
            messages.append(
                DeadLetterMessage(
                    message_id=letter.message_id,
                    campaign_id=batch.campaign_id if batch else None,
                    batch_id=batch.batch_id if batch else None,
                    recipients=len(batch.recipients) if batch else 0,
                    dead_lettered=len(records),
                    error=letter.poison_reason or (latest.reason if latest else None),
                    sent_at_ms=letter.sent_at_ms,
                )
            )
        groups: dict[str | None, DeadLetterGroup] = {}
        for message in sorted(messages, key=lambda m: m.sent_at_ms or 0):
            group = groups.setdefault(message.campaign_id, DeadLetterGroup(campaign_id=message.campaign_id))
            group.messages += 1
            group.recipients += message.recipients
            group.dead_lettered += message.dead_lettered
            group.last_error = message.error or group.last_error
        ordered = sorted(groups.values(), key=lambda g: (g.campaign_id is None, g.campaign_id or ""))
        return DeadLetterSummary(groups=ordered, messages=messages)


def is_final(state: DeliveryState) -> bool:
    return state in FINAL_STATES
