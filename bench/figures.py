"""The figures a run reports, from its phases: rates, spans, DynamoDB requests and capacity
units per recipient, item sizes, and the goals they are held to. Ratios and counts only."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

from bench.phases import Phase


def steady_rate(times: list[float], trim: float = 0.1) -> float | None:
    """Sends per second over the middle of the run: the first and last `trim` of the
    acceptances (ramp-up, the last messages' tail) are left out."""
    times = sorted(times)
    k = int(len(times) * trim)
    window = times[k : len(times) - k]
    if len(window) < 3 or window[-1] <= window[0]:
        return None
    return (len(window) - 1) / (window[-1] - window[0])


def accept_span(phase: Phase) -> float:
    """Seconds from the first email accepted to the last."""
    return phase.accepted_times[-1] - phase.accepted_times[0] if len(phase.accepted_times) > 1 else 0.0


def busiest_second(times: list[float]) -> int:
    """The most acceptances in any sliding one-second window."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= 1.0:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def per_recipient(phase: Phase, categories: tuple[str, ...] | None = None) -> float:
    assert phase.log is not None
    return round(phase.log.total(categories) / phase.campaign.recipients, 4)


def units_per_recipient(phase: Phase, categories: tuple[str, ...]) -> dict[str, float]:
    assert phase.log is not None
    units = phase.log.units(lambda table, key: phase.sizes.get((table, key)))
    write = sum(units.get(c, {}).get("write", 0.0) for c in categories)
    read = sum(units.get(c, {}).get("read", 0.0) for c in categories)
    n = phase.campaign.recipients
    return {"write": round(write / n, 4), "read": round(read / n, 4)}


def ledger_item_bytes(phase: Phase, ledger_table: str) -> dict[str, int]:
    sizes = sorted(s for (table, _), s in phase.sizes.items() if table == ledger_table)
    if not sizes:
        return {}
    return {"p50": int(statistics.median(sizes)), "max": sizes[-1]}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def _by_purpose(phase: Phase) -> dict[str, float]:
    assert phase.log is not None
    n = phase.campaign.recipients
    out = {category: round(count / n, 4) for category, count in phase.log.counts().items()}
    out["total"] = round(phase.log.total() / n, 4)
    return out


def _record_bytes(phase: Phase, campaigns_table: str, prefix: str) -> int | None:
    """The largest campaigns-table item of a kind: send groups and batch records hold a
    whole message's recipients."""
    sizes = [s for (table, (_, sk)), s in phase.sizes.items() if table == campaigns_table and sk.startswith(prefix)]
    return max(sizes) if sizes else None


def goals(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    def goal(value: float | None, target: str, met: Callable[[float], bool]) -> dict[str, Any]:
        return {"value": value, "goal": target, "met": bool(value is not None and met(value))}

    return {
        "rate_ratio": goal(result["rate_ratio"], ">= 0.95", lambda v: v >= 0.95),
        "ledger_overhead_ratio": goal(result["ledger_overhead_ratio"], "<= 1.05", lambda v: v <= 1.05),
        "ledger_overhead_ratio_unthrottled": goal(
            result["ledger_overhead_ratio_unthrottled"], "<= 1.05", lambda v: v <= 1.05
        ),
        "default_team_429s": goal(result.get("default_team_429s"), "== 0", lambda v: v == 0),
        "default_team_batch_vs_one_by_one_ratio": goal(
            result.get("default_team_batch_vs_one_by_one_ratio"), "<= 0.125", lambda v: v <= 0.125
        ),
    }
