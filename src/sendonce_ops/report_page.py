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

import jinja2
from plotly.offline import get_plotlyjs

from sendonce.domain.campaigns.report import CampaignReport
from sendonce.domain.campaigns.report_data import GROUP_KINDS
from sendonce.domain.deliverability.engagement import ESTIMATE_NOTE
from sendonce.domain.deliverability.warmup import REASON_PREFIX
from sendonce_ops.report_charts import (
    duplicates_figure,
    engagement_figure,
    feedback_figure,
    groups_figure,
    outcomes_figure,
    rates_figure,
    timeline_figure,
    unknowns_figure,
    variants_figure,
)

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
<div class="chart" id="variants-over-time"></div>
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


def warmup_pauses(report: CampaignReport) -> int:
    """The campaign's pauses by a warm-up cap (their reasons start `warm-up:`)."""
    return sum(1 for m in report.marks if m.event == "window_close" and (m.reason or "").startswith(REASON_PREFIX))


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
    if report.variants is not None:
        charts["variants-over-time"] = variants_figure(report)
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
