"""`aws_session`: one boto3 session per process and AWS environment, safe to build
clients from in several threads."""

from __future__ import annotations

import threading
import time

import boto3
import pytest

from sendonce.adapters.aws_session import aws_session

AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name, value in AWS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    return monkeypatch


def test_services_built_in_one_environment_share_one_session(aws) -> None:
    assert aws_session() is aws_session()
    first, second = aws_session().client("sqs"), aws_session().client("sqs")
    assert first is not second  # clients are built anew, the session's loaded data is not
    assert first.meta.endpoint_url == "http://127.0.0.1:1"


def test_another_endpoint_or_other_credentials_get_a_session_of_their_own(aws) -> None:
    before = aws_session()
    aws.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    elsewhere = aws_session()
    assert elsewhere is not before
    assert elsewhere.client("sqs").meta.endpoint_url == "http://127.0.0.1:2"
    aws.setenv("AWS_ACCESS_KEY_ID", "another")
    assert aws_session().get_credentials().access_key == "another"
    assert before.get_credentials().access_key == "testing"


def test_it_builds_one_client_at_a_time_whatever_the_threads(aws) -> None:
    # boto3 documents a session as unsafe to build clients from in several threads at once
    # (lazily resolved credentials and components); a handler's first invocations may
    # assemble services in several poller or HTTP threads together.
    aws.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:3")  # a session no other test has built
    session, start = aws_session(), threading.Barrier(8)
    inside, most, lock = [0], [0], threading.Lock()
    plain_client = boto3.session.Session.client

    def slow_client(self, *args, **kwargs):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        try:
            return plain_client(self, *args, **kwargs)
        finally:
            with lock:
                inside[0] -= 1

    aws.setattr(boto3.session.Session, "client", slow_client)
    built: list[object] = []

    def build() -> None:
        start.wait()
        built.append(session.client("sqs"))

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 8
    assert most[0] == 1
