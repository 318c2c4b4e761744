"""Scheduled sends: when a campaign's send starts, and what a schedule's firing does.

`publish --at` (or a spec's `send_at`) records the recipients at once and enqueues none of
them; the campaign waits in `scheduled` with its `send_at`, and a one-time schedule (the
CampaignScheduler port: EventBridge Scheduler) fires at that instant carrying it. The firing
takes `start` only while the campaign is still scheduled for exactly the instant it carries,
in the same conditional write: a schedule that fires twice (EventBridge Scheduler retries a
target for up to 24 h), a stale firing after a reschedule, and one after an unschedule or a
cancel each change nothing and say why.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sendonce.domain import limits
from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.ports import CampaignScheduler, CampaignStore
from sendonce.domain.errors import (
    CampaignScheduleError,
    ConflictingRequestError,
    IllegalTransitionError,
    InvalidCampaignError,
    JobNotFoundError,
)
from sendonce.domain.jobs.models import Job
from sendonce.domain.models import BatchMessage, Campaign, CampaignState
from sendonce.domain.sending.ports import Queue

if TYPE_CHECKING:
    from sendonce.domain.jobs.service import JobService

logger = logging.getLogger(__name__)

MESSAGES_PER_SEND = 10  # SQS SendMessageBatch takes ten entries
# A publish holds a lease on the campaign, renewed before every request to the queue; a
# publisher that dies lets the campaign complete this long after its last request.
PUBLISH_LEASE_MS = 5 * 60 * 1000


def new_holder() -> str:
    """A publish call's lease holder. Several may publish to one campaign at once (parallel
    streams, an S3 publish's parts): each holds a lease of its own."""
    return uuid.uuid4().hex


def start_holder(send_at_ms: int) -> str:
    """A schedule's start holds the lease as one holder whichever firing runs it: a repeat
    firing (the scheduler retries one that died) ends the lease the dead one left."""
    return f"start-{send_at_ms}"


EXAMPLE = "2026-12-02T09:00:00+01:00"


def iso(ms: int) -> str:
    """An instant as ISO 8601 in UTC, to the second (what status, logs and firings carry)."""
    return dt.datetime.fromtimestamp(ms // 1000, dt.UTC).isoformat().replace("+00:00", "Z")


# RFC 3339's date-time (section 5.6), as the API's documents state it: `T` and `Z` in either case
# (RFC 3339 allows lower case), a fraction of any length, an offset with its colon; years
# 0001-9999 and no leap second (:60), which Python's datetime cannot hold.
_TWO = r"(?:[01]\d|2[0-3])"
RFC3339_PATTERN = (
    r"^(?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d{3})-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
    rf"[Tt]{_TWO}:[0-5]\d:[0-5]\d(?:\.\d+)?(?:[Zz]|[+-]{_TWO}:[0-5]\d)$"
)
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.\d+)?(?:[Zz]|([+-])(\d\d):(\d\d))")


def parse_instant(text: object, *, what: str = "send_at") -> int:
    """An instant with its UTC offset -> epoch ms, to the second (EventBridge Scheduler's `at()`
    has no finer grain; a fraction is dropped). RFC 3339 (the API's form) in full; the CLI's
    looser ISO 8601 (`2026-12-02 09:00+01:00`) too."""
    if not isinstance(text, str):
        raise InvalidCampaignError(f"{what}: expected an ISO 8601 time such as {EXAMPLE}")
    match = _RFC3339.fullmatch(text.strip())
    try:
        value = _of_rfc3339(match) if match else dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidCampaignError(f"{what}: {text!r} is not an ISO 8601 time (write it as {EXAMPLE})") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidCampaignError(
            f"{what}: {text!r} has no UTC offset; say which zone it is in ({EXAMPLE}, or Z for UTC)"
        )
    return int(value.timestamp()) * 1000


