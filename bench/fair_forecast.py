"""The forecast's ETA against the measured send (issue 32, item 5), in bench-fair's rounds of
shares: before the consumers start, each campaign of the round is forecast as `campaign
forecast` would forecast it if it were published while the round's other campaigns send (each
with all of its recipients left), at the rate the shared limiter paces the provider at then;
its measured time is from the consumers' start to its last email accepted.

Only the rounds of shares count (single mode: one email a request, so the rate binds, which is
what the forecast models); in batch mode the consumers' own pace binds first (bench-fair's
small-behind-large rounds: 2,000 recipients in 18 s at 5 requests/s would forecast 4 s)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sendonce.domain.campaigns.forecast import Sharer, Sharing, claimant_of, sending_s
from sendonce.domain.models import Campaign

GOAL = 0.20  # issue 32: the ETA within 20 % of the measured send time


def forecast_s(
    campaigns: Sequence[Campaign], sizes: Mapping[str, int], rate: float, batch_size: int
) -> dict[str, float | None]:
    """Campaign id -> seconds of sending forecast from the start, the others of the round sharing."""

    def requests(campaign: Campaign) -> int:
        per_request = min(batch_size, 100) if campaign.delivery_mode == "batch" else 1
        return math.ceil(sizes[campaign.campaign_id] / per_request)

    found: dict[str, float | None] = {}
    for campaign in campaigns:
        others = tuple(Sharer(claimant_of(o), requests(o)) for o in campaigns if o.campaign_id != campaign.campaign_id)
        found[campaign.campaign_id] = sending_s(campaign, requests(campaign), Sharing(rate=rate, others=others))
    return found


def error(forecast: float | None, measured: float | None) -> float | None:
    """forecast / measured - 1 (None when either is unknown)."""
    if forecast is None or not measured:
        return None
    return round(forecast / measured - 1, 3)


def summary(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The largest error over the rounds' campaigns, and whether it is within the goal."""
    errors = [
        c["forecast_error"] for r in rounds for c in r["campaigns"].values() if c.get("forecast_error") is not None
    ]
    worst = max(errors, key=abs) if errors else None
    return {
        "campaigns": len(errors),
        "worst_error": worst,
        "mean_abs_error": round(sum(abs(e) for e in errors) / len(errors), 3) if errors else None,
        "goal": GOAL,
        "met": worst is not None and abs(worst) <= GOAL,
    }
