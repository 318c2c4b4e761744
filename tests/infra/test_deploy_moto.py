"""The real CDK CLI deploys the app into moto's server, and `deploy_to_moto` (in-process
synthesis, no CLI) does too.

Runs `cdk bootstrap` and `cdk deploy --method=direct` (moto does not apply a change
set's outputs) from node_modules against a moto server of its own, then reads back
with boto3 what CloudFormation created. moto's CloudFormation skips alarms,
topic/queue policies and subscriptions, the HTTP APIs (`AWS::ApiGatewayV2::*`), the SES
configuration set and its event destination, and the events function's
`EventInvokeConfig`; its Lambda ignores `Architectures`: those are checked on the
template (test_stack.py) and, for the architecture, on the deployed template. The
`ApiUrl` and `PublicApiUrl` outputs are built from the HTTP APIs' Refs, which moto
resolves to None: they deploy, but read `https://None.execute-api...`.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from sendonce import contract
from sendonce.contract import Output, env_name
from sendonce_local.deploy import FAKE_CREDENTIALS, cdk_env, context_args, deploy_to_moto, run_cdk, synthesize
from sendonce_local.moto_server import ENDPOINT_ENV, MotoServer
from tests.infra.synthesis import REPO_ROOT

pytestmark = [pytest.mark.infra, pytest.mark.timeout(240)]

REGION = "us-east-1"
CLI_STACK = "Sendonce"
CLI_CONTEXT = {"provider": "ses,resend", "unsubscribe_base_url": "https://unsubscribe.example.com"}
LOCAL_STACK = "SendonceLocal"


@dataclass
class Deployed:
    outputs: dict[str, str]
    seconds: float
    assembly: Path


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    # A server of its own, even when SENDONCE_MOTO_ENDPOINT names a shared one: the
    # bootstrap and stack names here are fixed.
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ENDPOINT_ENV, raising=False)
        server = MotoServer()
    with server:
        yield server.endpoint


@pytest.fixture(scope="module")
def aws(moto_endpoint: str) -> Any:
    session = boto3.session.Session(region_name=REGION, **FAKE_CREDENTIALS)
    return lambda service: session.client(service, endpoint_url=moto_endpoint)


@pytest.fixture(scope="module")
def bootstrapped(moto_endpoint: str, aws: Any, tmp_path_factory: pytest.TempPathFactory) -> float:
    account = aws("sts").get_caller_identity()["Account"]
    started = time.monotonic()
    # Its own --output: the CLI locks the cloud assembly directory it synthesizes into, and
    # another test's CLI may be synthesizing into the repository's cdk.out at the same time.
    output = tmp_path_factory.mktemp("bootstrap") / "cdk.out"
    run_cdk(
        ["bootstrap", f"aws://{account}/{REGION}", "--output", str(output)],
        env=cdk_env(moto_endpoint),
        project_dir=REPO_ROOT,
    )
    return time.monotonic() - started


@pytest.fixture(scope="module")
def cli_deployed(moto_endpoint: str, bootstrapped: float, tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    workdir = tmp_path_factory.mktemp("cdk-deploy")
    outputs_file = workdir / "outputs.json"
    started = time.monotonic()
    run_cdk(
        [
            "deploy", CLI_STACK,
            "--require-approval", "never",
            "--method=direct",
            "--output", str(workdir / "cdk.out"),
            "--outputs-file", str(outputs_file),
            *context_args(CLI_CONTEXT),
        ],
        env=cdk_env(moto_endpoint),
        project_dir=REPO_ROOT,
    )  # fmt: skip
    seconds = time.monotonic() - started
    return Deployed(
        outputs=json.loads(outputs_file.read_text())[CLI_STACK], seconds=seconds, assembly=workdir / "cdk.out"
    )


def _stack_outputs(aws: Any, stack_name: str) -> dict[str, str]:
    stack = aws("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def test_cli_deploy_outputs_have_stable_names(cli_deployed: Deployed, aws: Any) -> None:
    assert set(cli_deployed.outputs) == set(Output)
    assert _stack_outputs(aws, CLI_STACK) == cli_deployed.outputs


def test_cli_deploy_queues_with_redrive(cli_deployed: Deployed, aws: Any) -> None:
    sqs = aws("sqs")
    outputs = cli_deployed.outputs

    source = sqs.get_queue_attributes(QueueUrl=outputs[Output.QUEUE_URL], AttributeNames=["All"])["Attributes"]
    dead_letter = sqs.get_queue_attributes(QueueUrl=outputs[Output.DEAD_LETTER_QUEUE_URL], AttributeNames=["All"])[
        "Attributes"
    ]

    redrive = json.loads(source["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == outputs[Output.DEAD_LETTER_QUEUE_ARN]
    assert int(redrive["maxReceiveCount"]) == 5
    assert source["QueueArn"] == outputs[Output.QUEUE_ARN]
    assert int(source["VisibilityTimeout"]) == 1080
    assert int(source["MessageRetentionPeriod"]) < int(dead_letter["MessageRetentionPeriod"]) == 14 * 24 * 3600


def _functions_by_handler(aws: Any, stack_name: str) -> dict[str, dict[str, Any]]:
    resources = aws("cloudformation").describe_stack_resources(StackName=stack_name)["StackResources"]
    functions = [
        aws("lambda").get_function_configuration(FunctionName=r["PhysicalResourceId"])
        for r in resources
        if r.get("ResourceType") == "AWS::Lambda::Function"
    ]
    return {f["Handler"]: f for f in functions}


def test_cli_deploy_tables(cli_deployed: Deployed, aws: Any) -> None:
    dynamodb = aws("dynamodb")

    ledger = dynamodb.describe_table(TableName=cli_deployed.outputs[Output.LEDGER_TABLE_NAME])["Table"]
    campaigns = dynamodb.describe_table(TableName=cli_deployed.outputs[Output.CAMPAIGNS_TABLE_NAME])["Table"]

    assert ledger["KeySchema"] == [
        {"AttributeName": "campaign_id", "KeyType": "HASH"},
        {"AttributeName": "recipient_id", "KeyType": "RANGE"},
    ]
    assert campaigns["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert ledger["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    suppressions = dynamodb.describe_table(TableName=cli_deployed.outputs[Output.SUPPRESSIONS_TABLE_NAME])["Table"]
    assert suppressions["KeySchema"] == [{"AttributeName": "fp", "KeyType": "HASH"}]


def test_cli_deploy_function_configuration(cli_deployed: Deployed, aws: Any) -> None:
    outputs = cli_deployed.outputs

    function = aws("lambda").get_function_configuration(FunctionName=outputs[Output.CONSUMER_FUNCTION_NAME])

    assert function["Handler"] == "sendonce.handlers.consumer.lambda_handler"
    assert function["Runtime"] == "python3.12"
    assert function["Timeout"] == 180
    assert function["MemorySize"] == 512
    environment = function["Environment"]["Variables"]
    assert environment[env_name("ledger_table")] == outputs[Output.LEDGER_TABLE_NAME]
    assert environment[env_name("campaigns_table")] == outputs[Output.CAMPAIGNS_TABLE_NAME]
    assert environment[env_name("dead_letter_queue_url")] == outputs[Output.DEAD_LETTER_QUEUE_URL]
    assert environment[env_name("resend_api_key_secret")] == "sendonce/resend-api-key"
    assert environment[env_name("max_receive_count")] == "5"
    assert environment[contract.POWERTOOLS_SERVICE_NAME] == contract.SERVICE_NAME
    assert environment[env_name("suppressions_table")] == outputs[Output.SUPPRESSIONS_TABLE_NAME]
    assert environment[env_name("unsubscribe_key_secret")] == "sendonce/unsubscribe-key"
    assert environment[env_name("unsubscribe_base_url")] == CLI_CONTEXT["unsubscribe_base_url"]
    # The stack's configuration set, by its literal name (moto skips the set itself).
    assert environment[env_name("ses_configuration_set")] == f"{CLI_STACK}-events"


def test_cli_deploy_deliverability_and_api_functions(cli_deployed: Deployed, aws: Any) -> None:
    outputs = cli_deployed.outputs

    functions = _functions_by_handler(aws, CLI_STACK)

    assert set(functions) == {
        "sendonce.handlers.consumer.lambda_handler",
        "sendonce.handlers.api.lambda_handler",
        "sendonce.handlers.events.lambda_handler",
        "sendonce.handlers.unsubscribe.lambda_handler",
        "sendonce.handlers.aggregator.lambda_handler",
        "sendonce.handlers.scheduled_start.lambda_handler",
        "sendonce.handlers.jobs.lambda_handler",
        "sendonce.handlers.account_health.lambda_handler",
    }
    jobs = functions["sendonce.handlers.jobs.lambda_handler"]["Environment"]["Variables"]
    assert jobs[env_name("queue_url")] == outputs[Output.QUEUE_URL]
    aggregator = functions["sendonce.handlers.aggregator.lambda_handler"]["Environment"]["Variables"]
    assert aggregator[env_name("campaigns_table")] == outputs[Output.CAMPAIGNS_TABLE_NAME]
    events = functions["sendonce.handlers.events.lambda_handler"]
    assert events["FunctionName"] == outputs[Output.EVENTS_FUNCTION_NAME]
    expected = {
        env_name("ledger_table"): outputs[Output.LEDGER_TABLE_NAME],
        env_name("campaigns_table"): outputs[Output.CAMPAIGNS_TABLE_NAME],
        env_name("suppressions_table"): outputs[Output.SUPPRESSIONS_TABLE_NAME],
        env_name("resend_webhook_secret"): "sendonce/resend-webhook-secret",
    }
    variables = events["Environment"]["Variables"]
    assert {name: variables.get(name) for name in expected} == expected
    unsubscribe = functions["sendonce.handlers.unsubscribe.lambda_handler"]["Environment"]["Variables"]
    assert unsubscribe[env_name("suppressions_table")] == outputs[Output.SUPPRESSIONS_TABLE_NAME]
    assert unsubscribe[env_name("unsubscribe_key_secret")] == "sendonce/unsubscribe-key"
    assert unsubscribe[env_name("ledger_table")] == outputs[Output.LEDGER_TABLE_NAME]
    api = functions["sendonce.handlers.api.lambda_handler"]["Environment"]["Variables"]
    assert api[env_name("queue_url")] == outputs[Output.QUEUE_URL]
    assert api[env_name("dead_letter_queue_url")] == outputs[Output.DEAD_LETTER_QUEUE_URL]
    assert api[env_name("ledger_table")] == outputs[Output.LEDGER_TABLE_NAME]
    assert api[env_name("campaigns_table")] == outputs[Output.CAMPAIGNS_TABLE_NAME]


def test_cli_deploy_reserves_concurrency_for_every_function(cli_deployed: Deployed, aws: Any) -> None:
    # Defaults: the consumer's MaximumConcurrency (2), events 10, unsubscribe 10, API 10,
    # the counters' aggregator 10, the jobs worker 5, the SES account health check 1; the
    # scheduled start reserves nothing.
    functions = _functions_by_handler(aws, CLI_STACK)

    reserved = {
        handler: aws("lambda")
        .get_function_concurrency(FunctionName=f["FunctionName"])
        .get("ReservedConcurrentExecutions")
        for handler, f in functions.items()
    }

    assert {handler: None if value is None else int(value) for handler, value in reserved.items()} == {
        "sendonce.handlers.consumer.lambda_handler": 2,
        "sendonce.handlers.api.lambda_handler": 10,
        "sendonce.handlers.events.lambda_handler": 10,
        "sendonce.handlers.unsubscribe.lambda_handler": 10,
        "sendonce.handlers.aggregator.lambda_handler": 10,
        "sendonce.handlers.scheduled_start.lambda_handler": None,
        "sendonce.handlers.jobs.lambda_handler": 5,
        "sendonce.handlers.account_health.lambda_handler": 1,
    }


def test_cli_deploy_ses_events_rule_targets_the_events_function(cli_deployed: Deployed, aws: Any) -> None:
    events_name = cli_deployed.outputs[Output.EVENTS_FUNCTION_NAME]
    events_function = aws("lambda").get_function_configuration(FunctionName=events_name)

    [rule_name] = aws("events").list_rule_names_by_target(TargetArn=events_function["FunctionArn"])["RuleNames"]

    pattern = json.loads(aws("events").describe_rule(Name=rule_name)["EventPattern"])
    assert pattern["source"] == ["aws.ses"]
    assert pattern["detail"]["mail"]["tags"]["ses:configuration-set"] == [
        f"{CLI_STACK}-events",
        f"{CLI_STACK}-events-tracked",
    ]


def test_cli_deploy_checks_the_ses_account_every_five_minutes(cli_deployed: Deployed, aws: Any) -> None:
    functions = _functions_by_handler(aws, CLI_STACK)
    check = functions["sendonce.handlers.account_health.lambda_handler"]

    [rule_name] = aws("events").list_rule_names_by_target(TargetArn=check["FunctionArn"])["RuleNames"]

    assert aws("events").describe_rule(Name=rule_name)["ScheduleExpression"] == "rate(5 minutes)"
    variables = check["Environment"]["Variables"]
    assert variables[env_name("campaigns_table")] == cli_deployed.outputs[Output.CAMPAIGNS_TABLE_NAME]
    assert variables[env_name("provider")] == "ses"


def test_cli_deploy_api_urls_are_placeholders_in_moto(cli_deployed: Deployed) -> None:
    # moto creates no HTTP API, so the Refs the URLs are built from resolve to None; the
    # deploy still completes. test_stack.py checks the URLs and routes on the template.
    for output in (Output.API_URL, Output.PUBLIC_API_URL):
        assert cli_deployed.outputs[output] == "https://None.execute-api.us-east-1.amazonaws.com/"


def test_cli_deploy_function_is_arm64_in_the_deployed_template(cli_deployed: Deployed, aws: Any) -> None:
    # moto's Lambda drops Architectures (reports x86_64); the template it was given says arm64.
    body = aws("cloudformation").get_template(StackName=CLI_STACK)["TemplateBody"]
    template = body if isinstance(body, dict) else json.loads(body)
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    # consumer, operator API, events, unsubscribe, counters, scheduled start, jobs, SES account health
    assert len(functions) == 8
    assert all(f["Properties"]["Architectures"] == ["arm64"] for f in functions)


def test_cli_deploy_event_source_mapping(cli_deployed: Deployed, aws: Any) -> None:
    outputs = cli_deployed.outputs

    mappings = aws("lambda").list_event_source_mappings(FunctionName=outputs[Output.CONSUMER_FUNCTION_NAME])

    [mapping] = mappings["EventSourceMappings"]
    assert mapping["EventSourceArn"] == outputs[Output.QUEUE_ARN]
    assert mapping["BatchSize"] == 1
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 2}


def test_cli_deploy_on_call_topic_is_encrypted(cli_deployed: Deployed, aws: Any) -> None:
    # moto's CloudFormation skips AWS::SNS::Subscription; test_stack.py checks those.
    attributes = aws("sns").get_topic_attributes(TopicArn=cli_deployed.outputs[Output.ON_CALL_TOPIC_ARN])["Attributes"]
    assert attributes.get("KmsMasterKeyId")


def _without_cdk_metadata(template_file: Path) -> dict[str, Any]:
    # The CLI asks the app for path, asset and version metadata (aws:cdk:* context); nothing else differs.
    template = json.loads(template_file.read_text())
    template["Resources"] = {
        name: {k: v for k, v in resource.items() if k != "Metadata"}
        for name, resource in template["Resources"].items()
        if resource["Type"] != "AWS::CDK::Metadata"
    }
    conditions = template.pop("Conditions", {})
    conditions.pop("CDKMetadataAvailable", None)
    if conditions:
        template["Conditions"] = conditions
    return template


def test_in_process_synthesis_is_the_cli_synthesis(cli_deployed: Deployed, tmp_path: Path) -> None:
    # Same app, same feature flags (they travel with infra/sendonce_infra/, not cdk.json), same context rules.
    synthesize(tmp_path / "cdk.out", context=CLI_CONTEXT)

    in_process = _without_cdk_metadata(tmp_path / "cdk.out" / f"{CLI_STACK}.template.json")
    assert in_process == _without_cdk_metadata(cli_deployed.assembly / f"{CLI_STACK}.template.json")


def test_deploy_to_moto_returns_the_outputs_and_parks_the_event_source(
    moto_endpoint: str, bootstrapped: float, cli_deployed: Deployed, aws: Any
) -> None:
    # After the CLI deploy: the assets bucket and bootstrap parameter already exist.
    started = time.monotonic()
    outputs = deploy_to_moto(moto_endpoint, context={"stack_name": LOCAL_STACK, "provider": "resend"})
    seconds = time.monotonic() - started

    assert set(outputs) == set(Output)
    assert outputs == _stack_outputs(aws, LOCAL_STACK)
    function = aws("lambda").get_function_configuration(FunctionName=outputs[Output.CONSUMER_FUNCTION_NAME])
    assert function["Environment"]["Variables"][env_name("ledger_table")] == outputs[Output.LEDGER_TABLE_NAME]
    assert env_name("resend_api_key_secret") in function["Environment"]["Variables"]
    # No unsubscribe_base_url in this context: no List-Unsubscribe, so no key either.
    assert env_name("unsubscribe_base_url") not in function["Environment"]["Variables"]
    assert env_name("ses_configuration_set") not in function["Environment"]["Variables"]  # Resend only
    # Resend only: no SES configuration set or SES events rule, and the webhook route is there.
    body = aws("cloudformation").get_template(StackName=LOCAL_STACK)["TemplateBody"]
    template = body if isinstance(body, dict) else json.loads(body)
    types = {r["Type"] for r in template["Resources"].values()}
    assert not types & {"AWS::SES::ConfigurationSet", "AWS::Events::Rule"}
    route_keys = {
        r["Properties"]["RouteKey"] for r in template["Resources"].values() if r["Type"] == "AWS::ApiGatewayV2::Route"
    }
    assert "POST /webhooks/resend" in route_keys
    [mapping] = aws("lambda").list_event_source_mappings(FunctionName=outputs[Output.CONSUMER_FUNCTION_NAME])[
        "EventSourceMappings"
    ]
    # moto would otherwise receive messages for a function it cannot run.
    assert mapping["State"] == "Disabled"
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    print(
        f"\ncdk bootstrap {bootstrapped:.1f} s, cdk deploy {cli_deployed.seconds:.1f} s (synth included),"
        f" deploy_to_moto {seconds:.1f} s (synth included)"
    )


def test_sendonce_local_api_over_a_deployed_stack_answers_the_newer_routes_as_documented(
    cli_deployed: Deployed, moto_endpoint: str, aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: `sendonce local api` read the stack for its operator service, but preview, test
    sends and the status's test sends from its own environment, which names no table: each of
    these requests was a 500. Now they use what the CLI read of the stack (the consumer
    function's settings, the campaigns table), and each answers as the document says."""
    from rich.console import Console

    from sendonce_local.commands import api_handler
    from sendonce_ops.cli_context import Cli
    from tests.integration.operator_helpers import api_event, lambda_context

    for name in [n for n in os.environ if n.startswith(contract.ENV_PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in {**FAKE_CREDENTIALS, "aws_default_region": REGION}.items():
        monkeypatch.setenv(name.upper(), value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    # The secrets an operator puts in Secrets Manager after deploying (docs/deploy.md).
    function = _functions_by_handler(aws, CLI_STACK)["sendonce.handlers.consumer.lambda_handler"]
    for name, value in function["Environment"]["Variables"].items():
        if name.endswith("_SECRET") and name.startswith(contract.ENV_PREFIX):
            # 32 random bytes, urlsafe base64: an unsubscribe key's form, and a fine API key here.
            aws("secretsmanager").create_secret(
                Name=value, SecretString=base64.urlsafe_b64encode(os.urandom(32)).decode()
            )
    handler = api_handler(Cli(stack=CLI_STACK, operator_name="issue-36", out=Console(), err=Console()))

    def call(method: str, path: str, body: Any = None) -> tuple[int, dict]:
        answer = handler(api_event(method, path, body), lambda_context())
        return answer["statusCode"], json.loads(answer["body"])

    spec = {"id": "0", "name": "n", "subject": "s", "from": "a@b.example", "html": "<p>x</p>", "provider": "resend"}
    assert call("POST", "/campaigns", spec)[0] == 201
    status = call("GET", "/campaigns/0/delivery-status")
    preview = call("POST", "/campaigns/0/preview", [None, None])
    test_send = call("POST", "/campaigns/0/test-sends", {"include_suppressed": 0, "to": ["0@0.0"], "variables": {}})
    plain_preview = call("POST", "/campaigns/0/preview")
    # A forecast reads the stack's suppression list (its output), as the deployed function does
    forecast = call("POST", "/campaigns/0/forecast", {"recipients": [{"recipient_id": "r", "email": "r@gmail.com"}]})

    assert status[0] == 200 and status[1]["state"] == "draft" and status[1]["test_sends"] == {"count": 0, "recent": []}
    assert preview == (422, preview[1]) and preview[1]["detail"][0]["loc"] == ["body"]
    assert test_send[0] == 422 and test_send[1]["detail"][0]["loc"] == ["body", "include_suppressed"]
    assert plain_preview[0] == 200 and plain_preview[1]["subject"] == "s"
    assert forecast[0] == 200 and forecast[1]["suppressions_checked"] is True and forecast[1]["audience"] == 1
