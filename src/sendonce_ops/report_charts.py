"""The report page's charts (report_page.py): plotly figures built from a CampaignReport,
plain data that the page hands to plotly.js. Each draws aggregates only: at most MAX_POINTS
bars or points per series, whatever the campaign's size."""

from __future__ import annotations

import datetime as dt
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sendonce.domain.campaigns.report import CampaignReport, trouble
from sendonce.domain.campaigns.report_data import FEEDBACK, GROUP_KINDS, OUTCOMES, Bucket, Mark

COLOURS = {
    "sent": "#2e7d32",
    "failed": "#c62828",
    "suppressed": "#6a1b9a",
    "unknown": "#ef6c00",
    "dead_lettered": "#4e342e",
    "cancelled": "#757575",
    "remaining": "#90caf9",
    "delivered": "#2e7d32",
    "bounced": "#c62828",
    "complained": "#ef6c00",
    "duplicates_prevented": "#1565c0",
}
# Stops in red, automatic stops in orange, starts in green; the rest grey.
MARK_COLOURS = {
    "pause": "#c62828",
    "cancel": "#c62828",
    "halt": "#ef6c00",
    "brake": "#ef6c00",
    "publish": "#2e7d32",
    "start": "#2e7d32",
    "resume": "#2e7d32",
    "complete": "#1565c0",
    "pick": "#1565c0",  # an A/B test's winner ("pick B")
}
LABELS = {name: name.replace("_", "-") for name in COLOURS}
ENGAGEMENT_COLOURS = {"opened": "#1565c0", "clicked": "#6a1b9a"}
# An A/B test's variants in their spec's order (at most 5), and the rest who got the winner.
VARIANT_COLOURS = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#c62828")
REST_COLOUR = "#616161"


def _times(buckets: list[Any]) -> list[str]:
    return [dt.datetime.fromtimestamp(b.start_ms / 1000, dt.UTC).isoformat() for b in buckets]


def _layout(**extra: Any) -> dict[str, Any]:
    return {"margin": {"l": 50, "r": 20, "t": 10, "b": 40}, "legend": {"orientation": "h"}, **extra}


def timeline_figure(report: CampaignReport) -> go.Figure:
    x = _times(report.timeline)
    figure = go.Figure(
        [
            go.Bar(
                x=x,
                y=[b.counts.get(outcome, 0) for b in report.timeline],
                name=LABELS[outcome],
                marker_color=COLOURS[outcome],
            )
            for outcome in OUTCOMES
        ]
    )
    shapes, annotations = [], []
    for index, mark in enumerate(report.marks):
        at = _at(mark.at_ms)
        colour = MARK_COLOURS.get(mark.event.split(" ", 1)[0], "#616161")
        shapes.append(
            {
                "type": "line",
                "x0": at,
                "x1": at,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dot", "color": colour},
            }
        )
        annotations.append(
            {
                "x": at,
                "yref": "paper",
                "y": 1,
                "text": mark.event,
                "showarrow": False,
                "yanchor": "bottom",
                "yshift": 14 * (index % 2),  # marks seconds apart stay readable
                "font": {"color": colour},
                "hovertext": _mark_hover(mark),
            }
        )
    xaxis: dict[str, Any] = {"type": "date"}
    times = [b.start_ms for b in report.timeline] + [m.at_ms for m in report.marks]
    if times and not report.timeline:
        # Marks but no bars yet (nothing ended): the axis spans the marks, or plotly has no range.
        xaxis["range"] = [_at(min(times) - 60_000), _at(max(times) + 60_000)]
    figure.update_layout(
        _layout(
            barmode="stack",
            bargap=0.05,
            shapes=shapes,
            annotations=annotations,
            xaxis=xaxis,
            yaxis={"title": "recipients"},
        ),
        margin={"t": 44},
    )
    return figure


