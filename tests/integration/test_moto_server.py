"""moto's server process and what it recorded of SES sends."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
import uuid
import zipfile
from typing import Any

import boto3
import pytest

from sendonce_local.moto_server import ENDPOINT_ENV, MotoServer, ses_deliveries, ses_sent_messages

pytestmark = pytest.mark.integration


@pytest.fixture
def sesv2(aws_env: dict[str, str]) -> Any:
    return boto3.client("sesv2")


@pytest.fixture
def domain() -> str:
    """A domain of its own per test: the session's moto server is shared."""
    return f"{uuid.uuid4().hex[:10]}.example.com"


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
        FunctionName=f"fn-{domain[:10]}", Runtime="python3.11", Role=role, Handler="index.handler",
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
        sqs = boto3.client(
            "sqs",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
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
