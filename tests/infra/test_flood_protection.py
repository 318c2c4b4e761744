"""Flood protection (issue 13, finding 6): every public route is throttled, and every
function's concurrency is reserved so that a flood on the public API cannot take the
consumer's capacity (docs/operations.md#flood-protection)."""

from __future__ import annotations

from typing import Any

import pytest

from sendonce_cdk.config import LAMBDA_MIN_UNRESERVED
from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.infra

CONSUMER_HANDLER = "sendonce.handlers.consumer.lambda_handler"
API_HANDLER = "sendonce.handlers.api.lambda_handler"
EVENTS_HANDLER = "sendonce.handlers.events.lambda_handler"
UNSUBSCRIBE_HANDLER = "sendonce.handlers.unsubscribe.lambda_handler"
AGGREGATOR_HANDLER = "sendonce.handlers.aggregator.lambda_handler"
ACCOUNT_HEALTH_HANDLER = "sendonce.handlers.account_health.lambda_handler"
UNSUBSCRIBE_ROUTES = {"GET /u/{token}", "POST /u/{token}"}
WEBHOOK_ROUTE = "POST /webhooks/resend"


def _ref(value: dict[str, Any]) -> str:
    return value["Ref"] if "Ref" in value else value["Fn::GetAtt"][0]


def _function(synth: Synthesized, handler: str) -> dict[str, Any]:
    [properties] = [
        r["Properties"]
        for r in synth.of_type("AWS::Lambda::Function").values()
        if r["Properties"]["Handler"] == handler
    ]
    return properties


