"""An A/B campaign's winner (campaigns/variants.py): picked by hand (`sendonce campaign pick`)
or by the test's scheduled end, recorded once, then sent to the rest.

A pick is two steps, each safe to repeat: the decision is one conditional write (the first
recorded stands: a later pick, by hand or by schedule, finds it and changes nothing), then a
republish job (`<campaign>-pick`, started once whoever asks) publishes every recipient still
pending, which are the rest the consumers left unclaimed. A pick that died between the two is
finished by the next one: the job is started whenever the decision exists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sendonce.domain.campaigns.ports import CampaignScheduler, CampaignStore
from sendonce.domain.campaigns.scheduling import Firing, iso
from sendonce.domain.campaigns.variants import Decision, VariantFigures, decide
from sendonce.domain.errors import IllegalTransitionError, InvalidCampaignError
from sendonce.domain.jobs.models import Job
from sendonce.domain.jobs.service import JobService
from sendonce.domain.models import Campaign, CampaignState, DeliveryState

logger = logging.getLogger(__name__)

# The per-variant figures of a campaign's test (the report's aggregates), or None where none are kept.
FiguresOf = Callable[[Campaign], Mapping[str, VariantFigures]]
PICKABLE = frozenset({CampaignState.SENDING, CampaignState.PAUSED, CampaignState.COMPLETED})
PICK_PREFIX = "p"  # the republished batches' id prefix (jobs/work.py bodies_for)


@dataclass(frozen=True)
class PickResult:
    campaign_id: str
    variant: str
    decided_now: bool  # False: a decision recorded before stands
    decision: Decision
    job_id: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "variant": self.variant,
            "decided_now": self.decided_now,
            "decision": self.decision.model_dump(mode="json"),
            "job_id": self.job_id,
        }


class VariantPicks:
    """The campaign service's A/B picks (CampaignService inherits them)."""

    _campaigns: CampaignStore
    _scheduler: CampaignScheduler | None
    _clock_ms: Callable[[], int]
    _operator: str
    _jobs: JobService
    _variant_figures: FiguresOf | None

    def pick(self, campaign_id: str, variant: str | None = None, *, reason: str | None = None) -> PickResult:
        """Record the winner (`variant`, or by the figures when None) and send it to the rest."""
        campaign = self._campaigns.get(campaign_id)
        test = campaign.ab_test
        if test is None:
            raise IllegalTransitionError(f"campaign {campaign_id!r} has no A/B test; there is nothing to pick")
        if variant is not None and variant not in test.variants:
            raise InvalidCampaignError(f"variant: {variant!r} is not one of {', '.join(test.variants)}")
        if campaign.state not in PICKABLE:
            raise IllegalTransitionError(
                f"campaign {campaign_id!r} is {campaign.state.value}; a winner is picked once it has sent its test"
            )
        now_ms = self._clock_ms()
        decision = campaign.decision or self._decision(campaign, variant, reason, now_ms)
        recorded = self._campaigns.record_decision(campaign_id, decision)
        if recorded.decision is None:  # pragma: no cover - the store returns the decision that stands
            raise AssertionError(f"campaign {campaign_id!r}: no decision after recording one")
        decided_now = campaign.decision is None and recorded.decision == decision
        job = self._send_the_rest(recorded, decided_now=decided_now)
        logger.info(
            "A/B winner",
            extra={"campaign_id": campaign_id, "variant": recorded.decision.variant, "decided_now": decided_now},
        )
        return PickResult(
            campaign_id=campaign_id,
            variant=recorded.decision.variant,
            decided_now=decided_now,
            decision=recorded.decision,
            job_id=job.job_id if job is not None else None,
        )

    def _decision(self, campaign: Campaign, variant: str | None, reason: str | None, now_ms: int) -> Decision:
        """A new decision (read the figures only then: a recorded one stands without them)."""
        test = campaign.ab_test
        assert test is not None
        figures = dict(self._variant_figures(campaign)) if self._variant_figures is not None else {}
        if variant is None:
            return decide(test, figures, by=self._operator, at_ms=now_ms)
        return Decision(
            variant=variant,
            by=self._operator,
            at_ms=now_ms,
            reason=reason or f"picked by hand by {self._operator}",
            figures={v: figures.get(v, VariantFigures()) for v in test.variants},
        )

    def _send_the_rest(self, campaign: Campaign, *, decided_now: bool) -> Job | None:
        """The republish of the rest, once (its job id is the campaign's): not for a cancelled
        campaign (its cancel closed them) nor a draft."""
        if campaign.state not in PICKABLE:
            return None
        if decided_now and campaign.state is CampaignState.SENDING:
            # As resume: the republished messages stand for every batch still open.
            self._campaigns.reset_open_batches(campaign.campaign_id, 0)
        return self._jobs.start_republish(
            campaign.campaign_id,
            {DeliveryState.PENDING},
            prefix=PICK_PREFIX,
            by=self._operator,
            reason=f"A/B winner {campaign.decision.variant if campaign.decision else '?'}: send it to the rest",
            job_id=f"{campaign.campaign_id}-pick",
        )

    def pick_on_schedule(self, firing: Firing) -> dict[str, Any]:
        """The test's end fired: pick by the figures unless a winner is recorded already (then
        make sure the rest are on their way: the job is started once, whoever asks)."""
        campaign = self._campaigns.get(firing.campaign_id)
        if campaign.ab_test is None or campaign.state not in PICKABLE:
            reason = f"campaign is {campaign.state.value}" if campaign.ab_test else "campaign has no A/B test"
            return {"campaign_id": firing.campaign_id, "picked": False, "reason": reason + "; nothing picked"}
        result = self.pick(firing.campaign_id)
        return {"picked": result.decided_now, "reason": result.decision.reason, **result.as_dict()}

    def _schedule_pick(self, campaign: Campaign, *, start_ms: int | None = None) -> None:
        """An A/B campaign's pick at the test's end, `after` its start (now, or `start_ms` for a
        scheduled one: set by the operator's publish or reschedule, which hold the scheduler, and
        moved with the start). Without a scheduler (or when setting it fails) the operator picks
        by hand; the status says the winner is awaited."""
        if campaign.ab_test is None:
            return
        pick_at_ms = (start_ms if start_ms is not None else self._clock_ms()) + campaign.ab_test.after_s * 1000
        if self._scheduler is None:
            logger.warning(
                "no scheduler: the A/B winner is picked by hand", extra={"campaign_id": campaign.campaign_id}
            )
            return
        try:
            self._scheduler.set_pick(campaign.campaign_id, pick_at_ms)
        except Exception as exc:  # noqa: BLE001 - the send goes on; the pick can be made by hand
            logger.error(
                "the A/B pick's schedule could not be set; pick by hand",
                extra={"campaign_id": campaign.campaign_id, "pick_at": iso(pick_at_ms), "error": type(exc).__name__},
            )
