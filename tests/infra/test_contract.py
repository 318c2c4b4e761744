"""Drift between the template and `sendonce.contract`, read from the synthesized template.

The Lambda code reads its settings from SENDONCE_<FIELD> variables, publishes the metrics
of `contract.Metric`, and the CLI reads the stack outputs of `contract.Output`. Each test
here fails when the construct sets, watches or exports a name the other side does not know,
or leaves out one it needs.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from sendonce import contract
from sendonce.adapters.providers.registry import registered
from sendonce.contract import Metric, Output, env_name
from sendonce.settings import (
    AccountHealthSettings,
    AggregatorSettings,
    ApiSettings,
    ConsumerSettings,
    EventsSettings,
    JobsSettings,
    UnsubscribeSettings,
)
from sendonce_cdk.dashboard import CAMPAIGN_PLACEHOLDER
from sendonce_cdk.metrics import NOT_WATCHED
from sendonce_ops.endpoints import OPTIONAL, SOURCES
from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.infra

# Every function of the stack, by the handler it runs, and the settings model that handler validates.
SETTINGS_BY_HANDLER: dict[str, type[BaseModel]] = {
    "sendonce.handlers.consumer.lambda_handler": ConsumerSettings,
    "sendonce.handlers.api.lambda_handler": ApiSettings,
    "sendonce.handlers.events.lambda_handler": EventsSettings,
    "sendonce.handlers.unsubscribe.lambda_handler": UnsubscribeSettings,
    "sendonce.handlers.aggregator.lambda_handler": AggregatorSettings,
    "sendonce.handlers.scheduled_start.lambda_handler": ApiSettings,
    "sendonce.handlers.jobs.lambda_handler": JobsSettings,
    "sendonce.handlers.account_health.lambda_handler": AccountHealthSettings,
}
API_HANDLER = "sendonce.handlers.api.lambda_handler"
# Read by Powertools, not by the settings models; set on every function.
POWERTOOLS_VARIABLES = {contract.POWERTOOLS_SERVICE_NAME, contract.POWERTOOLS_METRICS_NAMESPACE, contract.LOG_LEVEL}


# --- reading the template -------------------------------------------------------------


def _environments(synth: Synthesized) -> dict[str, dict[str, Any]]:
    """Handler -> the function's environment variables."""
    environments: dict[str, dict[str, Any]] = {}
    for function in synth.of_type("AWS::Lambda::Function").values():
        properties = function["Properties"]
        assert properties["Handler"] not in environments, f"two functions run {properties['Handler']}"
        environments[properties["Handler"]] = properties.get("Environment", {}).get("Variables", {})
    return environments


def _alarm_metrics(synth: Synthesized) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(namespace, metric name, dimensions) of every metric an alarm evaluates, math included."""
    for alarm in synth.of_type("AWS::CloudWatch::Alarm").values():
        properties = alarm["Properties"]
        if "MetricName" in properties:
            dimensions = {d["Name"]: d["Value"] for d in properties.get("Dimensions", [])}
            yield properties["Namespace"], properties["MetricName"], dimensions
        for query in properties.get("Metrics", []):
            if "MetricStat" in query:
                metric = query["MetricStat"]["Metric"]
                dimensions = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
                yield metric["Namespace"], metric["MetricName"], dimensions


def _widget_metrics(synth: Synthesized) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(namespace, metric name, dimensions) of every metric a dashboard widget graphs."""
    for dashboard in synth.of_type("AWS::CloudWatch::Dashboard").values():
        body = dashboard["Properties"]["DashboardBody"]
        # Tokens (region, queue and function names) sit inside JSON strings: any string
        # in their place leaves the body parseable.
        text = (
            body
            if isinstance(body, str)
            else "".join(part if isinstance(part, str) else "<token>" for part in body["Fn::Join"][1])
        )
        for widget in json.loads(text)["widgets"]:
            for row in widget.get("properties", {}).get("metrics", []):
                if isinstance(row[0], dict):
                    continue  # a math expression; the metrics it uses are rows of their own
                namespace, name, *rest = row
                pairs = rest[:-1] if rest and isinstance(rest[-1], dict) else rest
                yield namespace, name, dict(zip(pairs[::2], pairs[1::2], strict=True))


def _custom_metrics(synth: Synthesized) -> list[tuple[str, str, dict[str, Any]]]:
    """The metrics alarms and widgets read outside AWS's own namespaces."""
    found = [m for m in (*_alarm_metrics(synth), *_widget_metrics(synth)) if not m[0].startswith("AWS/")]
    assert found, "no alarm or widget reads a sendonce metric: has the template's shape changed?"
    return found


# --- (a) environment variables are settings fields ---------------------------------------


def test_every_function_runs_a_handler_of_the_bundle(assembly: Synthesized) -> None:
    environments = _environments(assembly)

    assert set(environments) == set(SETTINGS_BY_HANDLER)
    for handler in environments:
        module, attribute = handler.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), attribute, None)), handler


@pytest.mark.parametrize("handler", sorted(SETTINGS_BY_HANDLER))
def test_every_variable_is_a_field_of_the_functions_settings(assembly: Synthesized, handler: str) -> None:
    settings = SETTINGS_BY_HANDLER[handler]
    fields = {env_name(field) for field in settings.model_fields}

    environment = _environments(assembly)[handler]

    unknown = set(environment) - fields - POWERTOOLS_VARIABLES
    # A name the settings do not read is ignored at cold start: the value never arrives.
    assert not unknown, f"{handler} sets variables {settings.__name__} does not read: {sorted(unknown)}"


