"""sendonce_client.Client against the operator API's real handler, served over loopback by
the local API server, with moto's server behind it and the local Resend server sending."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from sendonce.handlers import api
from sendonce_client import Client, Conflict, ConnectionFailed, InvalidRequest, JobFailed, NotFound, PublishFailed
from sendonce_local.http_api import LocalHttpApi
from tests.integration.operator_helpers import OPERATOR_ARN

pytestmark = pytest.mark.integration


@dataclass
class RecordingApi:
    """The API handler, recording each event it gets. For a path in `lose_first_answers`,
    the first request with each distinct body is carried out, then answered with API
    Gateway's 503 (the answer was lost); a retry of it is answered normally."""

    system: object
    events: list[dict] = field(default_factory=list)
    lose_first_answers: set[str] = field(default_factory=set)
    seen: set[tuple[str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event, context):
        with self.lock:
            self.events.append(event)
        response = api.lambda_handler(event, context, service=self.system.operator)
        request = (event["rawPath"], event.get("body") or "")
        with self.lock:
            if event["rawPath"] in self.lose_first_answers and request not in self.seen:
                self.seen.add(request)
                return {
                    "statusCode": 503,
                    "headers": {"content-type": "application/json"},
                    "body": json.dumps({"message": "Service Unavailable"}),
                }
        return response

    def paths(self, method: str = "POST") -> list[str]:
        return [e["rawPath"] for e in self.events if e["requestContext"]["http"]["method"] == method]


@pytest.fixture
def recording_api(system) -> Iterator[tuple[RecordingApi, str]]:
    handler = RecordingApi(system)
    with LocalHttpApi(handler, caller_arn=OPERATOR_ARN, function_name="sendonce-api") as server:
        yield handler, server.url


@pytest.fixture
def client(recording_api) -> Iterator[Client]:
    sleeps: list[float] = []
    with Client(recording_api[1], session=boto3.session.Session(), sleep=sleeps.append) as c:
        c.sleeps = sleeps  # type: ignore[attr-defined]
        yield c


def spec(system, campaign_id: str = "c1", **overrides) -> dict:
    return {
        "id": campaign_id,
        "name": "Spring launch",
        "subject": "Hello {{ name }}",
        "from": f"News <news@{system.domain}>",
        "html": "<p>Hi {{ name }}</p>",
        "provider": "resend",
        **overrides,
    }


def people(system, n: int, start: int = 0) -> list[dict]:
    return [
        {"recipient_id": f"r{i}", "email": f"user{i}@{system.domain}", "variables": {"name": f"U{i}"}}
        for i in range(start, start + n)
    ]


def verify_sigv4(event: dict, credentials: Credentials, region: str) -> str:
    """Recompute the signature from what the server received; returns the Authorization header."""
    headers = event["headers"]
    authorization = headers["authorization"]
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    request = AWSRequest(
        method=event["requestContext"]["http"]["method"],
        url=f"http://{headers['host']}{event['rawPath']}"
        + (f"?{event['rawQueryString']}" if event["rawQueryString"] else ""),
        data=(event.get("body") or "").encode() or None,
        headers={name: headers[name] for name in signed},
    )
    request.context["timestamp"] = headers["x-amz-date"]
    auth = SigV4Auth(credentials, "execute-api", region)
    signature = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    assert authorization.endswith(f"Signature={signature}")
    return authorization


def test_a_backend_runs_a_campaign_through_the_client_signed_with_sigv4(system, recording_api, client):
    handler, _ = recording_api
    # Given recipients as dicts and as sendonce's own model objects, one repeated
    recipients = people(system, 3) + system.recipients(2, start=3) + people(system, 1)

    created = client.create_campaign(spec(system))
    published = client.publish("c1", iter(recipients))
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    status = client.status("c1")

    assert created["state"] == "draft" and created["campaign_id"] == "c1"
    assert (published.accepted, published.duplicates, published.messages_sent, published.requests) == (5, 1, 1, 1)
    assert status["state"] == "completed" and status["sent"] == 5
    assert set(system.deliveries().values()) == {1} and len(system.deliveries()) == 5
    # Every request carried a valid SigV4 signature for execute-api in the session's region
    session_credentials = boto3.session.Session().get_credentials().get_frozen_credentials()
    credentials = Credentials(session_credentials.access_key, session_credentials.secret_key, session_credentials.token)
    region = boto3.session.Session().region_name
    for event in handler.events:
        authorization = verify_sigv4(event, credentials, region)
        assert authorization.startswith(f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/")
        assert f"/{region}/execute-api/aws4_request" in authorization
        assert event["headers"]["x-amz-security-token"] == credentials.token


def test_a_publish_whose_answer_is_lost_is_retried_and_sends_nobody_twice(system, recording_api, client):
    handler, _ = recording_api
    client.create_campaign(spec(system))
    # The first answer to each of the two publish requests is lost after the API enqueued them
    handler.lose_first_answers.add("/campaigns/c1/publish")
    smaller = Client(client.api_url, session=boto3.session.Session(), chunk_size=4, sleep=client.sleeps.append)

    published = smaller.publish("c1", people(system, 7))
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)

    assert handler.paths().count("/campaigns/c1/publish") == 4  # 2 chunks, each sent twice
    assert len(client.sleeps) == 2  # one backoff per lost answer
    assert (published.accepted, published.requests) == (7, 2)
    # The retries found their batches enqueued already: nothing was enqueued twice
    assert (published.batches_new, published.batches_already_enqueued, published.messages_sent) == (0, 2, 0)
    deliveries = system.deliveries()
    assert len(deliveries) == 7 and set(deliveries.values()) == {1}
    assert client.status("c1")["sent"] == 7


def test_publishing_streams_large_iterables_in_requests_the_api_accepts(system, recording_api, client):
    handler, _ = recording_api
    client.create_campaign(spec(system))

    def generated():
        yield from people(system, 2_345)

    published = client.publish("c1", generated())
    again = client.publish("c1", generated())

    bodies = [json.loads(e["body"]) for e in handler.events if e["rawPath"] == "/campaigns/c1/publish"]
    # Each call's requests are in flight together (4 streams by default), so in any order
    assert [sorted(len(b["recipients"]) for b in call) for call in (bodies[:3], bodies[3:])] == [[345, 1000, 1000]] * 2
    assert all("dedupe_addresses" not in b for b in bodies)  # sent only when asked for
    assert (published.accepted, published.batches_new, published.requests) == (2_345, 24, 3)
    assert (again.batches_new, again.batches_already_enqueued, again.messages_sent) == (0, 24, 0)


def test_dedupe_addresses_drops_repeated_addresses_in_the_call_and_asks_the_api_too(system, recording_api, client):
    handler, _ = recording_api
    client.create_campaign(spec(system))
    recipients = people(system, 3) + [{"recipient_id": "again", "email": f"USER1@{system.domain}"}]

    published = client.publish("c1", recipients, dedupe_addresses=True)

    [body] = [json.loads(e["body"]) for e in handler.events if e["rawPath"] == "/campaigns/c1/publish"]
    assert body["dedupe_addresses"] is True
    assert [r["recipient_id"] for r in body["recipients"]] == ["r0", "r1", "r2"]
    assert (published.accepted, published.duplicate_addresses) == (3, 1)


def test_field_errors_name_the_position_in_the_callers_iterable(system, recording_api, client):
    client.create_campaign(spec(system))
    recipients = people(system, 5)
    recipients[4] = {"recipient_id": "r4", "email": "not-an-address"}
    chunked = Client(client.api_url, session=boto3.session.Session(), chunk_size=3)

    with pytest.raises(PublishFailed) as failed:
        chunked.publish("c1", recipients)

    error = failed.value
    assert isinstance(error.cause, InvalidRequest) and error.status == 422 and error.error == "ValidationError"
    assert [f.path for f in error.fields] == ["body.recipients.4.email"]  # index 1 of the second request
    assert error.message.startswith("body.recipients.4.email: not a valid email address")
    assert "not-an-address" not in error.message
    assert (error.published.accepted, error.published.requests) == (3, 1)


def test_errors_are_typed_and_carry_the_apis_body(system, client):
    client.create_campaign(spec(system))

    with pytest.raises(NotFound) as missing:
        client.pause("nope")
    with pytest.raises(Conflict) as illegal:
        client.resume("c1")
    with pytest.raises(Conflict):
        client.create_campaign(spec(system, name="Another"))
    with pytest.raises(InvalidRequest) as unknown_provider:
        client.create_campaign(spec(system, "c2", provider="mailgun"))
    with pytest.raises(Conflict) as too_fast:
        client.create_campaign(spec(system, "c3", max_rate=50))  # the API's Resend rate: 5/s
    with pytest.raises(InvalidRequest) as bad_weight:
        client.create_campaign(spec(system, "c4", weight=0))

    assert (missing.value.status, missing.value.error) == (404, "CampaignNotFound")
    assert illegal.value.status == 409 and illegal.value.error == "IllegalTransition"
    assert "cannot move to sending" in illegal.value.message
    assert (unknown_provider.value.status, unknown_provider.value.error) == (400, "UnknownProvider")
    assert (too_fast.value.status, too_fast.value.error) == (409, "ConflictingRequest")
    assert too_fast.value.message == "max_rate: 50 is above provider 'resend''s rate of 5 requests/s"
    assert (bad_weight.value.status, [f.path for f in bad_weight.value.fields]) == (422, ["body.weight"])


def test_publishing_to_a_cancelled_campaign_fails_with_a_conflict(system, client):
    client.create_campaign(spec(system))
    client.cancel("c1")

    with pytest.raises(PublishFailed) as failed:
        client.publish("c1", people(system, 2))

    assert isinstance(failed.value.cause, Conflict)
    assert (failed.value.status, failed.value.error) == (409, "IllegalTransition")
    assert "is cancelled; nothing can be published" in failed.value.message
    assert failed.value.published.requests == 0


def test_state_changes_go_through_and_a_lost_answer_is_reconciled(system, recording_api, client):
    handler, _ = recording_api
    client.create_campaign(spec(system))
    client.publish("c1", people(system, 3))
    handler.lose_first_answers.update({"/campaigns/c1/pause", "/campaigns/c1/cancel"})

    paused = client.pause("c1", reason="legal review")  # the retry's 409 "already paused" is read back
    resumed = client.resume("c1")
    cancelled = client.cancel("c1", reason="wrong list")  # the retry is answered with the same job

    assert handler.paths().count("/campaigns/c1/pause") == 2
    assert paused["state"] == "paused" and paused["state_reason"] == "legal review"
    assert resumed["state"] == "sending" and resumed["republished"] == 3
    assert client.job(resumed["job"]["job_id"])["state"] == "done"
    # Cancel is idempotent on the server: a retry after a lost answer is a 202 naming the
    # closing job the first attempt started, not a 409 the client would have to guess about.
    assert handler.paths().count("/campaigns/c1/cancel") == 2
    assert cancelled["state"] == "cancelled" and cancelled["state_changed_by"] == OPERATOR_ARN
    assert cancelled["job"]["job_id"] == "c1-cancel" and cancelled["job"]["state"] == "done"
    assert client.get_campaign("c1")["state"] == "cancelled"


def test_a_pick_whose_answer_is_lost_is_retried_and_the_winner_that_stands_goes_to_the_rest(
    system, recording_api, client
):
    handler, _ = recording_api
    # Given an A/B campaign whose test went out, the rest waiting for the winner
    ab = spec(
        system,
        "ab",
        variants=[{"id": "A", "subject": "A {{ name }}"}, {"id": "B", "subject": "B {{ name }}"}],
        test={"share": 0.5, "pick_by": "opens", "after": "1h"},
        tracking={"opens": True},
    )
    ab.pop("subject")
    client.create_campaign(ab)
    client.publish("ab", people(system, 12))
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    waiting = client.status("ab")
    handler.lose_first_answers.add("/campaigns/ab/pick")

    # When the operator picks B and then A by mistake, the first answer of each lost
    picked = client.pick("ab", "B", reason="by hand")
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    again = client.pick("ab", "A")

    # Then the retry found B standing; the second pick changed nothing; everyone got one email
    assert 0 < waiting["pending"] < 12 and waiting["ab_test"]["awaiting_winner"] is True
    assert handler.paths().count("/campaigns/ab/pick") == 4
    assert picked["variant"] == "B" and picked["decision"]["reason"] == "by hand"
    assert again["variant"] == "B" and again["decided_now"] is False
    assert client.status("ab")["sent"] == 12 and client.status("ab")["ab_test"]["decision"]["variant"] == "B"
    assert system.deliveries() == {f"user{i}@{system.domain}": 1 for i in range(12)}
    # ... and what cannot be picked is a typed error, not a retry
    with pytest.raises(InvalidRequest, match="variant"):
        client.pick("ab", "Z")
    client.create_campaign(spec(system, "plain"))
    with pytest.raises(Conflict, match="no A/B test"):
        client.pick("plain")


def test_reconcile_starts_a_job_whose_result_the_client_reads_and_a_missing_campaign_is_an_error(
    system, recording_api, client
):
    client.create_campaign(spec(system))
    client.publish("c1", people(system, 3))

    started = client.reconcile("c1")

    assert started["kind"] == "reconcile" and started["campaign_id"] == "c1"
    job = client.job(started["job_id"])
    # Nothing claimed yet: no ledger records (this API keeps no counters: nothing to compare)
    assert job["state"] == "done" and job["progress"]["records_read"] == 0 and job["result"]["drifts"] == []
    with pytest.raises(NotFound):
        client.reconcile("nope")


def test_publish_s3_answers_with_its_job_and_a_missing_object_is_an_invalid_request(system, recording_api, client):
    s3 = boto3.client("s3")
    bucket = f"sendonce-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    rows = "".join(f"r{i},user{i}@{system.domain}\n" for i in range(5))
    s3.put_object(Bucket=bucket, Key="list.csv", Body=f"recipient_id,email\n{rows}x,not-an-address\n".encode())
    client.create_campaign(spec(system))

    lenient = client.publish_s3("c1", bucket, "list.csv", strict=False)
    with pytest.raises(Conflict, match="cannot be read"):  # well formed: the object may appear (409)
        client.publish_s3("c1", bucket, "none.csv")

    job = client.job(lenient["job_id"])
    assert lenient["kind"] == "publish_s3" and job["state"] == "done" and job["progress"]["accepted"] == 5
    assert job["result"]["problems"] == ["7: email: not a valid email address"]


def test_a_lost_create_answer_returns_the_created_campaign(system, recording_api, client):
    handler, _ = recording_api
    handler.lose_first_answers.add("/campaigns")

    created = client.create_campaign(spec(system))

    assert handler.paths().count("/campaigns") == 2
    assert created["campaign_id"] == "c1" and created["state"] == "draft"


def test_list_campaigns_by_state(system, recording_api, client):
    handler, _ = recording_api
    client.create_campaign(spec(system, "c1"))
    client.create_campaign(spec(system, "c2"))
    client.publish("c2", people(system, 1))
    drafts = client.list_campaigns(state="draft")
    every = client.list_campaigns()

    listings = [
        e for e in handler.events if e["rawPath"] == "/campaigns" and e["requestContext"]["http"]["method"] == "GET"
    ]
    assert [e["rawQueryString"] for e in listings] == ["state=draft", ""]
    assert [c["campaign_id"] for c in drafts] == ["c1"]
    assert [(c["campaign_id"], c["state"]) for c in every] == [("c1", "draft"), ("c2", "sending")]


def test_no_answer_at_all_is_retried_then_raised(aws_env):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    sleeps: list[float] = []
    client = Client(f"http://127.0.0.1:{port}", session=boto3.session.Session(), max_attempts=3, sleep=sleeps.append)

    with pytest.raises(ConnectionFailed) as failed:
        client.status("c1")

    assert failed.value.status is None and failed.value.error == "ConnectionError"
    assert len(sleeps) == 2


# --- parallel streams -------------------------------------------------------------------


def batch_records(system, campaign_id: str) -> list[list[str]]:
    from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore

    store = DynamoDBCampaignStore(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table)
    return [[r.recipient_id for r in batch.recipients] for batch, _ in store.batches(campaign_id)]


def test_parallel_streams_publish_each_recipient_exactly_once(system, recording_api):
    # (That 4 requests are in flight at once is tests/unit/test_publish_streams.py's: the
    # local API runs one invocation at a time.)
    handler, url = recording_api
    client = Client(url, session=boto3.session.Session(), chunk_size=100)
    client.create_campaign(spec(system))
    # Given 1,050 recipients (11 requests of 100), 30 of them repeated further on
    recipients = people(system, 1_050)
    recipients[500:500] = people(system, 30, start=100)

    # When they are published in 4 streams, then again
    published = client.publish("c1", iter(recipients), streams=4)
    again = client.publish("c1", iter(recipients), streams=4)

    # Then every request was answered once (no retry), and
    assert handler.paths().count("/campaigns/c1/publish") == 22
    assert (published.accepted, published.duplicates, published.requests) == (1_050, 30, 11)
    # and each recipient is in exactly one batch record; the re-run added none
    batches = batch_records(system, "c1")
    ids = [rid for batch in batches for rid in batch]
    assert len(ids) == len(set(ids)) == 1_050 and len(batches) == published.batches_new == 11
    assert (again.accepted, again.batches_new, again.batches_already_enqueued, again.messages_sent) == (1_050, 0, 11, 0)
    # (that the consumer sends a campaign published in streams once each: the next test)


def test_a_refused_request_among_streams_says_exactly_which_requests_landed(system, recording_api, client):
    handler, _ = recording_api
    client.create_campaign(spec(system))
    # Given 12 recipients in 4 requests of 3, the third request holding a bad address
    recipients = people(system, 12)
    recipients[7] = {"recipient_id": "r7", "email": "not-an-address"}
    chunked = Client(client.api_url, session=boto3.session.Session(), chunk_size=3)

    # When they are published in 4 streams (the first request alone, then the other three at once)
    with pytest.raises(PublishFailed) as failed:
        chunked.publish("c1", recipients, streams=4)

    # Then the error names the caller's position, and the requests before and after it landed
    error = failed.value
    assert error.status == 422 and [f.path for f in error.fields] == ["body.recipients.7.email"]
    assert error.landed == [(0, 5), (9, 11)]
    assert [(first, last, type(e).__name__) for first, last, e in error.failed] == [(6, 8, "InvalidRequest")]
    assert (error.published.accepted, error.published.requests) == (9, 3)
    assert sorted(rid for batch in batch_records(system, "c1") for rid in batch) == sorted(
        f"r{i}" for i in (0, 1, 2, 3, 4, 5, 9, 10, 11)
    )

    # When the address is fixed and the same call made again
    recipients[7] = people(system, 1, start=7)[0]
    again = chunked.publish("c1", recipients, streams=4)
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)

    # Then only the refused request's recipients are new, and everyone is sent once
    assert (again.accepted, again.batches_new, again.batches_already_enqueued) == (12, 1, 3)
    deliveries = system.deliveries()
    assert len(deliveries) == 12 and set(deliveries.values()) == {1}


