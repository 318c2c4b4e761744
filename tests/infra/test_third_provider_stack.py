"""The construct deploys a provider defined entirely in a test (tests/third_provider.py):
its settings, secrets, grants and webhook route come from its registration, with cdk-nag
passing; the runtime half of the proof is tests/integration/test_third_provider.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.synthesis import Synthesized, feature_flags
from tests.infra.test_stack import CONSUMER_HANDLER, EVENTS_HANDLER, _function, _function_environment, _statements
from tests.third_provider import NAME, cdk_stack

pytestmark = pytest.mark.infra


def _synthesize(tmp_path_factory: pytest.TempPathFactory, providers: list[str]) -> Synthesized:
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_
    from cdk_nag import AwsSolutionsChecks

    from sendonce_cdk import SendOnce
    from sendonce_cdk.providers.registry import registered

    outdir = tmp_path_factory.mktemp("cdk-third-provider")
    app = cdk.App(context=feature_flags(), outdir=str(outdir))
    stack = cdk.Stack(app, "Shop", stack_name="Shop")
    mail = SendOnce(
        stack,
        "Mail",
        providers=providers,
        sender_domain="mail.shop.example",
        provider_registry=registered([cdk_stack()]),
        standin_api_url="https://api.standin.shop.example",
        # No bundling: this test reads the template only.
        code=lambda_.Code.from_inline("def lambda_handler(event, context):\n    return None\n"),
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    template = app.synth().get_stack_by_name("Shop").template
    return Synthesized(context={}, outdir=outdir, template=template, config=mail.config)


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return _synthesize(tmp_path_factory, ["ses", NAME])


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return _synthesize(tmp_path_factory, [NAME])


def _secret_reads(synth: Synthesized, handler: str) -> list[str]:
    return [
        json.dumps(s["Resource"]) for s in _statements(synth, handler) if s["Action"] == "secretsmanager:GetSecretValue"
    ]


def _routes(synth: Synthesized) -> set[str]:
    return {r["Properties"]["RouteKey"] for r in synth.of_type("AWS::ApiGatewayV2::Route").values()}


@pytest.mark.parametrize("which", ["both", "alone"])
def test_the_third_providers_settings_secrets_and_webhook_route_come_from_its_registration(
    which: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(which)
    consumer, events = _function_environment(synth, CONSUMER_HANDLER), _function_environment(synth, EVENTS_HANDLER)

    assert consumer["SENDONCE_STANDIN_API_URL"] == "https://api.standin.shop.example"
    assert consumer["SENDONCE_STANDIN_API_KEY_SECRET"] == "sendonce/standin-api-key"
    assert events["SENDONCE_STANDIN_WEBHOOK_SECRET"] == "sendonce/standin-webhook-secret"
    assert any(":secret:sendonce/standin-api-key-??????" in r for r in _secret_reads(synth, CONSUMER_HANDLER))
    assert any(":secret:sendonce/standin-webhook-secret-??????" in r for r in _secret_reads(synth, EVENTS_HANDLER))
    assert f"POST /webhooks/{NAME}" in _routes(synth)
    assert "Stand-in webhooks" in _function(synth, EVENTS_HANDLER)[1]["Description"]


def test_alone_it_brings_no_other_providers_resources(alone: Synthesized) -> None:
    actions = json.dumps([s["Action"] for s in _statements(alone, CONSUMER_HANDLER)])

    assert "ses:" not in actions
    assert not alone.of_type("AWS::SES::ConfigurationSet") and not alone.of_type("AWS::Events::Rule")
    assert _routes(alone) & {"POST /webhooks/resend"} == set()
    assert "SENDONCE_RESEND_API_KEY_SECRET" not in _function_environment(alone, CONSUMER_HANDLER)


def test_beside_ses_both_get_what_they_need(both: Synthesized) -> None:
    actions: list[Any] = [s["Action"] for s in _statements(both, CONSUMER_HANDLER)]

    assert "ses:SendEmail" in actions
    assert both.of_type("AWS::SES::ConfigurationSet") and both.of_type("AWS::Events::Rule")
