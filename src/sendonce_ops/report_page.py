"""`sendonce campaign report ID --out FILE`: one self-contained HTML page of a campaign.

Charts are drawn by plotly.js, inlined once into the page from the `plotly` package
(`plotly.offline.get_plotlyjs()`), so the page opens with no network at all: no CDN, no
fonts, no MathJax. Why plotly: it ships its JavaScript inside a PyPI package (nothing to
vendor or download at run time), draws stacked bars, donuts and annotated time axes with
hover, zoom and a legend that hides series, and its figures are plain data, so the page
carries aggregates only (domain/campaigns/report.py: at most MAX_POINTS bars, whatever the
campaign's size). The page is ~4.7 MB, almost all of it plotly.js.

Every figure the page prints carries `data-figure="<name>"` (the report's `figures()`), which
is what its browser test reads back.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import jinja2
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from sendonce.domain.campaigns.report import CampaignReport, trouble
from sendonce.domain.campaigns.report_data import FEEDBACK, GROUP_KINDS, OUTCOMES, Bucket, Mark
from sendonce.domain.deliverability.engagement import ESTIMATE_NOTE
from sendonce.domain.deliverability.warmup import REASON_PREFIX

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
}
LABELS = {name: name.replace("_", "-") for name in COLOURS}
ENGAGEMENT_COLOURS = {"opened": "#1565c0", "clicked": "#6a1b9a"}
CONFIG = {"displaylogo": False, "responsive": True}

PAGE = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
    """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:">
