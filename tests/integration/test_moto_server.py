"""moto's server process and what it recorded of SES sends."""

from __future__ import annotations

import io
import json
import os
import urllib.error
import urllib.request
import uuid
import zipfile
from typing import Any

import boto3
import pytest

from sendonce_local import moto_patches, moto_server
from sendonce_local.moto_server import ENDPOINT_ENV, DemoMotoServer, MotoServer, ses_deliveries, ses_sent_messages

pytestmark = pytest.mark.integration


@pytest.fixture
def sesv2(aws_env: dict[str, str]) -> Any:
    return boto3.client("sesv2")


@pytest.fixture
def domain() -> str:
    """A domain of its own per test: the session's moto server is shared."""
    return f"{uuid.uuid4().hex[:10]}.example.com"


def _client(service: str, server: MotoServer) -> Any:
    """A boto3 client of a server of the test's own (not the session's, which aws_env names)."""
    return boto3.client(
        service,
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _ours(counts: dict[str, int], domain: str) -> dict[str, int]:
    return {address: n for address, n in counts.items() if address.endswith("@" + domain)}


def test_ses_deliveries_counts_each_recipient_of_simple_sends(sesv2: Any, moto: MotoServer, domain: str) -> None:
    # Given a verified sender
    sender = f"campaigns@{domain}"
    sesv2.create_email_identity(EmailIdentity=sender)

    # When two emails are sent through SES v2, one of them to a recipient of the other
    first = sesv2.send_email(
        FromEmailAddress=sender,
        Destination={"ToAddresses": [f"ada@{domain}", f"bob@{domain}"]},
        Content={"Simple": {"Subject": {"Data": "Spring sale"}, "Body": {"Text": {"Data": "Hello"}}}},
    )
    sesv2.send_email(
        FromEmailAddress=sender,
        Destination={"ToAddresses": [f"Ada Lovelace <ADA@{domain}>"], "CcAddresses": [f"cy@{domain}"]},
        Content={"Simple": {"Subject": {"Data": "Spring sale"}, "Body": {"Html": {"Data": "<p>Hello</p>"}}}},
    )

    # Then each address is counted once per email, however it was written
    assert _ours(ses_deliveries(moto.endpoint), domain) == {f"ada@{domain}": 2, f"bob@{domain}": 1, f"cy@{domain}": 1}
    [recorded] = [m for m in ses_sent_messages(moto.endpoint) if m["id"] == first["MessageId"]]
    assert recorded["kind"] == "simple"
    assert recorded["source"] == sender
    assert recorded["subject"] == "Spring sale"
    assert recorded["body"] == "Hello"
    assert recorded["destinations"] == {"ToAddresses": [f"ada@{domain}", f"bob@{domain}"]}


def test_a_raw_send_counts_once_per_recipient_although_moto_records_it_twice(
    sesv2: Any, moto: MotoServer, domain: str
) -> None:
    # Given a verified sender
    sender = f"campaigns@{domain}"
    sesv2.create_email_identity(EmailIdentity=sender)

    # When a raw email names its recipient both in Destination and in its To header
    raw = f"From: {sender}\r\nTo: dee@{domain}\r\nSubject: Hi\r\n\r\nHello".encode()
    sent = sesv2.send_email(
        FromEmailAddress=sender, Destination={"ToAddresses": [f"dee@{domain}"]}, Content={"Raw": {"Data": raw}}
    )

    # Then moto lists the address twice, but the recipient is counted once
    [recorded] = [m for m in ses_sent_messages(moto.endpoint) if m["id"] == sent["MessageId"]]
    assert recorded["kind"] == "raw"
    assert recorded["destinations"] == [f"dee@{domain}", f"dee@{domain}"]
    assert _ours(ses_deliveries(moto.endpoint), domain) == {f"dee@{domain}": 1}


def test_sent_email_stays_readable_once_a_lambda_function_exists(sesv2: Any, moto: MotoServer, domain: str) -> None:
    # Given a Lambda function in moto, as a deployed stack has (stock moto's data.json then
    # fails with HTTP 500 on a machine without Docker)
    iam = boto3.client("iam")
    role = iam.create_role(
        RoleName=f"fn-{domain[:10]}",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return {}\n")
    boto3.client("lambda").create_function(
        FunctionName=f"fn-{domain[:10]}",
        Runtime="python3.11",
        Role=role,
        Handler="index.handler",
        Code={"ZipFile": code.getvalue()},
    )
    sender = f"campaigns@{domain}"
    sesv2.create_email_identity(EmailIdentity=sender)

    # When an email is sent
    sesv2.send_email(
        FromEmailAddress=sender,
        Destination={"ToAddresses": [f"eve@{domain}"]},
        Content={"Simple": {"Subject": {"Data": "Hi"}, "Body": {"Text": {"Data": "Hello"}}}},
    )

    # Then it is counted
    assert _ours(ses_deliveries(moto.endpoint), domain) == {f"eve@{domain}": 1}


def test_the_aws_env_fixture_points_default_boto3_clients_at_moto(aws_env: dict[str, str], moto: MotoServer) -> None:
    assert aws_env["AWS_ENDPOINT_URL"] == moto.endpoint
    assert boto3.client("sts").get_caller_identity()["Account"] == "123456789012"


def test_a_server_of_its_own_resets_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a private server (not the session's: reset would wipe other tests' resources)
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)
    with MotoServer() as server:
        assert server.owns_process and server.endpoint.startswith("http://localhost:")
        sqs = _client("sqs", server)
        sqs.create_queue(QueueName="to-be-forgotten")

        # When it is reset
        server.reset()

        # Then its resources are gone
        assert sqs.list_queues().get("QueueUrls", []) == []
        endpoint = server.endpoint

    # And once stopped it no longer answers
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(endpoint + "/moto-api/config", timeout=2)


def test_an_endpoint_from_the_environment_is_reused_and_never_stopped(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given SENDONCE_MOTO_ENDPOINT names a running server
    monkeypatch.setenv(ENDPOINT_ENV, moto.endpoint)

    # When a MotoServer is started and stopped
    with MotoServer() as reused:
        assert reused.endpoint == moto.endpoint
        assert reused.pid is None and not reused.owns_process

    # Then the running server still answers
    with urllib.request.urlopen(moto.endpoint + "/moto-api/config", timeout=2) as response:
        assert response.status < 300


def _names(patches: tuple[moto_patches.PatchFunction, ...]) -> list[str]:
    return [patch.__name__ for patch in patches]


def _tables_named(endpoint: str, name: str) -> int:
    """How many Table objects moto's process holds under ``name``: the table and every copy
    of it (moto tracks each instance it creates, and lists them in data.json)."""
    with urllib.request.urlopen(endpoint + "/moto-api/data.json", timeout=30) as response:
        tables = json.loads(response.read())["dynamodb"]["Table"]
    return sum(1 for table in tables if table.get("name") == name)


def test_a_plain_server_runs_with_the_defect_fixes(monkeypatch: pytest.MonkeyPatch, domain: str) -> None:
    # Given a server of its own with the defect fixes only (the session's runs the speed
    # patches too) and a ledger table with three deliveries
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)
    with MotoServer() as plain:
        ddb = _client("dynamodb", plain)
        table = f"ledger-{domain[:10]}"
        ddb.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for i in range(3):
            ddb.put_item(TableName=table, Item={"pk": {"S": f"r{i}"}})
        before = _tables_named(plain.endpoint, table)

        # When one transaction updates all three
        ddb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": {"S": f"r{i}"}},
                        "UpdateExpression": "SET sent = :t",
                        "ExpressionAttributeValues": {":t": {"BOOL": True}},
                    }
                }
                for i in range(3)
            ]
        )

        # Then the server copied the table once (stock moto: once per item), and says what it runs
        assert _tables_named(plain.endpoint, table) - before == 1
        assert plain.log_tail(10**9).splitlines()[0].endswith(", ".join(_names(moto_patches.DEFECT_FIXES)))