def _of_rfc3339(match: re.Match[str]) -> dt.datetime:
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    sign, offset_hours, offset_minutes = match.groups()[6:]
    offset = dt.timedelta(hours=int(offset_hours or 0), minutes=int(offset_minutes or 0))
    zone = dt.timezone(-offset if sign == "-" else offset)
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=zone)  # ValueError: no such day


def check_future(send_at_ms: int, *, now_ms: int, what: str = "send_at") -> int:
    """The instant to the second (what a schedule and its firing carry: a finer one could never
    equal the firing's), refused in the past (or now) or further ahead than limits allow."""
    send_at_ms -= send_at_ms % 1000
    if send_at_ms <= now_ms:
        raise ConflictingRequestError(
            f"{what}: {iso(send_at_ms)} is in the past (now is {iso(now_ms)}); choose a later time"
        )
    most = limits.SCHEDULE_AHEAD_DAYS * 24 * 3600 * 1000
    if send_at_ms > now_ms + most:
        raise ConflictingRequestError(
            f"{what}: {iso(send_at_ms)} is more than {limits.SCHEDULE_AHEAD_DAYS} days ahead; see docs/limits.md"
        )
    return send_at_ms


def parse_send_at(text: str, *, now_ms: int, what: str = "send_at") -> int:
    return check_future(parse_instant(text, what=what), now_ms=now_ms, what=what)


@dataclass(frozen=True)
class Firing:
    """One firing of a campaign's schedule: the event EventBridge Scheduler delivers (our
    schedule's input, the same at every retry but for the execution id). A start's carries
    `send_at`; a send window's opening (`window_opening`) carries `window_opens_at`."""

    campaign_id: str
    send_at_ms: int  # the instant the schedule was set for: the start, or the window's opening
    execution_id: str | None = None
    window_opening: bool = False
    # An A/B test's end (campaigns/picks.py): the firing carries `pick_at`.
    variant_pick: bool = False

    def as_event(self) -> dict[str, Any]:
        key = "window_opens_at" if self.window_opening else "pick_at" if self.variant_pick else "send_at"
        event: dict[str, Any] = {"campaign_id": self.campaign_id, key: iso(self.send_at_ms)}
        if self.execution_id is not None:
            event["execution_id"] = self.execution_id
        return event

    @classmethod
    def from_event(cls, event: Any) -> Firing:
        if not isinstance(event, dict) or not isinstance(event.get("campaign_id"), str):
            raise InvalidCampaignError("firing: expected {campaign_id, send_at} or {campaign_id, window_opens_at}")
        execution_id = event.get("execution_id")
        opening = "window_opens_at" in event
        pick = not opening and "pick_at" in event
        key = "window_opens_at" if opening else "pick_at" if pick else "send_at"
        return cls(
            campaign_id=event["campaign_id"],
            send_at_ms=parse_instant(event.get(key), what=f"firing {key}"),
            execution_id=execution_id if isinstance(execution_id, str) else None,
            window_opening=opening,
            variant_pick=pick,
        )