<title>sendonce · {{ r.name }} ({{ r.campaign_id }})</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #212121; }
h1 { font-size: 1.5rem; margin-bottom: .25rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
.meta { color: #616161; } .figures { display: flex; flex-wrap: wrap; gap: .75rem; margin: 1rem 0; }
.figure { border: 1px solid #e0e0e0; border-radius: .5rem; padding: .5rem .9rem; min-width: 7rem; }
.figure b { display: block; font-size: 1.4rem; } .figure span { color: #616161; font-size: .85rem; }
.note { background: #fff8e1; border-left: 4px solid #ffb300; padding: .5rem .9rem; }
.verdict-ok { border-left-color: #2e7d32; background: #e8f5e9; }
#marks { border-collapse: collapse; font-size: .85rem; margin-top: .5rem; }
#marks td, #marks th { border-bottom: 1px solid #e0e0e0; padding: .2rem .8rem .2rem 0; text-align: left; }
.chart { min-height: 320px; } .tall { min-height: 640px; }
#group-totals { border-collapse: collapse; font-size: .85rem; } #group-totals td, #group-totals th { padding: .2rem .8rem .2rem 0; text-align: right; } .row { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
#variants { border-collapse: collapse; font-size: .85rem; } #variants td, #variants th { border-bottom: 1px solid #e0e0e0; padding: .2rem .8rem .2rem 0; text-align: right; } #variants td:first-child, #variants th:first-child { text-align: left; } #variants .winner td { font-weight: bold; }
</style>
<script>{{ plotly_js | safe }}</script>
</head>
<body>
<h1>{{ r.name }}</h1>
<p class="meta">Campaign <code>{{ r.campaign_id }}</code> · {{ r.provider }}, {{ r.delivery_mode }} mode ·
state <b data-figure="state">{{ r.status.state.value }}</b>{% if r.status.state_reason %} ({{ r.status.state_reason }}){% endif %}
· subject “{{ r.subject or "" }}” · generated {{ generated }}</p>
<div class="figures">
{% for name, value in figures.items() %}<div class="figure"><b data-figure="{{ name }}">{{ "{:,}".format(value) }}</b><span>{{ name | replace("_", " ") }}</span></div>
{% endfor %}</div>
<h2>Sends over time ({{ bucket_label }} per bar)</h2>
<div class="chart" id="timeline"></div>
{% if r.marks %}<table id="marks"><thead><tr><th>when</th><th>move</th><th>by</th><th>why</th></tr></thead><tbody>
{% for m in r.marks %}<tr><td>{{ when(m.at_ms) }}</td><td>{{ m.event }}</td><td>{{ m.by or "" }}</td><td>{{ m.reason or "" }}</td></tr>
{% endfor %}</tbody></table>{% endif %}
<h2>Rate beside the other campaigns sending at the time</h2>
<div class="chart" id="rates"></div>
{% if r.others_left_out %}<p class="note" id="others-left-out">{{ r.others_left_out }} more campaign{{ "s" if r.others_left_out > 1 else "" }}
may have sent at the time too: not drawn (only the most recently created are).</p>{% endif %}
<div class="row">
<div><h2>Outcomes</h2><div class="chart" id="outcomes"></div></div>
<div><h2>Duplicates prevented</h2><div class="chart" id="duplicates"></div></div>
</div>
<div class="row">
<div><h2>Bounces and complaints by mailbox provider</h2><div class="chart" id="feedback"></div>
{% if r.feedback_by_group %}<table id="groups"><thead><tr><th>group</th><th>delivered</th><th>bounced</th><th>complained</th></tr></thead><tbody>
{% for group, counts in r.feedback_by_group.items() %}<tr><td>{{ group }}</td>{% for kind in ("delivered", "bounced", "complained") %}<td data-group="{{ group }}-{{ kind }}">{{ "{:,}".format(counts.get(kind, 0)) }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>{% endif %}</div>
<div><h2>Unknown outcomes and how they ended</h2><div class="chart" id="unknowns"></div></div>
</div>
<h2>By mailbox-provider group over time ({{ bucket_label }} per point)</h2>
{% if held_back %}<p class="note" id="held-back">A group's cap held the campaign back:
{% for group, n in held_back.items() %}<span data-held="{{ group }}">{{ "{:,}".format(n) }}</span> emails to {{ group }}{{ "," if not loop.last else "" }}
{% endfor %}waited for a later second (the “held” row says when).{% if warmup_pauses %} The warm-up cap paused it
{{ warmup_pauses }} time{{ "s" if warmup_pauses > 1 else "" }} (the moves above say until when).{% endif %}</p>
{% elif warmup_pauses %}<p class="note" id="held-back">The warm-up cap paused the campaign {{ warmup_pauses }}
time{{ "s" if warmup_pauses > 1 else "" }} (the moves above say until when); no group's cap held it back.</p>{% endif %}
{% if group_totals %}<div class="chart tall" id="groups-over-time"></div>
<table id="group-totals"><thead><tr><th>group</th>{% for kind in group_kinds %}<th>{{ kind }}</th>{% endfor %}</tr></thead><tbody>
{% for group, counts in group_totals.items() %}<tr><td>{{ group }}</td>{% for kind in group_kinds %}<td data-group-total="{{ group }}-{{ kind }}">{{ "{:,}".format(counts.get(kind, 0)) }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
{% else %}<p class="note" id="groups-over-time">Nothing counted per group yet (deliveries claimed before groups were kept are not).</p>{% endif %}
<h2>Opens and clicks</h2>
{% if r.engagement is none %}<p class="note" id="engagement">Not shown: {{ r.engagement_off_reason }}.</p>
{% else %}<p class="note" id="engagement-note">{% for kind, n in r.engagement.items() %}<span data-engagement="{{ kind }}">{{ "{:,}".format(n) }}</span>
recipients {{ kind }}{% if r.status.sent %} ({{ "%.1f" | format(100 * n / r.status.sent) }}% of those sent){% endif %}{{ "; " if not loop.last else "." }}
{% endfor %}Each recipient counts once, in the minute of their first. {% if "opened" in r.engagement %}Note: {{ estimate }}.{% endif %}</p>
<div class="chart" id="engagement"></div>{% endif %}
{% if r.variants %}{% set ab = r.variants %}<h2>Variants</h2>
<table id="variants"><thead><tr><th>variant</th><th>sent</th><th>unique opens</th><th>open rate</th><th>clicks</th><th>click rate</th></tr></thead><tbody>
{% for v in ab.variants + (ab.rest,) %}<tr{% if ab.decision and ab.decision.variant == v.variant %} class="winner"{% endif %}>
<td>{% if v is sameas ab.rest %}the rest (sent the winner){% else %}{{ v.variant }}{% if ab.decision and ab.decision.variant == v.variant %} (winner){% endif %}{% endif %}</td>
{% set key = "rest" if v is sameas ab.rest else v.variant %}<td data-variant="{{ key }}-sent">{{ "{:,}".format(v.figures.sent) }}</td>
<td data-variant="{{ key }}-opened">{{ "{:,}".format(v.figures.opened) }}</td><td>{{ percent(v.open_rate) }}</td>
<td data-variant="{{ key }}-clicked">{{ "{:,}".format(v.figures.clicked) }}</td><td>{{ percent(v.click_rate) }}</td></tr>
{% endfor %}</tbody></table>
{% if ab.decision %}<p class="note verdict-ok" id="decision">Winner <b data-winner="{{ ab.decision.variant }}">{{ ab.decision.variant }}</b>,
picked by {{ ab.decision.by }} at {{ when(ab.decision.at_ms) }}: {{ ab.decision.reason }}.</p>
{% else %}<p class="note" id="decision">Awaiting the winner: the test sends {{ "%g" | format(100 * ab.test.share) }}% of the recipients
a variant each; {{ duration(ab.test.after_s) }} after the start, the highest rate of unique {{ ab.test.pick_by }} per email sent wins
(or an operator picks: <code>sendonce campaign pick {{ r.campaign_id }} VARIANT</code>), and the rest are sent it.</p>{% endif %}
<p class="meta" id="variants-note">A variant's figures are its test emails alone; the rest's, those sent the winner. Rates are per email sent{% if r.engagement is none %};
this campaign tracks neither opens nor clicks: its figures pick no winner (the control is sent, unless an operator picks){% elif "opened" in r.engagement %}; opens are an estimate (above){% endif %}.</p>{% endif %}
<h2>Audit against the provider's records</h2>
{% if r.audit %}<p class="note {% if not r.audit.duplicates %}verdict-ok{% endif %}" id="audit">{{ r.audit.verdict }}
(<span data-figure="audit_duplicates">{{ r.audit.duplicates }}</span> duplicates,
{{ r.audit.differences }} differences; {{ audit_at }})</p>
{% else %}<p class="note" id="audit">No audit yet: run <code>sendonce campaign audit {{ r.campaign_id }}</code>
inside the provider's retention window.</p>{% endif %}
<script>
const figures = {{ charts | safe }};
for (const [id, figure] of Object.entries(figures)) {
  Plotly.newPlot(id, figure.data, figure.layout, {{ config | safe }});
}
</script>
</body>
</html>
"""
)


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _when(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _percent(rate: float | None) -> str:
    return "–" if rate is None else f"{100 * rate:.1f}%"


def _duration(seconds: int) -> str:
    """An A/B test's duration as a spec writes it (variants.duration_s: 30m, 4h, 2d), else in seconds."""
    units = (("d", 86_400), ("h", 3_600), ("m", 60))
    return next((f"{seconds // n}{unit}" for unit, n in units if seconds % n == 0), f"{seconds}s")


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
        colour = MARK_COLOURS.get(mark.event, "#616161")
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


def warmup_pauses(report: CampaignReport) -> int:
    """The campaign's pauses by a warm-up cap (their reasons start `warm-up:`)."""
    return sum(1 for m in report.marks if m.event == "window_close" and (m.reason or "").startswith(REASON_PREFIX))


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


def render(report: CampaignReport) -> str:
    """The page, as one string of HTML."""
    charts = {
        "timeline": timeline_figure(report),
        "rates": rates_figure(report),
        "outcomes": outcomes_figure(report),
        "duplicates": duplicates_figure(report),
        "feedback": feedback_figure(report),
        "unknowns": unknowns_figure(report),
    }
    if report.engagement is not None:
        charts["engagement"] = engagement_figure(report)
    if report.groups_over_time:
        charts["groups-over-time"] = groups_figure(report)
    minutes = report.bucket_ms // 60_000
    chart_json = "{" + ",".join(f"{json.dumps(k)}:{figure.to_json()}" for k, figure in charts.items()) + "}"
    chart_json = chart_json.replace("</", "<\\/")  # no string in the data can close the script
    return PAGE.render(
        r=report,
        figures=report.figures(),
        generated=_iso(report.generated_at_ms),
        when=_when,
        audit_at=_iso(report.audit.at_ms) if report.audit else "",
        bucket_label="1 minute" if minutes == 1 else f"{minutes} minutes",
        plotly_js=get_plotlyjs(),
        charts=chart_json,
        config=json.dumps(CONFIG),
        held_back=report.held_back(),
        warmup_pauses=warmup_pauses(report),
        group_totals=report.group_totals(),
        group_kinds=GROUP_KINDS,
        estimate=ESTIMATE_NOTE,
        percent=_percent,
        duration=_duration,
    )


def write(report: CampaignReport, path: Path) -> Path:
    path.write_text(render(report), encoding="utf-8")
    return path