def test_the_server_logs_no_line_per_request(moto: MotoServer) -> None:
    # Werkzeug's request lines were 8-11 % of a busy server's CPU; its errors are still logged
    if not moto.owns_process:
        pytest.skip(f"{ENDPOINT_ENV} names a server this session did not start")
    _client("sqs", moto).list_queues()
    _client("dynamodb", moto).list_tables()
    log = moto.log_tail(10**9)
    assert log.splitlines()[0].startswith("moto ") and " HTTP/1.1" not in log


def test_the_suites_server_runs_the_speed_patches_too(moto: MotoServer) -> None:
    if not moto.owns_process:
        pytest.skip(f"{ENDPOINT_ENV} names a server this session did not start")
    first_line = moto.log_tail(10**9).splitlines()[0]
    assert first_line.endswith(", ".join(_names(moto_patches.DEFECT_FIXES + moto_patches.SPEED_PATCHES)))


def test_the_demo_server_runs_with_the_speed_patches_in_a_process_of_its_own(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a running server named by the environment (the demo must not reuse it)
    monkeypatch.setenv(ENDPOINT_ENV, moto.endpoint)

    with DemoMotoServer() as demo:
        # Then the demo's server is its own, in a session of its own, with every patch
        assert demo.owns_process and demo.endpoint != moto.endpoint
        assert demo.pid is not None and os.getsid(demo.pid) == demo.pid
        first_line = demo.log_tail(100_000).splitlines()[0]
        assert first_line.endswith(", ".join(_names(moto_patches.DEFECT_FIXES + moto_patches.SPEED_PATCHES)))

        # And it answers with the speed patches' one documented difference: an invalid update
        # of a missing item leaves the item's key behind
        ddb = _client("dynamodb", demo)
        ddb.create_table(
            TableName="ledger",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        with pytest.raises(ddb.exceptions.ClientError, match="overlap"):
            ddb.update_item(
                TableName="ledger",
                Key={"pk": {"S": "missing"}},
                UpdateExpression="SET a = :v, a = :v",
                ExpressionAttributeValues={":v": {"N": "1"}},
            )
        assert ddb.scan(TableName="ledger")["Items"] == [{"pk": {"S": "missing"}}]
        assert demo.cpu_seconds() > 0


def test_speed_patches_need_a_server_of_their_own() -> None:
    with pytest.raises(ValueError, match="server of its own"):
        MotoServer(endpoint="http://localhost:1", speed_patches=True)


def test_another_moto_version_is_refused_before_a_server_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given another moto than the patches were written for
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)
    monkeypatch.setattr(moto_patches, "installed_moto_version", lambda: "5.3.0")
    server = MotoServer()

    # Then no server process starts, and the error says which versions and what to do
    with pytest.raises(moto_patches.MotoVersionError, match=r"moto 5\.3\.0 is installed.*constraints\.txt"):
        server.start()
    assert server.pid is None

    # And the server's own entry point refuses before it serves
    with pytest.raises(moto_patches.MotoVersionError):
        moto_server.serve(["-H", "127.0.0.1", "-p", "1"])
    assert moto_patches.applied() == ()