def test_streams_must_be_between_1_and_32(system, client):
    with pytest.raises(ValueError, match="streams must be 1..32"):
        client.publish("c1", people(system, 1), streams=0)


def test_a_forecast_inline_or_from_s3_is_typed_priced_and_publishes_nothing(system, recording_api, client):
    # Given a campaign and the same people inline and as an S3 object, one bad row, one repeat
    client.create_campaign(spec(system))
    rows = people(system, 4) + people(system, 1) + [{"recipient_id": "bad", "email": "nobody"}]
    s3 = boto3.client("s3")
    bucket = f"sendonce-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="list.jsonl", Body="".join(json.dumps(r) + "\n" for r in rows).encode())
    s3.put_object(Bucket=bucket, Key="headless.csv", Body=b"id,address\nr1,a@example.com\n")

    inline = client.forecast("c1", iter(rows))
    from_s3 = client.forecast("c1", s3=f"s3://{bucket}/list.jsonl")

    counts = ("rows_read", "bad_rows", "repeated_ids", "suppressed", "audience", "groups")
    assert (inline.rows_read, inline.bad_rows, inline.repeated_ids, inline.audience) == (6, 1, 1, 4)
    assert inline.problems[-1] == "recipients.5: email: not a valid email address"
    assert [getattr(from_s3, k) for k in counts] == [getattr(inline, k) for k in counts]
    assert from_s3.job_id is not None and from_s3.exact and from_s3.extra["parts"] == 1
    assert from_s3.problems[-1] == "6: email: not a valid email address"  # JSON Lines: no header
    # Priced by the client with sendonce cost's model: this API does not carry it
    assert inline.cost["aws_total"] > 0 and inline.cost == from_s3.cost
    # A file the job cannot read fails the job, and the wait says why
    with pytest.raises(JobFailed, match="recipient_id and email"):
        client.forecast("c1", s3={"bucket": bucket, "key": "headless.csv"})
    with pytest.raises(NotFound):
        client.forecast("nope", rows)
    # Nothing was published
    assert client.get_campaign("c1")["state"] == "draft" and client.status("c1")["total"] == 0
