"""Upgrading over live campaigns loses no ledger record (issue 17, item 6).

A deleted or replaced ledger record is a future duplicate, so an upgrade must replace no
table and keep every record in force. This test deploys the previous release (its own
code, taken from git history) into moto's server, runs half a campaign with that
release's consumer and kills it mid-campaign, deploys this version over the same stack,
and finishes the campaign with this version's consumer: every recipient gets exactly one
email, none is missing, and the ledger table is the one the old release wrote.

moto's CloudFormation keeps a DynamoDB table on a stack update whatever changed, so the
deployed templates are compared too: the ledger table keeps its logical id, name, key
schema and key attributes (the properties whose change makes CloudFormation replace a
table) and is retained on delete and on replacement.

PREVIOUS_RELEASE is the last commit of the release before this one; move it forward when
a release lands. The old release runs from a `git archive` of it, in processes of its own.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from sendonce.contract import Output
from sendonce_local.deploy import deploy_to_moto
from sendonce_local.moto_server import ENDPOINT_ENV, MotoServer, aws_env
from sendonce_local.resend_server import LocalResendServer
from tests.infra.synthesis import REPO_ROOT

pytestmark = [pytest.mark.infra, pytest.mark.timeout(600)]

PREVIOUS_RELEASE = "5d1f51a39f7f5c7d1042c34a90de304072e2f227"
CONTEXT = {"provider": "resend"}
CAMPAIGN = "upgrade-1"
RECIPIENTS = 200
KILL_AT = 80  # emails the old release's consumer gets accepted before it is killed
RECIPIENT_DOMAIN = "upgrade.example.net"
# Time scaled for the test: the deployed 180 s function and 1,080 s visibility timeout
# would make a killed consumer's messages come back after 18 minutes.
FUNCTION_TIMEOUT_S = 30
VISIBILITY_TIMEOUT_S = 40
LEDGER_IDENTITY = ("Type", "DeletionPolicy", "UpdateReplacePolicy")
TABLE_REPLACEMENT_PROPERTIES = ("TableName", "KeySchema")

# Run by the previous release, in its own names (its `sendonce.wiring` was one module).
PUBLISH_SCRIPT = """
import json, sys
from sendonce.domain.models import Campaign, Content, Recipient
from sendonce.settings import ApiSettings
from sendonce.wiring import campaign_service

outputs, campaign_id, n, domain = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
service = campaign_service(ApiSettings(
    ledger_table=outputs["LedgerTableName"], campaigns_table=outputs["CampaignsTableName"],
    queue_url=outputs["QueueUrl"], dead_letter_queue_url=outputs["DeadLetterQueueUrl"]))
service.create(Campaign(campaign_id=campaign_id, name="Upgrade", provider="resend", sender="news@example.com",
    content=Content(subject="Hello {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}")))
people = [Recipient(recipient_id=f"r{i}", email=f"user{i}@{domain}", variables={"name": f"User {i}"}) for i in range(n)]
report = service.publish(campaign_id, people, batch_size=5)
print(json.dumps({"accepted": report.accepted, "messages": report.messages_sent}))
"""


def code_env(root: Path, endpoint: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A child process that runs the release checked out at `root`, against moto only."""
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", ENDPOINT_ENV)}
    env.update(aws_env(endpoint))
    env["PYTHONPATH"] = os.pathsep.join(str(root / part) for part in ("lambdas", "src", "."))
    env.update(extra or {})
    return env


def run(root: Path, args: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, f"{args[:3]} failed in {root}:\n{result.stderr[-4000:]}"
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", PREVIOUS_RELEASE],
        capture_output=True,
        check=False,
    )
    assert archive.returncode == 0, (
        f"the previous release {PREVIOUS_RELEASE[:10]} is not in this clone's history "
        f"(a shallow clone?): {archive.stderr.decode()[-500:]}"
    )
    root = tmp_path_factory.mktemp("previous-release")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(root, filter="data")
    return root


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ENDPOINT_ENV, raising=False)
        server = MotoServer()
    with server:
        yield server.endpoint


def ledger_snapshot(dynamodb: Any, table: str) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    description = dynamodb.describe_table(TableName=table)["Table"]
    states = {}
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            key = tuple(sorted((name, next(iter(value.values()))) for name, value in item.items() if name in KEYS))
            states[key] = item.get("state", {}).get("S", "")
    return description, states


