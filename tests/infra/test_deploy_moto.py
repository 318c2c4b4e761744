"""The real CDK CLI deploys the app into moto's server, and `deploy_to_moto` does too.

Runs `cdk bootstrap` and `cdk deploy --method=direct` (moto does not apply a change
set's outputs) from node_modules against a moto server of its own, then reads back
with boto3 what CloudFormation created. moto's CloudFormation skips alarms and
topic/queue policies and subscriptions, and its Lambda ignores `Architectures`: those are checked on
the template (test_stack.py) and, for the architecture, on the deployed template.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from infra.deploy_local import FAKE_CREDENTIALS, cdk_env, context_args, deploy_to_moto, run_cdk
from infra.stack import OUTPUT_NAMES
from sendonce_ops.local.moto_server import ENDPOINT_ENV, MotoServer

pytestmark = [pytest.mark.infra, pytest.mark.timeout(240)]

REGION = "us-east-1"
CLI_STACK = "Sendonce"
CLI_CONTEXT = {"provider": "ses,resend"}
LOCAL_STACK = "SendonceLocal"


@dataclass
class Deployed:
    outputs: dict[str, str]
    seconds: float


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
def bootstrapped(moto_endpoint: str, aws: Any) -> float:
    account = aws("sts").get_caller_identity()["Account"]
    started = time.monotonic()
    run_cdk(["bootstrap", f"aws://{account}/{REGION}"], env=cdk_env(moto_endpoint))
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
    )  # fmt: skip
    seconds = time.monotonic() - started
    return Deployed(outputs=json.loads(outputs_file.read_text())[CLI_STACK], seconds=seconds)


def _stack_outputs(aws: Any, stack_name: str) -> dict[str, str]:
    stack = aws("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def test_cli_deploy_outputs_have_stable_names(cli_deployed: Deployed, aws: Any) -> None:
    assert set(cli_deployed.outputs) == set(OUTPUT_NAMES)
    assert _stack_outputs(aws, CLI_STACK) == cli_deployed.outputs


def test_cli_deploy_queues_with_redrive(cli_deployed: Deployed, aws: Any) -> None:
    sqs = aws("sqs")
    outputs = cli_deployed.outputs

    source = sqs.get_queue_attributes(QueueUrl=outputs["QueueUrl"], AttributeNames=["All"])["Attributes"]
    dead_letter = sqs.get_queue_attributes(QueueUrl=outputs["DeadLetterQueueUrl"], AttributeNames=["All"])["Attributes"]

    redrive = json.loads(source["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == outputs["DeadLetterQueueArn"]
    assert int(redrive["maxReceiveCount"]) == 5
    assert source["QueueArn"] == outputs["QueueArn"]
    assert int(source["VisibilityTimeout"]) == 1080
    assert int(source["MessageRetentionPeriod"]) < int(dead_letter["MessageRetentionPeriod"]) == 14 * 24 * 3600


def test_cli_deploy_tables(cli_deployed: Deployed, aws: Any) -> None:
    dynamodb = aws("dynamodb")

    ledger = dynamodb.describe_table(TableName=cli_deployed.outputs["LedgerTableName"])["Table"]
    campaigns = dynamodb.describe_table(TableName=cli_deployed.outputs["CampaignsTableName"])["Table"]

    assert ledger["KeySchema"] == [
        {"AttributeName": "campaign_id", "KeyType": "HASH"},
        {"AttributeName": "recipient_id", "KeyType": "RANGE"},
    ]
    assert campaigns["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert ledger["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_cli_deploy_function_configuration(cli_deployed: Deployed, aws: Any) -> None:
    outputs = cli_deployed.outputs

    function = aws("lambda").get_function_configuration(FunctionName=outputs["ConsumerFunctionName"])

    assert function["Handler"] == "sendonce.handlers.consumer.lambda_handler"
    assert function["Runtime"] == "python3.12"
    assert function["Timeout"] == 180
    assert function["MemorySize"] == 512
    environment = function["Environment"]["Variables"]
    assert environment["SENDONCE_LEDGER_TABLE"] == outputs["LedgerTableName"]
    assert environment["SENDONCE_CAMPAIGNS_TABLE"] == outputs["CampaignsTableName"]
    assert environment["SENDONCE_DEAD_LETTER_QUEUE_URL"] == outputs["DeadLetterQueueUrl"]
    assert environment["SENDONCE_RESEND_API_KEY_SECRET"] == "sendonce/resend-api-key"
    assert environment["SENDONCE_MAX_RECEIVE_COUNT"] == "5"
    assert environment["POWERTOOLS_SERVICE_NAME"] == "sendonce"


def test_cli_deploy_function_is_arm64_in_the_deployed_template(cli_deployed: Deployed, aws: Any) -> None:
    # moto's Lambda drops Architectures (reports x86_64); the template it was given says arm64.
    body = aws("cloudformation").get_template(StackName=CLI_STACK)["TemplateBody"]
    template = body if isinstance(body, dict) else json.loads(body)
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    assert [f["Properties"]["Architectures"] for f in functions] == [["arm64"]]


def test_cli_deploy_event_source_mapping(cli_deployed: Deployed, aws: Any) -> None:
    outputs = cli_deployed.outputs

    mappings = aws("lambda").list_event_source_mappings(FunctionName=outputs["ConsumerFunctionName"])

    [mapping] = mappings["EventSourceMappings"]
    assert mapping["EventSourceArn"] == outputs["QueueArn"]
    assert mapping["BatchSize"] == 1
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 2}


def test_cli_deploy_on_call_topic_is_encrypted(cli_deployed: Deployed, aws: Any) -> None:
    # moto's CloudFormation skips AWS::SNS::Subscription; test_stack.py checks those.
    attributes = aws("sns").get_topic_attributes(TopicArn=cli_deployed.outputs["OnCallTopicArn"])["Attributes"]
    assert attributes.get("KmsMasterKeyId")


def test_deploy_to_moto_returns_the_outputs_and_parks_the_event_source(
    moto_endpoint: str, bootstrapped: float, cli_deployed: Deployed, aws: Any
) -> None:
    # After the CLI deploy: the assets bucket and bootstrap parameter already exist.
    started = time.monotonic()
    outputs = deploy_to_moto(moto_endpoint, context={"stack_name": LOCAL_STACK, "provider": "resend"})
    seconds = time.monotonic() - started

    assert set(outputs) == set(OUTPUT_NAMES)
    assert outputs == _stack_outputs(aws, LOCAL_STACK)
    function = aws("lambda").get_function_configuration(FunctionName=outputs["ConsumerFunctionName"])
    assert function["Environment"]["Variables"]["SENDONCE_LEDGER_TABLE"] == outputs["LedgerTableName"]
    assert "SENDONCE_RESEND_API_KEY_SECRET" in function["Environment"]["Variables"]
    [mapping] = aws("lambda").list_event_source_mappings(FunctionName=outputs["ConsumerFunctionName"])[
        "EventSourceMappings"
    ]
    # moto would otherwise receive messages for a function it cannot run.
    assert mapping["State"] == "Disabled"
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    print(
        f"\ncdk bootstrap {bootstrapped:.1f} s, cdk deploy {cli_deployed.seconds:.1f} s (synth included),"
        f" deploy_to_moto {seconds:.1f} s (synth included)"
    )
