"""What a send window does to a campaign: outside it the campaign pauses by itself, and the
window's next opening resumes it.

The pause (`close_window`, taken by a consumer): a consumer reads the campaign per message;
when the campaign is sending and its window is closed then, the consumer sets the one-time
schedule of the next opening (first: a consumer that dies after it leaves a schedule that
finds nothing to resume, never a pause that nothing resumes), then takes `window_close`
(sending -> paused, conditional on sending) with the reason `window: opens <local time>`,
and acknowledges the message unsent, as for any paused campaign: its recipients stay pending.

The resume (`WindowOpenings.open_window`, the schedule's firing): `window_open` (paused ->
sending) is conditional on the campaign being paused with exactly the reason the window's
pause for that opening wrote. An operator's pause (or a pause of a window-paused campaign,
which makes the pause the operator's), a halt, a brake, a pause for another opening: none
has that reason, so the firing resumes nothing and says why. Then a republish job (job id
per opening: a repeated firing finds the job and starts no second one) publishes every
recipient that has not ended, as an operator's resume does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.ports import CampaignScheduler, CampaignStore
from sendonce.domain.campaigns.scheduling import Firing, FiringResult, iso
from sendonce.domain.deliverability import warmup
from sendonce.domain.errors import IllegalTransitionError
from sendonce.domain.jobs.service import JobService
from sendonce.domain.models import Campaign, CampaignState, DeliveryState

logger = logging.getLogger(__name__)

OPENED_PREFIX = "window opened at "


def outside_window(campaign: Campaign, now_ms: int) -> bool:
    """A sending campaign whose window is closed now: the consumer sends nothing for it."""
    return (
        campaign.state is CampaignState.SENDING and campaign.window is not None and not campaign.window.is_open(now_ms)
    )


def close_window(
    campaigns: CampaignStore, scheduler: CampaignScheduler | None, campaign: Campaign, *, now_ms: int
) -> Campaign | None:
    """Pause a sending campaign its window closed on: the next opening's schedule, then
    `window_close`. None when the campaign left `sending` meanwhile (nothing to pause)."""
    window = campaign.window
    assert window is not None
    opens_at_ms = window.next_opening(now_ms)
    return pause_until(campaigns, scheduler, campaign, opens_at_ms=opens_at_ms, reason=window.pause_reason(opens_at_ms))


def pause_until(
    campaigns: CampaignStore, scheduler: CampaignScheduler | None, campaign: Campaign, *, opens_at_ms: int, reason: str
) -> Campaign | None:
    """Pause a sending campaign until `opens_at_ms` (its window's next opening; the next day,
    when its warm-up day's cap is reached): the opening's schedule first, then `window_close`
    with `reason`, which the opening's firing resumes (`open_window`). None when it left
    `sending` meanwhile (nothing to pause)."""
    if scheduler is None:
        # Without a scheduler nothing resumes it at the opening: the operator's resume does.
        logger.error("campaign paused until an opening but no scheduler is configured; resume by hand")
    else:
        scheduler.set_opening(campaign.campaign_id, opens_at_ms)
    try:
        paused = lifecycle.apply(
            campaigns, campaign.campaign_id, CampaignEvent.WINDOW_CLOSE, by=lifecycle.AUTOMATIC, reason=reason
        )
    except IllegalTransitionError:
        logger.info("campaign left sending before its pause", extra={"reason": reason})
        return None
    logger.info("campaign paused until an opening", extra={"reason": reason, "opens_at": iso(opens_at_ms)})
    return paused


class WindowOpenings:
    """The campaign service's half: what a window opening's firing does."""

    _campaigns: CampaignStore
    _jobs: JobService
    _clock_ms: Callable[[], int]

    def open_window(self, firing: Firing) -> FiringResult:
        """Resume the campaign if its window paused it for exactly this opening, and republish
        its remaining recipients; any other firing changes nothing and says why; a repeat of
        the firing that resumed it starts no second job."""
        campaign = self._campaigns.get(firing.campaign_id)
        if warmup.waits_for(campaign.state_reason, firing.send_at_ms):
            # Paused by its warm-up day's cap for exactly this opening (the reason, read and
            # then required unchanged by the conditional write, names it).
            waiting_for = str(campaign.state_reason)
            opened = f"{warmup.REASON_PREFIX}day opened at {warmup.iso(firing.send_at_ms)}"
        elif campaign.window is None:
            return self._window_result(firing, False, "campaign has no send window; nothing resumed")
        else:
            waiting_for = campaign.window.pause_reason(firing.send_at_ms)
            opened = f"{OPENED_PREFIX}{campaign.window.local_iso(firing.send_at_ms)}"
        try:
            self._take_window_open(firing.campaign_id, opened=opened, waiting_for=waiting_for)
            verdict = f"resumed: {opened}"
            resumed = True
            # The republished messages stand for every batch not yet settled (as resume's).
            self._campaigns.reset_open_batches(firing.campaign_id, 0)
        except IllegalTransitionError:
            current = self._campaigns.get(firing.campaign_id)
            if not (current.state is CampaignState.SENDING and current.state_reason == opened):
                why = f" ({current.state_reason})" if current.state_reason else ""
                return self._window_result(
                    firing, False, f"campaign is {current.state.value}{why}, not {waiting_for}; nothing resumed"
                )
            verdict, resumed = "already resumed by this opening", False
        job = self._jobs.start_republish(
            firing.campaign_id,
            {DeliveryState.PENDING, DeliveryState.CLAIMED, DeliveryState.IN_FLIGHT, DeliveryState.DEAD_LETTERED},
            prefix="r",
            by=lifecycle.AUTOMATIC,
            reason=f"{opened}: republish every delivery not ended",
            job_id=f"{firing.campaign_id}-window-{firing.send_at_ms // 1000}",
        )
        return self._window_result(firing, resumed, f"{verdict}; republish job {job.job_id}")

    def _take_window_open(self, campaign_id: str, *, opened: str, waiting_for: str) -> Campaign:
        """`window_open`, conditional on the pause's reason being exactly `waiting_for`."""
        return lifecycle.apply(
            self._campaigns,
            campaign_id,
            CampaignEvent.WINDOW_OPEN,
            by=lifecycle.AUTOMATIC,
            reason=opened,
            if_reason=waiting_for,
        )

    @staticmethod
    def _window_result(firing: Firing, resumed: bool, reason: str) -> FiringResult:
        result = FiringResult(
            campaign_id=firing.campaign_id, send_at=iso(firing.send_at_ms), started=resumed, reason=reason
        )
        logger.info("window opening fired", extra={**result.as_dict(), "execution_id": firing.execution_id})
        return result