def time_range(report: CampaignReport) -> list[str] | None:
    """The span the timeline draws, so that the other time chart lines up with it."""
    starts = [b.start_ms for b in report.timeline] + [m.at_ms for m in report.marks]
    if not starts:
        return None
    return [_at(min(starts) - report.bucket_ms // 2), _at(max(starts) + report.bucket_ms)]


def nothing_to_draw(figure: go.Figure, text: str) -> None:
    """Say so in the middle of an empty chart, instead of empty axes."""
    figure.update_layout(
        xaxis={"visible": False},
        yaxis={"visible": False},
        annotations=[{"text": text, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False}],
    )


def _at(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


def _mark_hover(mark: Mark) -> str:
    return f"{mark.event} by {mark.by or 'unknown'}" + (f": {mark.reason}" if mark.reason else "")


def rates_figure(report: CampaignReport) -> go.Figure:
    """Sends per minute (each bar's sends over its minutes) of this campaign, emphasised, and
    of each other campaign that sent within its minutes, on the timeline's axis."""
    per_minute = report.bucket_ms / 60_000
    # Every bar of the span, for every line, at zero where a campaign sent nothing (a gap is
    # no sends, not a line drawn across it); the others are folded on the timeline's bars.
    starts = [b.start_ms for bs in (report.timeline, *report.others.values()) for b in bs]
    grid = list(range(min(starts), max(starts) + 1, report.bucket_ms)) if starts else []
    x = [_at(ms) for ms in grid]

    def line(campaign_id: str, buckets: list[Bucket], *, own: bool) -> go.Scatter:
        sent = {b.start_ms: b.counts.get("sent", 0) for b in buckets}
        return go.Scatter(
            x=x,
            y=[sent.get(ms, 0) / per_minute for ms in grid],
            name=f"{campaign_id} (this one)" if own else campaign_id,
            mode="lines",
            line={"width": 4, "color": COLOURS["sent"]} if own else {"width": 1.5, "dash": "dot"},
        )

    lines = [line(cid, buckets, own=False) for cid, buckets in report.others.items()]
    # This campaign's line last, on top; alone it would only repeat the timeline.
    figure = go.Figure(lines + [line(report.campaign_id, report.timeline, own=True)] if lines else [])
    figure.update_layout(
        _layout(xaxis={"type": "date", "range": time_range(report)}, yaxis={"title": "sent per minute"})
    )
    if not report.others:
        nothing_to_draw(
            figure,
            "no other campaign sent at the same time" if report.timeline else "nothing sent yet: no rate to compare",
        )
    return figure


def outcomes_figure(report: CampaignReport) -> go.Figure:
    outcomes = {k: v for k, v in report.outcomes.items() if v}
    figure = go.Figure(
        go.Pie(
            labels=[LABELS[k] for k in outcomes],
            values=list(outcomes.values()),
            marker={"colors": [COLOURS[k] for k in outcomes]},
            hole=0.5,
            sort=False,
        )
    )
    figure.update_layout(_layout())
    return figure


def duplicates_figure(report: CampaignReport) -> go.Figure:
    buckets = report.duplicates_prevented
    figure = go.Figure(
        go.Bar(
            x=_times(buckets),
            y=[sum(b.counts.values()) for b in buckets],
            name=LABELS["duplicates_prevented"],
            marker_color=COLOURS["duplicates_prevented"],
            width=[report.bucket_ms * 0.9] * len(buckets),  # ms on a date axis: one bucket wide
        )
    )
    figure.update_layout(
        _layout(xaxis={"type": "date", "range": time_range(report)}, yaxis={"title": "sends not repeated"})
    )
    if not buckets:
        nothing_to_draw(figure, "none: no batch was delivered twice")
    return figure


def feedback_figure(report: CampaignReport) -> go.Figure:
    """Bounces and complaints per mailbox provider; the hover gives each as a share of
    what that provider was sent (delivered + bounced)."""
    domains = list(report.feedback_by_domain)

    def share(domain: str, kind: str) -> str:
        counts = report.feedback_by_domain[domain]
        base = counts.get("delivered", 0) + counts.get("bounced", 0)
        return f"{100 * counts.get(kind, 0) / base:.2f}% of {base:,}" if base else "no deliveries"

    figure = go.Figure(
        [
            go.Bar(
                y=domains,
                x=[report.feedback_by_domain[d].get(kind, 0) for d in domains],
                name=LABELS[kind],
                marker_color=COLOURS[kind],
                orientation="h",
                hovertext=[share(d, kind) for d in domains],
            )
            for kind in FEEDBACK
            if kind != "delivered"
        ]
    )
    figure.update_layout(_layout(barmode="group", yaxis={"autorange": "reversed"}))
    if not any(trouble(counts) for counts in report.feedback_by_domain.values()):
        nothing_to_draw(figure, "no bounce or complaint reported")
    return figure


GROUP_ROWS = {
    "sent": "sent",
    "deferred": "deferred",
    "bounced": "bounced",
    "complained": "complained",
    "held": "held by its cap",
}


def groups_figure(report: CampaignReport) -> go.Figure:
    """One row per kind (GROUP_KINDS), one line per mailbox group, on the timeline's axis:
    per minute, so that a group's sends read against its cap (emails/s x 60)."""
    per_minute = report.bucket_ms / 60_000
    starts = [b.start_ms for buckets in report.groups_over_time.values() for b in buckets]
    grid = list(range(min(starts), max(starts) + 1, report.bucket_ms)) if starts else []
    x = [_at(ms) for ms in grid]
    figure = make_subplots(
        rows=len(GROUP_KINDS), cols=1, shared_xaxes=True, subplot_titles=[GROUP_ROWS[k] for k in GROUP_KINDS]
    )
    palette = ["#1565c0", "#2e7d32", "#6a1b9a", "#ef6c00", "#4e342e", "#00838f", "#757575"]
    for index, (group, buckets) in enumerate(report.groups_over_time.items()):
        counts = {b.start_ms: b.counts for b in buckets}
        for row, kind in enumerate(GROUP_KINDS, start=1):
            figure.add_trace(
                go.Scatter(
                    x=x,
                    y=[counts.get(ms, {}).get(kind, 0) / per_minute for ms in grid],
                    name=group,
                    legendgroup=group,
                    showlegend=row == 1,
                    mode="lines",
                    line={"color": palette[index % len(palette)]},
                ),
                row=row,
                col=1,
            )
    figure.update_layout(_layout(height=640), margin={"t": 30})
    figure.update_yaxes(title_text="per minute", row=1, col=1)
    return figure


def unknowns_figure(report: CampaignReport) -> go.Figure:
    labels = {
        "open": "still unknown",
        "settled_sent": "sent (provider has it)",
        "settled_not_sent": "provably not sent",
    }
    figure = go.Figure(
        go.Bar(
            x=[labels[k] for k in labels],
            y=[report.unknowns[k] for k in labels],
            marker_color=[COLOURS["unknown"], COLOURS["sent"], COLOURS["cancelled"]],
        )
    )
    figure.update_layout(_layout())
    if not any(report.unknowns.values()):
        nothing_to_draw(figure, "no outcome was unknown")
    return figure


def engagement_figure(report: CampaignReport) -> go.Figure:
    """Unique opens and clicks per bar (each recipient's first), on the timeline's axis."""
    buckets = report.engagement_over_time
    figure = go.Figure(
        [
            go.Bar(
                x=_times(buckets),
                y=[b.counts.get(kind, 0) for b in buckets],
                name=f"first {kind}",
                marker_color=ENGAGEMENT_COLOURS[kind],
                width=[report.bucket_ms * 0.45] * len(buckets),
            )
            for kind in (report.engagement or {})
        ]
    )
    figure.update_layout(
        _layout(barmode="group", xaxis={"type": "date", "range": time_range(report)}, yaxis={"title": "recipients"})
    )
    if not buckets:
        nothing_to_draw(figure, "no open or click recorded yet")
    return figure


def variants_figure(report: CampaignReport) -> go.Figure:
    """An A/B campaign's rate per variant over time, the one its pick compares: unique opens
    (or clicks) so far per email sent so far, a line per test variant and one for the rest
    (sent the winner), with the pick marked. Hover gives the counts behind each point."""
    ab = report.variants
    assert ab is not None
    kind, label = ("opened", "unique opens") if ab.test.pick_by == "opens" else ("clicked", "unique clicks")
    starts = sorted({b.start_ms for buckets in report.variants_over_time.values() for b in buckets})
    grid = list(range(starts[0], starts[-1] + 1, report.bucket_ms)) if starts else []
    lines = []
    for index, (key, buckets) in enumerate(report.variants_over_time.items()):
        rest = key == ab.rest.variant
        by_start = {b.start_ms: b.counts for b in buckets}
        sent = engaged = 0
        y: list[float | None] = []
        counts: list[str] = []
        for ms in grid:
            sent += by_start.get(ms, {}).get("sent", 0)
            engaged += by_start.get(ms, {}).get(kind, 0)
            y.append(100 * engaged / sent if sent else None)
            counts.append(f"{engaged:,} {label} of {sent:,} sent")
        lines.append(
            go.Scatter(
                # Each point at its bar's end: the rate by then, so none precedes the sends it counts.
                x=[_at(ms + report.bucket_ms) for ms in grid],
                y=y,
                customdata=counts,
                hovertemplate="%{y:.1f}%: %{customdata}",
                name="the rest (sent the winner)" if rest else key,
                mode="lines+markers",  # a markers too: a variant sent in one bar only is one point
                line=(
                    {"width": 2, "dash": "dot", "color": REST_COLOUR}
                    if rest
                    else {"width": 3, "color": VARIANT_COLOURS[index % len(VARIANT_COLOURS)]}
                ),
            )
        )
    figure = go.Figure(lines)
    # Its own span: the rates go on after the last send, while opens and clicks come in.
    layout = _layout(
        xaxis={"type": "date"},
        yaxis={"title": f"{label} per email sent (%)", "rangemode": "tozero"},
    )
    if ab.decision is not None:
        at = _at(ab.decision.at_ms)
        layout["shapes"] = [
            {"type": "line", "x0": at, "x1": at, "yref": "paper", "y0": 0, "y1": 1, "line": {"dash": "dash"}}
        ]
        layout["annotations"] = [
            {
                "x": at,
                "yref": "paper",
                "y": 1,
                "yanchor": "bottom",
                "showarrow": False,
                "text": f"{ab.decision.variant} picked",
                "hovertext": f"by {ab.decision.by}: {ab.decision.reason}",
            }
        ]
    figure.update_layout(layout, margin={"t": 30})
    if not any(report.variants_over_time.values()):
        nothing_to_draw(figure, "no variant email sent yet")
    return figure
