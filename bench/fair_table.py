"""The table `make bench-fair` prints (bench/fair.py gathers the figures)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def behind_line(row: dict[str, Any]) -> str:
    return (
        f"{row['consumers']} consumers, {row['large']:,} + {row['small']:,}: T_alone {_s(row['t_alone_s'])}, "
        f"large {_s(row['large_time_s'])}, small {_s(row['small_time_s'])}, small/large {row['small_over_large']}"
    )


def _counts(campaigns: dict[str, Any]) -> tuple[str, str]:
    duplicates = sum(c["duplicates"] for c in campaigns.values())
    missing = sum(c["missing"] for c in campaigns.values())
    completed = sum(1 for c in campaigns.values() if c["completed"])
    return f"{duplicates} / {missing}", f"{completed}/{len(campaigns)}"


def table(result: dict[str, Any]) -> str:
    config = result["config"]
    lines = [
        f"bench-fair: team limit {config['team_limit']} requests/s (limiter: "
        f"{config['resend_requests_per_second']} configured), consumer batch size {config['consumer_batch_size']}, "
        "small behind large in batch mode, the rounds of shares in single mode (one email a request), "
        "provider events off; times from each campaign's own publish to its last email accepted",
        "",
        "small behind large (goal: small/large <= 0.333)",
    ]
    head = ("consumers", "large", "small", "T_alone", "large", "small", "small/large", "small/T_alone")
    head += ("small waited", "peak in flight", "dup / missing", "completed")
    rows = [head]
    for row in result["small_behind_large"]:
        campaigns = {f"{k}-{r}": v for k, rnd in row["rounds"].items() for r, v in rnd["campaigns"].items()}
        waited = row["small_waited_s"]
        share = row["small_waited_share"]
        peak = max(rnd["peak_in_flight"] for rnd in row["rounds"].values())
        rows.append(
            (
                str(row["consumers"]),
                f"{row['large']:,}",
                f"{row['small']:,}",
                _s(row["t_alone_s"]),
                _s(row["large_time_s"]),
                _s(row["small_time_s"]),
                str(row["small_over_large"]),
                str(row["small_over_t_alone"]),
                f"{_s(waited)} ({share:.0%})" if share is not None else _s(waited),
                str(peak) + ("" if row["noisy_reachable"] else " (never noisy)"),
                *_counts(campaigns),
            )
        )
    lines += _aligned(rows)
    lines += [
        "",
        "equal shares (while every campaign had work queued; Jain: 1 even, 1/n one takes all;",
        "times: each campaign's, in seconds, in publish order)",
    ]
    rows = [("order", "consumers", "window", "all sending", "shares", "Jain", "times", "dup / missing", "completed")]
    for row in result["equal_shares"]:
        rows.append(
            (
                row["order"],
                str(row["round"]["consumers"]),
                _s(row["window_s"]),
                _s(row.get("all_sending_s")),
                " ".join(f"{role} {share:.2f}" for role, share in row["shares"].items() if share is not None),
                str(row["jain"]),
                " ".join(f"{c['time_s']:.0f}" for c in row["round"]["campaigns"].values() if c["time_s"] is not None),
                *_counts(row["round"]["campaigns"]),
            )
        )
    lines += _aligned(rows)
    lines += ["", "weights 2:1 (shares while both sent; goal: heavy/light within 10 % of 2)"]
    rows = [("consumers", "shares", "heavy/light", "met", "times", "dup / missing", "completed")]
    for row in result.get("weighted", []):
        rows.append(
            (
                str(row["round"]["consumers"]),
                " ".join(f"{role} {share:.2f}" for role, share in row["shares"].items() if share is not None),
                str(row["ratio"]),
                "yes" if row["met"] else "no",
                _times(row["round"]),
                *_counts(row["round"]["campaigns"]),
            )
        )
    lines += _aligned(rows)
    lines += ["", "priority: a high-priority campaign published last (goal: its last email first)"]
    rows = [("consumers", "first done", "shares while all sent", "times", "dup / missing", "completed")]
    for row in result.get("priority", []):
        rows.append(
            (
                str(row["round"]["consumers"]),
                str(row["first_done"]),
                " ".join(f"{role} {share:.2f}" for role, share in row["shares"].items() if share is not None),
                _times(row["round"]),
                *_counts(row["round"]["campaigns"]),
            )
        )
    lines += _aligned(rows)
    forecast = result.get("forecast") or {}
    lines += [
        "",
        "campaign forecast's ETA against the measured send, the rounds of shares (forecast / measured - 1;"
        f" goal: within {forecast.get('goal', 0.2):.0%})",
    ]
    rows = [("round", "campaign", "forecast", "measured", "error")]
    for round_ in _rounds(result):
        for role, c in round_["campaigns"].items():
            if c.get("forecast_s") is not None:
                rows.append(
                    (round_["label"], role, _s(c["forecast_s"]), _s(c["last_email_s"]), str(c["forecast_error"]))
                )
    lines += _aligned(rows)
    lines.append(
        f"worst {forecast.get('worst_error')}, mean |error| {forecast.get('mean_abs_error')} over"
        f" {forecast.get('campaigns', 0)} campaigns: {'met' if forecast.get('met') else 'not met'}"
    )
    lines += ["", "the limiter's key (limiter#resend, every slot item): write units per recipient, refused writes too"]
    rows = [("round", "mode", "recipients", "writes", "units / recipient")]
    for round_ in _rounds(result):
        rows.append(
            (
                round_["label"],
                round_["mode"],
                f"{round_['recipients']:,}",
                f"{round_.get('limiter_writes', 0):,}",
                str(round_.get("limiter_write_units_per_recipient")),
            )
        )
    lines += _aligned(rows)
    if result.get("mailbox_groups"):
        lines += ["", "caps per mailbox group (goal: Google's busiest second within 10 % of its cap)"]
        from bench.fair_groups import line

        lines.append(line(result["mailbox_groups"]))
    lines += [f"skipped: {s}" for s in result["skipped"]]
    lines.append(f"elapsed {result['elapsed_s']:.0f} s (deploy {config['deploy_s']:.0f} s)")
    return "\n".join(lines)


def _rounds(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every round of the run, with its mode (the rounds of shares: single) and recipients."""
    found = [(r, "batch") for row in result["small_behind_large"] for r in row["rounds"].values()]
    for scenario in ("equal_shares", "weighted", "priority"):
        found += [(row["round"], "single") for row in result.get(scenario, [])]
    return [
        {**r, "mode": mode, "recipients": sum(c["recipients"] for c in r["campaigns"].values())} for r, mode in found
    ]


def _times(round_: dict[str, Any]) -> str:
    return " ".join(f"{role} {c['time_s']:.0f}" for role, c in round_["campaigns"].items() if c["time_s"] is not None)


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