@pytest.mark.parametrize("handler", sorted(SETTINGS_BY_HANDLER))
def test_every_required_setting_is_set(assembly: Synthesized, handler: str) -> None:
    settings = SETTINGS_BY_HANDLER[handler]
    required = {env_name(field) for field, info in settings.model_fields.items() if info.is_required()}

    environment = _environments(assembly)[handler]

    missing = required - set(environment)
    assert not missing, f"{handler} lacks required {settings.__name__} variables: {sorted(missing)}"


# --- (b) alarms and widgets read the metrics the handlers publish -------------------------


def test_alarms_and_widgets_read_the_namespace_and_service_the_functions_publish_under(
    assembly: Synthesized,
) -> None:
    environments = _environments(assembly).values()
    namespaces = {environment[contract.POWERTOOLS_METRICS_NAMESPACE] for environment in environments}
    services = {environment[contract.POWERTOOLS_SERVICE_NAME] for environment in environments}
    assert (namespaces, services) == ({contract.METRICS_NAMESPACE}, {contract.SERVICE_NAME})

    service = {"service": contract.SERVICE_NAME}
    per_campaign = {**service, contract.METRIC_CAMPAIGN_DIMENSION: CAMPAIGN_PLACEHOLDER}
    for namespace, name, dimensions in _custom_metrics(assembly):
        # Powertools adds the `service` dimension to every metric: without it, an empty series.
        # The per-campaign graphs add the campaign (the dashboard's variable fills it in).
        if dimensions == per_campaign:
            assert name in {metric.value for metric in contract.CAMPAIGN_METRICS}, name
            continue
        assert (namespace, dimensions) == (contract.METRICS_NAMESPACE, service), name


def test_alarms_and_widgets_name_only_published_metrics(assembly: Synthesized) -> None:
    published = {metric.value for metric in Metric}

    referenced = {name for _, name, _ in _custom_metrics(assembly)}

    assert referenced - published == set(), "alarms or widgets read metrics no handler publishes"


def test_every_metric_is_alarmed_graphed_or_deliberately_not(assembly: Synthesized) -> None:
    referenced = {name for _, name, _ in _custom_metrics(assembly)}

    unwatched = {metric for metric in Metric if metric.value not in referenced}

    # Both ways: a new metric nobody watches, and a metric listed as unwatched that now is.
    new = sorted(metric.value for metric in unwatched - set(NOT_WATCHED))
    stale = sorted(metric.value for metric in set(NOT_WATCHED) - unwatched)
    assert not new, f"alarm or graph these, or list them in sendonce_cdk.metrics.NOT_WATCHED: {new}"
    assert not stale, f"watched now: drop them from sendonce_cdk.metrics.NOT_WATCHED: {stale}"


# --- (c) the outputs are the contract's -----------------------------------------------


def test_outputs_are_exactly_the_contracts(assembly: Synthesized) -> None:
    assert set(assembly.template["Outputs"]) == {output.value for output in Output}


def test_the_cli_finds_by_output_what_the_api_function_is_given(assembly: Synthesized) -> None:
    """sendonce_ops.endpoints reads each value from SENDONCE_<FIELD>, else from a stack output:
    both must name the same resource, and the fields must be what ApiSettings needs."""
    environment = _environments(assembly)[API_HANDLER]
    outputs = assembly.template["Outputs"]

    # `counters` is no resource: true wherever the stack runs (its aggregator), read or told.
    # Required from every stack, or optional (the scheduler's three: a stack without them
    # refuses send_at, and older stacks lack them); both as the function is given them.
    assert environment[env_name("counters")] == "true"
    # The providers' rates (a campaign's max_rate may not exceed them): the CLI reads them from
    # the consumer function's environment (ConsumerRates), which holds the same values.
    rates = {f"{p.name}_{f}" for p in registered().values() for f in p.rate_settings.model_fields}
    consumer = _environments(assembly)["sendonce.handlers.consumer.lambda_handler"]
    assert rates and {env_name(f): environment[env_name(f)] for f in rates} == {
        env_name(f): consumer[env_name(f)] for f in rates
    }
    # The Feedback-ID's parts (only the API's previews read them): the CLI previews with the
    # consumer function's environment (sending_settings), which holds the same values.
    feedback = {f for f in ApiSettings.model_fields if f.startswith("feedback_id_")}
    assert feedback and {f: environment.get(env_name(f)) for f in feedback} == {
        f: consumer.get(env_name(f)) for f in feedback
    }
    # The mailbox groups and caps (a campaign's caps must name the groups): the CLI reads the
    # consumer's too (CliContext.service).
    pacing = {"mailbox_groups", "pacing", "warmup"}
    assert {f: environment.get(env_name(f)) for f in pacing} == {f: consumer.get(env_name(f)) for f in pacing}
    given = {**SOURCES, **{f: v for f, v in OPTIONAL.items() if f in ApiSettings.model_fields}}
    assert set(given) == set(ApiSettings.model_fields) - {"counters", "jobs_queue_url"} - rates - feedback - pacing
    for field, (variable, output) in given.items():
        assert outputs[output]["Value"] == environment[variable], field
    for field, (_, output) in OPTIONAL.items():
        assert output in outputs, field
