"""How campaigns sending at once divide one provider's rate (issue 31; docs/fairness.md).

Every consumer that asks the shared limiter for a place says which campaign it sends for
(`Claimant`). The campaigns *sending right now* are those whose consumers asked within the
last moments (the limiter's slot items say who); a paused, cancelled or finished campaign
asks nothing, so its share goes to the others at once (work-conserving). `divide` splits
the rate among them:

- `high` priority first: high campaigns share the rate by weight, each up to its own
  `max_rate`, but leave `NORMAL_FLOOR` of it to the normal campaigns while any is sending
  (nothing starves);
- `normal` campaigns share what is left by weight, each up to its `max_rate`;
- a campaign whose cap leaves part of its share unused passes it to the others of its class
  (water-filling); what the high class leaves goes to the normal one, and what capped normal
  campaigns leave of their floor goes back to the high one.

The result is a rate per campaign, in provider requests per second; `places_in_slot` turns
the fractional rates into whole places per one-second slot, the same in every consumer that
sees the same campaigns sending, each campaign's mean over slots its rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

MAX_WEIGHT = 100
# What normal campaigns keep, together, while a high-priority campaign sends.
NORMAL_FLOOR = 0.10
PRIORITIES = ("normal", "high")
Priority = Literal["normal", "high"]


@dataclass(frozen=True)
class Claimant:
    """A campaign asking for places in a provider's rate, as its spec says it shares."""

    campaign_id: str
    weight: int = 1
    priority: Priority = "normal"
    max_rate: float | None = None

    def encode(self) -> str:
        """As stored in a slot item, so every consumer learns how the others share."""
        cap = "" if self.max_rate is None else f"{self.max_rate:g}"
        return f"{self.weight}:{self.priority}:{cap}"

    @classmethod
    def decode(cls, campaign_id: str, text: str) -> Claimant:
        """A stored claimant; anything unreadable (a later release's format) reads as the default."""
        try:
            weight, priority, cap = text.split(":")
            return cls(
                campaign_id=campaign_id,
                weight=min(MAX_WEIGHT, max(1, int(weight))),
                priority="high" if priority == "high" else "normal",
                max_rate=float(cap) if cap else None,
            )
        except ValueError:
            return cls(campaign_id=campaign_id)


def _fill(budget: float, claimants: list[Claimant]) -> dict[str, float]:
    """Water-filling: `budget` by weight, no claimant above its max_rate; what a capped
    claimant cannot take goes to the others."""
    given: dict[str, float] = {}
    open_ = sorted(claimants, key=lambda c: c.campaign_id)
    while open_ and budget > 1e-9:
        weights = sum(c.weight for c in open_)
        capped = [c for c in open_ if c.max_rate is not None and c.max_rate <= budget * c.weight / weights]
        if not capped:
            for c in open_:
                given[c.campaign_id] = budget * c.weight / weights
            return given
        for c in capped:
            given[c.campaign_id] = float(c.max_rate or 0.0)
            budget -= given[c.campaign_id]
        open_ = [c for c in open_ if c.campaign_id not in given]
    for c in open_:
        given.setdefault(c.campaign_id, 0.0)
    return given


def rate_in_force(limit: float, reserve: float = 0.0, factor: float = 1.0) -> float:
    """The rate the shared limiter paces at: the provider's limit less the reserve (never
    below half the limit), times the throttle factor its "slow down" answers left."""
    return max(limit - reserve, limit / 2) * factor


def divide(rate: float, claimants: Iterable[Claimant]) -> dict[str, float]:
    """Each sending campaign's rate (requests per second) out of `rate`."""
    everyone = {c.campaign_id: c for c in claimants}
    high = [c for c in everyone.values() if c.priority == "high"]
    normal = [c for c in everyone.values() if c.priority != "high"]
    high_budget = rate * (1 - NORMAL_FLOOR) if normal else rate
    first = _fill(high_budget, high) if high else {}
    rest = _fill(rate - sum(first.values()), normal)
    unused = rate - sum(first.values()) - sum(rest.values())
    if high and unused > 1e-9:  # the normal campaigns' caps leave part of their floor
        first = _fill(rate - sum(rest.values()), high)
    return {**first, **rest}


GOLDEN = (math.sqrt(5) - 1) / 2  # a Weyl sequence's step: slot offsets spread evenly over [0, 1)


def places_in_slot(shares: Mapping[str, float], *, slot: int, campaign_id: str) -> int:
    """Whole places for one campaign in one one-second slot, out of every sending campaign's
    fractional rate: systematic rounding over the campaigns in id order with one offset per
    slot, the same in every consumer. Each campaign gets its rate's whole part or one more,
    and in every slot the places given add up to the rates' sum rounded (so two campaigns'
    extra places never meet in a slot with room for one). The offsets are the slots' golden-
    ratio sequence, not a hash: over any n consecutive slots a campaign's places are within
    about log n of n times its rate (a hash's random offsets drift by sqrt n: over 18 slots,
    a 2:1 split came out 45:27)."""
    offset = math.fmod(slot * GOLDEN, 1.0)
    before = 0.0
    for cid in sorted(shares):
        if cid == campaign_id:
            return math.floor(before + shares[cid] + offset) - math.floor(before + offset)
        before += shares[cid]
    return 0


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index of shares: 1 is even, 1/n is one taking everything."""
    xs = [float(v) for v in values]
    if not xs or not any(xs):
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def normalised(shares: Mapping[str, float]) -> dict[str, float]:
    """Shares as fractions of their sum."""
    total = sum(shares.values())
    return {k: (v / total if total else 0.0) for k, v in shares.items()}
