"""The dashboard's per-campaign view, read from the synthesized template: its `campaign`
variable lists the campaigns that publish per-campaign metrics, its graphs of one campaign
name that variable's placeholder, and its SEARCH graphs find every campaign's series, all
of metrics the handlers publish with a campaign dimension (contract.CAMPAIGN_METRICS)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sendonce import contract
from sendonce_cdk.dashboard import CAMPAIGN_PLACEHOLDER, CAMPAIGN_SCHEMA
from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.infra

PER_CAMPAIGN = {metric.value for metric in contract.CAMPAIGN_METRICS}


def body(synth: Synthesized) -> dict[str, Any]:
    _, dashboard = synth.only("AWS::CloudWatch::Dashboard")
    raw = dashboard["Properties"]["DashboardBody"]
    # Tokens (region, names) sit inside JSON strings: any string in their place parses.
    text = raw if isinstance(raw, str) else "".join(p if isinstance(p, str) else "<token>" for p in raw["Fn::Join"][1])
    return json.loads(text)


def rows(widget: dict[str, Any]) -> list[list[Any]]:
    return widget.get("properties", {}).get("metrics", [])


def test_the_campaign_variable_lists_the_campaigns_that_publish_and_replaces_the_placeholder(
    assembly: Synthesized,
) -> None:
    (variable,) = body(assembly)["variables"]

    assert (variable["type"], variable["pattern"], variable["inputType"]) == ("pattern", CAMPAIGN_PLACEHOLDER, "select")
    search = variable["search"]
    assert search.startswith(CAMPAIGN_SCHEMA) and f'MetricName="{contract.Metric.EMAILS_SENT.value}"' in search
    assert variable["populateFrom"] == contract.METRIC_CAMPAIGN_DIMENSION


def test_one_campaigns_graphs_show_every_per_campaign_metric_of_the_chosen_campaign(assembly: Synthesized) -> None:
    shown: set[str] = set()
    for widget in body(assembly)["widgets"]:
        for row in rows(widget):
            if CAMPAIGN_PLACEHOLDER in row:
                namespace, name, *pairs = row[:-1] if isinstance(row[-1], dict) else row
                assert namespace == contract.METRICS_NAMESPACE
                assert dict(zip(pairs[::2], pairs[1::2], strict=True)) == {
                    contract.METRIC_SERVICE_DIMENSION: contract.SERVICE_NAME,
                    contract.METRIC_CAMPAIGN_DIMENSION: CAMPAIGN_PLACEHOLDER,
                }
                shown.add(name)

    assert shown == PER_CAMPAIGN


def test_every_campaign_graphs_search_the_per_campaign_series_of_published_metrics(assembly: Synthesized) -> None:
    searched: set[str] = set()
    for widget in body(assembly)["widgets"]:
        for row in rows(widget):
            expression = row[0].get("expression", "") if row and isinstance(row[0], dict) else ""
            if expression.startswith("SEARCH("):
                assert f"SEARCH('{CAMPAIGN_SCHEMA} " in expression, expression
                searched.update(re.findall(r'MetricName="(\w+)"', expression))

    assert searched == PER_CAMPAIGN