KEYS = ("campaign_id", "recipient_id")


def settled_snapshot(
    dynamodb: Any, table: str, *, pause_s: float = 0.5, attempts: int = 40
) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    """The ledger once the writes a killed consumer had in flight have landed: moto's server
    may still apply a request whose client died with it (a CI run saw a claim land after the
    first scan). Two scans `pause_s` apart that agree."""
    previous = ledger_snapshot(dynamodb, table)
    for _ in range(attempts):
        time.sleep(pause_s)
        current = ledger_snapshot(dynamodb, table)
        if current[1] == previous[1]:
            return current
        previous = current
    raise AssertionError(f"the ledger kept changing for {attempts * pause_s:.0f} s after the old consumer died")


def ledger_resource(template: dict[str, Any], table_name: str) -> tuple[str, dict[str, Any]]:
    """The ledger table's logical id and resource in a deployed template."""
    found = [
        (logical_id, resource)
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::DynamoDB::Table"
        and {k["AttributeName"] for k in resource["Properties"]["KeySchema"]} == set(KEYS)
    ]
    assert len(found) == 1, f"expected one ledger table keyed {KEYS} in the template, found {[f[0] for f in found]}"
    return found[0]


def deployed_template(cloudformation: Any) -> dict[str, Any]:
    stacks = [
        s["StackName"] for s in cloudformation.describe_stacks()["Stacks"] if s["StackStatus"].endswith("COMPLETE")
    ]
    assert len(stacks) == 1, stacks
    body = cloudformation.get_template(StackName=stacks[0])["TemplateBody"]
    return body if isinstance(body, dict) else json.loads(body)


def wait(predicate, *, timeout_s: float, what: str, interval_s: float = 0.5, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"{what} not reached within {timeout_s:g} s\n{tail}")


