"""An A/B campaign's results as its status and its report show them (issue 33): each test
variant's emails sent, unique opens and clicks, and their rates per email sent; the rest's
(who got the winner); and the decision, or that the winner is awaited.

The figures are the report's aggregates (report_data.variant_count), kept without a write of
their own: the aggregator counts a test email sent when its delivery ends `sent`, the events
function a recipient's first open and first click. Reading them is the report's read of its
aggregates (a Query per writer key, whatever the campaign's size), never the ledger's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sendonce.domain.campaigns.ports import ReportAggregatesStore
from sendonce.domain.campaigns.report_data import REST
from sendonce.domain.campaigns.variants import AbTest, Decision, VariantFigures
from sendonce.domain.models import Campaign


def rate(engaged: int, sent: int) -> float | None:
    """Unique opens (or clicks) per email sent; None before any was sent."""
    return engaged / sent if sent else None


@dataclass(frozen=True)
class VariantResult:
    """One test variant's figures (or the rest's: `variant` is REST)."""

    variant: str
    figures: VariantFigures

    @property
    def open_rate(self) -> float | None:
        return rate(self.figures.opened, self.figures.sent)

    @property
    def click_rate(self) -> float | None:
        return rate(self.figures.clicked, self.figures.sent)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.figures.model_dump(),
            "open_rate": self.open_rate,
            "click_rate": self.click_rate,
        }


@dataclass(frozen=True)
class AbResults:
    """The test, its variants' figures in its order, the rest's, and the decision (None:
    the winner is awaited). `counted`: False where no figures are kept (shown as zeros)."""

    campaign_id: str
    test: AbTest
    variants: tuple[VariantResult, ...]
    rest: VariantResult
    decision: Decision | None
    counted: bool = True

    @property
    def awaiting_winner(self) -> bool:
        return self.decision is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "variants": {v.variant: v.as_dict() for v in self.variants},
            "rest": self.rest.as_dict(),
            "pick_by": self.test.pick_by,
            "share": self.test.share,
            "after_s": self.test.after_s,
            "awaiting_winner": self.awaiting_winner,
            "decision": self.decision.model_dump(mode="json") if self.decision is not None else None,
            "counted": self.counted,
        }


def ab_results(campaign: Any, figures: Mapping[str, VariantFigures] | None) -> AbResults | None:
    """The results of `campaign`'s A/B test from its figures (test variants by id, the rest
    under REST; None: none kept); None for a campaign without a test."""
    test = getattr(campaign, "ab_test", None)
    if test is None:
        return None
    found = figures or {}
    return AbResults(
        campaign_id=campaign.campaign_id,
        test=test,
        variants=tuple(VariantResult(v, found.get(v, VariantFigures())) for v in test.variants),
        rest=VariantResult(REST, found.get(REST, VariantFigures())),
        decision=getattr(campaign, "decision", None),
        counted=figures is not None,
    )


def variant_figures_of(aggregates: ReportAggregatesStore) -> Callable[[Campaign], Mapping[str, VariantFigures]]:
    """A campaign's figures per variant from its report aggregates (the pick's
    picks.FiguresOf): the test's variants by id, and the rest under REST, which a pick does
    not read (`decide` reads the test's variants only). One read of the aggregates a call."""
    return lambda campaign: aggregates.aggregates(campaign.campaign_id).variants
