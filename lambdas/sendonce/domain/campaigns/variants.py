"""A/B variants (issue 33): a campaign of 2-5 variants sends a test share of its recipients one
variant each, then the winner to everyone else.

Which variant a recipient gets is decided once, from its id: `assign` hashes (campaign,
recipient) into two numbers, the first placing it in the test (below `share`) or in the rest,
the second choosing its test variant. Nothing about the campaign's state enters: a replay, a
redrive, a resume or a takeover renders the same variant, and the ledger's claim records it
(the variant is part of the claim's payload hash, so another variant for a claimed recipient
is a conflict, never a second email). A recipient of the rest has no variant until the winner
is recorded (`Decision`, written once); until then the consumer leaves it pending (`HELD`).

The winner (`decide`), by the rate of unique opens (or clicks) per test email sent:
- the highest rate wins; rates are compared exactly (as fractions), not as rounded floats;
- a tie goes to the variant listed first among those tied;
- with fewer than MIN_EVENTS unique opens (or clicks) in all, or a variant sent to nobody,
  the figures say nothing: the first variant (the control) is sent, and the reason says why.
An operator may pick by hand before the scheduled pick (`sendonce campaign pick`); the first
decision recorded stands.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

# At most 8 characters: a variant's figures are numbers named after it in the report's minute
# items (report_data.variant_count), and the fullest such item must stay under 1 KB, one write
# unit a write (tests/integration/test_ab_figures.py: 980 bytes at 8, 1,340 at 32).
VARIANT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,7}$"
VariantId = Annotated[str, Field(pattern=VARIANT_ID_PATTERN)]
FEWEST_VARIANTS, MOST_VARIANTS = 2, 5
# Fewer unique events than this over all variants decide nothing (the control is sent).
MIN_EVENTS = 10
AFTER_LEAST_S, AFTER_MOST_S = 60, 30 * 86_400
_DURATION = re.compile(r"^([1-9][0-9]{0,5})(m|h|d)$")
_UNIT_S = {"m": 60, "h": 3_600, "d": 86_400}
HELD = "held"  # a recipient of the rest while no winner is recorded


def duration_s(value: Any) -> Any:
    """'30m', '4h', '2d' as seconds (an int of seconds passes as is)."""
    if isinstance(value, bool):
        raise ValueError("a duration: 30m, 4h or 2d")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and (match := _DURATION.match(value.strip())):
        return int(match.group(1)) * _UNIT_S[match.group(2)]
    raise ValueError("a duration: a whole number of minutes, hours or days (30m, 4h, 2d)")


class Variant(BaseModel):
    """One variant's subject, and its own bodies where it has them (else the campaign's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: VariantId
    subject: str = Field(min_length=1, max_length=998)
    html: str | None = None
    text: str | None = None


class AbTest(BaseModel):
    """The test: `share` of the recipients (0 < share < 1) get a variant each; after `after_s`
    seconds from the start, the winner by `pick_by` goes to the rest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    variants: tuple[VariantId, ...] = Field(min_length=FEWEST_VARIANTS, max_length=MOST_VARIANTS)
    share: float = Field(gt=0, lt=1)
    pick_by: Literal["opens", "clicks"]
    after_s: Annotated[int, BeforeValidator(duration_s), Field(ge=AFTER_LEAST_S, le=AFTER_MOST_S)]


class VariantFigures(BaseModel):
    """A variant's test emails sent, and their recipients' unique opens and clicks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sent: int = 0
    opened: int = 0
    clicked: int = 0

    def engaged(self, pick_by: str) -> int:
        return self.opened if pick_by == "opens" else self.clicked


class Decision(BaseModel):
    """The winner, recorded once: who or what picked it, when, why, and on what figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    variant: VariantId
    by: str
    at_ms: int
    reason: str
    figures: dict[str, VariantFigures] = Field(default_factory=dict)


def _draws(campaign_id: str, recipient_id: str) -> tuple[float, float]:
    digest = hashlib.sha256(f"sendonce-variant\x00{campaign_id}\x00{recipient_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64, int.from_bytes(digest[8:16], "big") / 2**64


def assign(campaign_id: str, recipient_id: str, test: AbTest) -> str | None:
    """The recipient's test variant, or None when it is one of the rest (it gets the winner)."""
    in_test, which = _draws(campaign_id, recipient_id)
    if in_test >= test.share:
        return None
    return test.variants[min(int(which * len(test.variants)), len(test.variants) - 1)]


def variant_for(campaign_id: str, recipient_id: str, test: AbTest, decision: Decision | None) -> str:
    """The variant the recipient is sent: its test variant, the winner, or HELD (no winner yet)."""
    assigned = assign(campaign_id, recipient_id, test)
    if assigned is not None:
        return assigned
    return decision.variant if decision is not None else HELD


def decide(test: AbTest, figures: Mapping[str, VariantFigures], *, by: str, at_ms: int) -> Decision:
    """The winner by the rules in this module's docstring."""
    figures = {v: figures.get(v, VariantFigures()) for v in test.variants}
    events = sum(f.engaged(test.pick_by) for f in figures.values())
    noun = "opens" if test.pick_by == "opens" else "clicks"
    control = test.variants[0]
    if events < MIN_EVENTS:
        reason = f"too few unique {noun} to decide ({events} < {MIN_EVENTS}): the first variant, the control"
        return Decision(variant=control, by=by, at_ms=at_ms, reason=reason, figures=figures)
    unsent = [v for v, f in figures.items() if f.sent == 0]
    if unsent:
        reason = f"variant(s) {', '.join(unsent)} sent to nobody in the test: the first variant, the control"
        return Decision(variant=control, by=by, at_ms=at_ms, reason=reason, figures=figures)
    best = max(test.variants, key=lambda v: _Rate(figures[v].engaged(test.pick_by), figures[v].sent))
    best_rate = _Rate(figures[best].engaged(test.pick_by), figures[best].sent)
    tied = [v for v in test.variants if _Rate(figures[v].engaged(test.pick_by), figures[v].sent) == best_rate]
    rates = ", ".join(f"{v} {figures[v].engaged(test.pick_by)}/{figures[v].sent}" for v in test.variants)
    reason = f"highest rate of unique {noun} per email sent ({rates})"
    if len(tied) > 1:
        reason += f"; tied with {', '.join(t for t in tied if t != best)}: the one listed first"
    return Decision(variant=tied[0], by=by, at_ms=at_ms, reason=reason, figures=figures)


class _Rate:
    """engaged / sent compared exactly (cross-multiplied)."""

    def __init__(self, engaged: int, sent: int):
        self.engaged, self.sent = engaged, sent

    def __lt__(self, other: _Rate) -> bool:
        return self.engaged * other.sent < other.engaged * self.sent

    def __gt__(self, other: _Rate) -> bool:
        return self.engaged * other.sent > other.engaged * self.sent

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Rate) and self.engaged * other.sent == other.engaged * self.sent

    __hash__ = None  # type: ignore[assignment]


def check_variants(variants: Sequence[Variant]) -> None:
    """Ids unique (raises ValueError naming the repeated one)."""
    seen: set[str] = set()
    for variant in variants:
        if variant.id in seen:
            raise ValueError(f"variant id {variant.id!r} appears twice")
        seen.add(variant.id)