@dataclass(frozen=True)
class FiringResult:
    campaign_id: str
    send_at: str
    started: bool
    reason: str
    # Enqueued so far by the start's job (all of them when the job ran in process; with a
    # jobs queue, `sendonce job status <job_id>` shows its progress).
    batches_enqueued: int = 0
    job_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ScheduledSends:
    """The campaign service's scheduled sends (CampaignService inherits them): reschedule,
    unschedule, and what a firing does."""

    _campaigns: CampaignStore
    _queue: Queue
    _scheduler: CampaignScheduler | None
    _clock_ms: Callable[[], int]
    _operator: str
    _jobs: JobService

    if TYPE_CHECKING:  # VariantPicks' (campaigns/picks.py), after this class in the service's bases

        def _schedule_pick(self, campaign: Campaign, *, start_ms: int | None = None) -> None: ...

    def _open_publish(self, campaign_id: str, *, holder: str, send_at_ms: int | None = None) -> Campaign:
        raise NotImplementedError

    def complete_if_done(self, campaign_id: str) -> Campaign | None:
        raise NotImplementedError

    def _enqueue_recorded_page(
        self, campaign_id: str, holder: str, cursor: str | None, limit: int
    ) -> tuple[int, str | None, str | None]:
        """One page of an enqueue_recorded job: the batches of up to `limit` records after
        `cursor` that never reached the queue, ten per request, `holder`'s lease renewed before
        each. Returns (enqueued, next cursor, None), or (enqueued, None, why) when the campaign
        was cancelled or paused meanwhile (cancel closes the recorded recipients itself; a
        resume republishes everyone not ended)."""
        page, cursor = self._campaigns.batches_page_marked(campaign_id, cursor, limit)
        unqueued = [batch for batch, enqueued in page if not enqueued]
        count = 0
        try:
            for start in range(0, len(unqueued), MESSAGES_PER_SEND):
                count += self._enqueue_batches(campaign_id, unqueued[start : start + MESSAGES_PER_SEND], holder)
        except IllegalTransitionError:  # the lease renewal is refused: no longer sending
            state = self._campaigns.get(campaign_id).state.value
            logger.info("campaign stopped while its recorded batches were enqueued", extra={"enqueued": count})
            return count, None, f"campaign is {state}"
        return count, cursor, None

    def _enqueue_recorded_job(self, campaign_id: str, holder: str, job_id: str) -> Job:
        """Enqueue every recorded batch never confirmed on the queue, as a job (a page of
        batch records a step: O(recipients) is never one invocation). `holder`'s lease, taken
        by the caller, keeps the campaign from completing until the job's last page ends it."""
        return self._jobs.start_enqueue_recorded(campaign_id, holder=holder, by=self._operator, job_id=job_id)

    def enqueue_recorded_finished(self, job: Job) -> None:
        """The job's last page: end its lease, then complete the campaign if nothing it sent is
        still open (a consumer that settled the last batch while the lease was live could not)."""
        self._campaigns.end_publish(job.campaign_id, job.params["holder"], now_ms=self._clock_ms())
        if self._campaigns.get(job.campaign_id).open_batches <= 0:
            self.complete_if_done(job.campaign_id)

    def _enqueue_batches(self, campaign_id: str, batches: list[BatchMessage], holder: str) -> int:
        self._open_publish(campaign_id, holder=holder)
        self._queue.publish(campaign_id, [b.to_body() for b in batches])
        for batch in batches:
            self._campaigns.mark_batch_enqueued(campaign_id, batch.batch_id)
        return len(batches)

    def _require_scheduler(self) -> CampaignScheduler:
        if self._scheduler is None:
            raise InvalidCampaignError("send_at: this deployment has no scheduler (EventBridge Scheduler)")
        return self._scheduler

    def _set_schedule(self, campaign_id: str, send_at_ms: int) -> None:
        try:
            self._require_scheduler().set(campaign_id, send_at_ms)
        except Exception as exc:
            # The campaign is scheduled and its recipients recorded; only the schedule is missing.
            raise CampaignScheduleError(
                f"campaign {campaign_id!r} is scheduled for {iso(send_at_ms)} but its schedule could not be"
                f" set ({type(exc).__name__}); run reschedule with the same time to set it"
            ) from exc

    def reschedule(self, campaign_id: str, send_at_ms: int, *, reason: str | None = None) -> Campaign:
        """Move a scheduled campaign's start; a firing for the old time then starts nothing."""
        self._require_scheduler()
        send_at_ms = check_future(send_at_ms, now_ms=self._clock_ms())
        campaign = lifecycle.apply(
            self._campaigns,
            campaign_id,
            CampaignEvent.RESCHEDULE,
            by=self._operator,
            reason=reason or f"rescheduled for {iso(send_at_ms)}",
            send_at_ms=send_at_ms,
        )
        self._set_schedule(campaign_id, send_at_ms)
        self._schedule_pick(campaign, start_ms=send_at_ms)  # an A/B test's end moves with its start
        return campaign

    def unschedule(self, campaign_id: str, *, reason: str | None = None) -> Campaign:
        """Back to draft, schedule deleted. The recorded recipients stay recorded and unsent: the
        next publish (now or --at) sends them with its own; cancel closes them."""
        campaign = lifecycle.apply(
            self._campaigns,
            campaign_id,
            CampaignEvent.UNSCHEDULE,
            by=self._operator,
            reason=reason or "unscheduled",
            clear_send_at=True,
        )
        if self._scheduler is not None:  # without one no schedule was set here; a stray firing finds a draft
            self._scheduler.delete(campaign_id)
        return campaign

    def _take_start(self, campaign_id: str, send_at_ms: int, holder: str) -> Campaign:
        """`start`, conditional on the campaign being scheduled for exactly `send_at_ms`;
        the start holds a publish lease of its own (`holder`) while it enqueues."""
        return lifecycle.apply(
            self._campaigns,
            campaign_id,
            CampaignEvent.START,
            by=lifecycle.AUTOMATIC,
            reason=f"scheduled for {iso(send_at_ms)}",
            publishing_until_ms=self._clock_ms() + PUBLISH_LEASE_MS,
            holder=holder,
            if_send_at_ms=send_at_ms,
        )

    def start_scheduled(self, firing: Firing) -> FiringResult:
        """A schedule fired: start the send if the campaign is still scheduled for exactly the
        firing's instant (one conditional write), then enqueue every recorded batch as a job
        (`<campaign>-start-<instant>`). Any other firing changes nothing and says why; a repeat
        of the firing that started the campaign finds that job and submits it again if it is
        still running (it goes on from its own cursor; the ledger sends each recipient once
        whatever is enqueued twice)."""
        at = iso(firing.send_at_ms)
        holder = start_holder(firing.send_at_ms)
        job_id = f"{firing.campaign_id}-start-{firing.send_at_ms}"
        try:
            self._take_start(firing.campaign_id, firing.send_at_ms, holder)
        except IllegalTransitionError:
            campaign = self._campaigns.get(firing.campaign_id)
            if campaign.state is CampaignState.SENDING and campaign.send_at_ms == firing.send_at_ms:
                # The job's pages renew the lease before each request and its end ends it.
                try:
                    before = self._jobs.get(job_id).progress.get("enqueued", 0)
                except JobNotFoundError:  # the first firing died before creating it
                    before = 0
                job = self._enqueue_recorded_job(firing.campaign_id, holder, job_id)
                left = job.progress.get("enqueued", 0) - before
                reason = "already started by this schedule" + (
                    f"; enqueued {left} batch(es) an earlier firing left" if left else ""
                )
                return self._firing_result(firing, False, reason, job, enqueued=left)
            reason = f"campaign is {campaign.state.value}"
            if campaign.state is CampaignState.SCHEDULED and campaign.send_at_ms is not None:
                reason += f" for {iso(campaign.send_at_ms)}, not {at}"
            return self._firing_result(firing, False, reason + "; nothing started")
        job = self._enqueue_recorded_job(firing.campaign_id, holder, job_id)
        return self._firing_result(firing, True, f"started: scheduled for {at}", job)

    @staticmethod
    def _firing_result(
        firing: Firing, started: bool, reason: str, job: Job | None = None, *, enqueued: int | None = None
    ) -> FiringResult:
        if enqueued is None:
            enqueued = job.progress.get("enqueued", 0) if job is not None else 0
        result = FiringResult(
            campaign_id=firing.campaign_id,
            send_at=iso(firing.send_at_ms),
            started=started,
            reason=reason,
            batches_enqueued=enqueued,
            job_id=job.job_id if job is not None else None,
        )
        logger.info("schedule fired", extra={**result.as_dict(), "execution_id": firing.execution_id})
        return result
