"""The operator's control of a sending campaign: pause, cancel, resume (with the unknown
outcomes too), each a lifecycle row plus what follows it (cancel's closing, resume's
republish). CampaignService inherits it."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.ports import CampaignScheduler, CampaignStore
from sendonce.domain.campaigns.unknowns import DEFAULT_UNKNOWN_WINDOW_S, UnknownOutcomes
from sendonce.domain.deliverability.ports import ReopenReport
from sendonce.domain.errors import IllegalTransitionError
from sendonce.domain.jobs.models import Job
from sendonce.domain.jobs.service import JobService
from sendonce.domain.models import Campaign, CampaignState, DeliveryState

if TYPE_CHECKING:
    from typing import Self

logger = logging.getLogger(__name__)


class OperatorControl:
    """The campaign service's pause, cancel and resume."""

    _campaigns: CampaignStore
    _scheduler: CampaignScheduler | None
    _operator: str
    _jobs: JobService

    if TYPE_CHECKING:  # the service's own (declared here only, so that it is not shadowed)

        def acting_as(self, operator: str) -> Self: ...

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
        the same rules; its jobs must be built with the unknown outcomes (the CLI's are). The job's
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