def _public_api_id(synth: Synthesized) -> str:
    [api_id] = {
        _ref(r["Properties"]["ApiId"])
        for r in synth.of_type("AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["RouteKey"] in UNSUBSCRIBE_ROUTES
    }
    return api_id


def _public_routes(synth: Synthesized) -> set[str]:
    api_id = _public_api_id(synth)
    return {
        r["Properties"]["RouteKey"]
        for r in synth.of_type("AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["ApiId"] == {"Ref": api_id}
    }


def _public_stage(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    api_id = _public_api_id(synth)
    [(stage_id, stage)] = [
        (k, s)
        for k, s in synth.of_type("AWS::ApiGatewayV2::Stage").items()
        if s["Properties"]["ApiId"] == {"Ref": api_id}
    ]
    return stage_id, stage


# --- throttling ------------------------------------------------------------------------


def test_every_public_route_is_throttled_with_its_context_limits(assembly: Synthesized) -> None:
    config = assembly.config
    routes = _public_routes(assembly)
    settings = _public_stage(assembly)[1]["Properties"]["RouteSettings"]

    # Every route has its own limits, and no setting names a route that does not exist
    # (API Gateway refuses the stage then).
    assert set(settings) == routes
    assert WEBHOOK_ROUTE in routes if ("resend" in config.providers) else WEBHOOK_ROUTE not in routes
    for route in routes:
        if route == WEBHOOK_ROUTE:
            expected = (config.webhook_rate_limit, config.webhook_burst_limit)
        else:
            expected = (config.unsubscribe_rate_limit, config.unsubscribe_burst_limit)
        assert (settings[route]["ThrottlingRateLimit"], settings[route]["ThrottlingBurstLimit"]) == expected, route


def test_default_unsubscribe_throttle(default_assembly: Synthesized) -> None:
    settings = _public_stage(default_assembly)[1]["Properties"]["RouteSettings"]
    for route in UNSUBSCRIBE_ROUTES:
        assert settings[route] == {"ThrottlingRateLimit": 50, "ThrottlingBurstLimit": 100}


def test_webhook_route_throttle_from_context(full_assembly: Synthesized) -> None:
    # FULL_CONTEXT passes them as `-c` strings.
    settings = _public_stage(full_assembly)[1]["Properties"]["RouteSettings"]
    assert settings[WEBHOOK_ROUTE] == {"ThrottlingRateLimit": 300, "ThrottlingBurstLimit": 600}
    assert settings["POST /u/{token}"] == {"ThrottlingRateLimit": 20, "ThrottlingBurstLimit": 40}


def test_public_stage_waits_for_every_throttled_route(assembly: Synthesized) -> None:
    # A stage's RouteSettings may only name routes that already exist.
    stage_id, stage = _public_stage(assembly)
    api_id = _public_api_id(assembly)
    route_ids = {
        k
        for k, r in assembly.of_type("AWS::ApiGatewayV2::Route").items()
        if r["Properties"]["ApiId"] == {"Ref": api_id}
    }
    assert route_ids <= set(stage.get("DependsOn", [])), stage_id


# --- reserved concurrency -------------------------------------------------------------


def _reserved(synth: Synthesized) -> dict[str, int | None]:
    return {
        handler: _function(synth, handler).get("ReservedConcurrentExecutions")
        for handler in (
            CONSUMER_HANDLER,
            API_HANDLER,
            EVENTS_HANDLER,
            UNSUBSCRIBE_HANDLER,
            AGGREGATOR_HANDLER,
            ACCOUNT_HEALTH_HANDLER,
        )
    }


def test_every_function_has_reserved_concurrency(assembly: Synthesized) -> None:
    config = assembly.config
    assert _reserved(assembly) == {
        CONSUMER_HANDLER: config.consumer_reserved_concurrency,
        API_HANDLER: config.api_reserved_concurrency,
        EVENTS_HANDLER: config.events_reserved_concurrency,
        UNSUBSCRIBE_HANDLER: config.unsubscribe_reserved_concurrency,
        AGGREGATOR_HANDLER: config.aggregator_reserved_concurrency,
        ACCOUNT_HEALTH_HANDLER: config.account_health_reserved_concurrency,
    }


def test_the_consumer_reserves_exactly_what_its_event_source_may_run(assembly: Synthesized) -> None:
    # Less would throttle the event source; more would hold capacity it never uses.
    consumers = {
        i
        for i, f in assembly.of_type("AWS::Lambda::Function").items()
        if f["Properties"]["Handler"] == CONSUMER_HANDLER
    }
    [mapping] = [
        m
        for m in assembly.of_type("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"].get("Ref") in consumers
    ]
    maximum = mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"]
    assert _function(assembly, CONSUMER_HANDLER)["ReservedConcurrentExecutions"] == maximum


def test_every_sqs_event_source_is_capped_at_its_functions_reservation(assembly: Synthesized) -> None:
    # AWS's guidance: MaximumConcurrency at or below the function's reserved concurrency, else
    # throttled invocations return messages and count their receives toward the DLQ (issue 35).
    queues = set(assembly.of_type("AWS::SQS::Queue"))
    functions = assembly.of_type("AWS::Lambda::Function")
    sqs_mappings = [
        m["Properties"]
        for m in assembly.of_type("AWS::Lambda::EventSourceMapping").values()
        if (m["Properties"].get("EventSourceArn") or {}).get("Fn::GetAtt", [None])[0] in queues
    ]
    assert len(sqs_mappings) >= 2  # the campaign queue's consumer and the jobs worker at least
    for mapping in sqs_mappings:
        function = functions[mapping["FunctionName"]["Ref"]]["Properties"]
        maximum = (mapping.get("ScalingConfig") or {}).get("MaximumConcurrency")
        assert maximum is not None, f"{function['Handler']}: its SQS event source has no MaximumConcurrency"
        assert maximum <= function["ReservedConcurrentExecutions"], function["Handler"]


def test_reservations_leave_lambdas_unreserved_minimum(assembly: Synthesized) -> None:
    total = sum(v for v in _reserved(assembly).values() if v is not None)
    assert total <= assembly.config.account_concurrency - LAMBDA_MIN_UNRESERVED


def test_default_reservations(default_assembly: Synthesized, full_assembly: Synthesized) -> None:
    # Consumer: MaximumConcurrency (2; 7 at 200/s). Events: ceil(send_rate x 3 x 0.05 x 2),
    # at least 10 (10; 60 at 200/s). Unsubscribe and the operator API: 10 (5 and 4 from
    # FULL_CONTEXT).
    assert _reserved(default_assembly) == {
        CONSUMER_HANDLER: 2,
        API_HANDLER: 10,
        EVENTS_HANDLER: 10,
        UNSUBSCRIBE_HANDLER: 10,
        AGGREGATOR_HANDLER: 10,
        ACCOUNT_HEALTH_HANDLER: 1,
    }
    assert _reserved(full_assembly) == {
        CONSUMER_HANDLER: 7,
        API_HANDLER: 4,
        EVENTS_HANDLER: 60,
        UNSUBSCRIBE_HANDLER: 5,
        AGGREGATOR_HANDLER: 10,
        ACCOUNT_HEALTH_HANDLER: 1,
    }