def test_an_upgrade_over_a_live_campaign_keeps_every_ledger_record_and_sends_each_recipient_once(
    previous_release: Path, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in aws_env(moto_endpoint).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)
    session = boto3.session.Session()
    dynamodb, cloudformation = session.client("dynamodb"), session.client("cloudformation")

    with LocalResendServer(rate_limit=None) as resend:
        # Given the previous release deployed, with a campaign half sent by its consumer
        old_env = code_env(previous_release, moto_endpoint)
        outputs = json.loads(
            run(previous_release, ["-m", "sendonce_local.deploy", moto_endpoint, json.dumps(CONTEXT)], old_env)
        )
        function = session.client("lambda").get_function_configuration(
            FunctionName=outputs[Output.CONSUMER_FUNCTION_NAME]
        )
        function_env = dict(function["Environment"]["Variables"])
        session.client("secretsmanager").create_secret(
            Name=function_env["SENDONCE_RESEND_API_KEY_SECRET"], SecretString="re_sendonce_upgrade_key"
        )
        session.client("sqs").set_queue_attributes(
            QueueUrl=outputs[Output.QUEUE_URL], Attributes={"VisibilityTimeout": str(VISIBILITY_TIMEOUT_S)}
        )
        consumer_overrides = {
            **function_env,
            "RESEND_API_URL": resend.url,
            "SENDONCE_RESEND_REQUESTS_PER_SECOND": "1000",
            "SENDONCE_PROVIDER_TIMEOUT_SECONDS": "2",  # the safety margin must cover it
            "SENDONCE_SAFETY_MARGIN_MS": "2500",
        }
        published = json.loads(
            run(
                previous_release,
                ["-c", PUBLISH_SCRIPT, json.dumps(outputs), CAMPAIGN, str(RECIPIENTS), RECIPIENT_DOMAIN],
                old_env,
            )
        )
        assert published["accepted"] == RECIPIENTS
        poller = [
            "-m", "sendonce_local.poller",
            "--queue-url", outputs[Output.QUEUE_URL],
            "--handler", "sendonce.handlers.consumer:lambda_handler",
            "--batch-size", "1", "--concurrency", "2", "--timeout", str(FUNCTION_TIMEOUT_S),
        ]  # fmt: skip
        old_log = previous_release / "old-consumer.log"
        old_consumer = subprocess.Popen(
            [sys.executable, *poller, "--max-seconds", "240"],
            cwd=previous_release,
            env=code_env(previous_release, moto_endpoint, consumer_overrides),
            stdout=subprocess.DEVNULL,
            stderr=old_log.open("w"),
        )
        try:
            wait(
                lambda: resend.stats()["emails_accepted"] >= KILL_AT,
                timeout_s=180,
                what="the old half",
                log=old_log,
            )
        finally:
            old_consumer.kill()  # mid-campaign, mid-batch: claims and leases left behind
            old_consumer.wait()
        accepted_before = resend.stats()["emails_accepted"]
        assert KILL_AT <= accepted_before < RECIPIENTS
        ledger_table = outputs[Output.LEDGER_TABLE_NAME]
        old_description, old_records = settled_snapshot(dynamodb, ledger_table)
        old_template = deployed_template(cloudformation)
        assert old_records, "the old release wrote no ledger record"

        # When this version is deployed over the same stack
        new_outputs = deploy_to_moto(moto_endpoint, context=CONTEXT)

        # Then no table was replaced and every record the old release wrote is still in force
        assert new_outputs[Output.LEDGER_TABLE_NAME] == ledger_table
        new_description, new_records = ledger_snapshot(dynamodb, ledger_table)
        assert new_description["TableArn"] == old_description["TableArn"]
        assert new_description["CreationDateTime"] == old_description["CreationDateTime"]
        assert new_records == old_records
        old_id, old_ledger = ledger_resource(old_template, ledger_table)
        new_id, new_ledger = ledger_resource(deployed_template(cloudformation), ledger_table)
        assert new_id == old_id
        for name in LEDGER_IDENTITY:
            assert new_ledger.get(name) == old_ledger.get(name), name
        assert new_ledger.get("DeletionPolicy") == new_ledger.get("UpdateReplacePolicy") == "Retain"
        for name in TABLE_REPLACEMENT_PROPERTIES:
            assert new_ledger["Properties"].get(name) == old_ledger["Properties"].get(name), name
        key_types = {a["AttributeName"]: a["AttributeType"] for a in old_ledger["Properties"]["AttributeDefinitions"]}
        new_types = {a["AttributeName"]: a["AttributeType"] for a in new_ledger["Properties"]["AttributeDefinitions"]}
        assert {k: new_types.get(k) for k in KEYS} == {k: key_types[k] for k in KEYS}

        # And this version's consumer finishes the campaign the old one started
        new_function_env = dict(
            session.client("lambda").get_function_configuration(
                FunctionName=new_outputs[Output.CONSUMER_FUNCTION_NAME]
            )["Environment"]["Variables"]
        )
        new_log = previous_release / "new-consumer.log"
        new_consumer = subprocess.Popen(
            [sys.executable, *poller, "--max-seconds", "300"],
            cwd=REPO_ROOT,
            env=code_env(
                REPO_ROOT, moto_endpoint, {**consumer_overrides, **new_function_env, "RESEND_API_URL": resend.url}
            ),
            stdout=subprocess.DEVNULL,
            stderr=new_log.open("w"),
        )
        try:
            from sendonce.settings import ApiSettings
            from sendonce.wiring.api import campaign_service

            operator = campaign_service(
                ApiSettings(
                    ledger_table=new_outputs[Output.LEDGER_TABLE_NAME],
                    campaigns_table=new_outputs[Output.CAMPAIGNS_TABLE_NAME],
                    queue_url=new_outputs[Output.QUEUE_URL],
                    dead_letter_queue_url=new_outputs[Output.DEAD_LETTER_QUEUE_URL],
                )
            )
            wait(
                lambda: operator.get(CAMPAIGN).state.value == "completed",
                timeout_s=240,
                what="the campaign's completion after the upgrade",
                interval_s=1.0,
                log=new_log,
            )
            status = operator.status(CAMPAIGN)
        finally:
            new_consumer.terminate()
            new_consumer.wait(timeout=30)

        # Then: 0 duplicates, 0 missing, every delivery sent
        deliveries = {a: n for a, n in resend.deliveries().items() if a.endswith("@" + RECIPIENT_DOMAIN)}
        assert len(deliveries) == RECIPIENTS, f"missing: {RECIPIENTS - len(deliveries)}"
        assert {a: n for a, n in deliveries.items() if n != 1} == {}
        assert status.sent == RECIPIENTS and status.remaining == 0
