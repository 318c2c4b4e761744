"""The operator HTTP API: its Lambda handler with API Gateway HTTP API v2 events, and the
same handler behind `sendonce local api`, against moto's server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid

import boto3
import pytest
import requests

from sendonce.domain.models import CampaignState
from sendonce.handlers import api
from sendonce_ops.sqs_tools import queue_depths
from tests.integration.operator_helpers import OPERATOR_ARN, SENDONCE, api_event, cli_env, lambda_context, wait_for

pytestmark = pytest.mark.integration


def call(system, method: str, path: str, body=None, caller: str = OPERATOR_ARN) -> tuple[int, dict]:
    response = api.lambda_handler(api_event(method, path, body, caller), lambda_context(), service=system.operator)
    return response["statusCode"], json.loads(response["body"])


def campaign_body(system, campaign_id: str = "c1", **overrides) -> dict:
    return {
        "id": campaign_id,
        "name": "Spring launch",
        "subject": "Hello {{ name }}",
        "from": f"News <news@{system.domain}>",
        "html": "<p>Hi {{ name }}</p>",
        "provider": "resend",
        **overrides,
    }


def test_campaign_lifecycle_over_the_api_records_the_iam_caller(system):
    created = call(system, "POST", "/campaigns", campaign_body(system))
    recipients = [
        {"recipient_id": f"r{i}", "email": f"user{i}@{system.domain}", "variables": {"name": f"U{i}"}}
        for i in range(12)
    ]
    published = call(system, "POST", "/campaigns/c1/publish", {"recipients": recipients + recipients[:2]})
    paused = call(system, "POST", "/campaigns/c1/pause", {"reason": "legal review"})
    status = call(system, "GET", "/campaigns/c1/delivery-status")
    resumed = call(system, "POST", "/campaigns/c1/resume", caller="arn:aws:iam::123456789012:user/bob")
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    done = call(system, "GET", "/campaigns/c1/delivery-status")

    assert created[0] == 201
    assert created[1]["state"] == "draft" and created[1]["from"] == f"News <news@{system.domain}>"
    assert published == (
        200,
        {
            "campaign_id": "c1",
            "accepted": 12,
            "bad_rows": 0,
            "duplicates": 2,
            "duplicate_addresses": 0,
            "problems": [
                "recipients.12: recipient_id 'r0' repeats recipients.0; published once",
                "recipients.13: recipient_id 'r1' repeats recipients.1; published once",
            ],
            "batches_new": 1,
            "batches_already_enqueued": 0,
            "messages_sent": 1,
            "batches_recorded": 0,
            "send_at": None,
        },
    )
    assert paused[0] == 200
    assert (paused[1]["state"], paused[1]["state_reason"], paused[1]["state_changed_by"]) == (
        "paused",
        "legal review",
        OPERATOR_ARN,
    )
    assert status == (
        200,
        {
            "campaign_id": "c1",
            "state": "paused",
            "state_reason": "legal review",
            "total": 12,
            "pending": 12,
            "in_progress": 0,
            "reserved": 0,
            "sent": 0,
            "failed": 0,
            "suppressed": 0,
            "unknown": 0,
            "cancelled": 0,
            "dead_lettered": 0,
            "remaining": 12,
            "test_sends": {"count": 0, "recent": []},
            "ab_test": None,
        },
    )
    assert resumed[0] == 202 and resumed[1]["republished"] == 12 and resumed[1]["job"]["state"] == "done"
    assert resumed[1]["state_changed_by"] == "arn:aws:iam::123456789012:user/bob"
    assert done[1]["state"] == "completed" and (done[1]["sent"], done[1]["remaining"]) == (12, 0)
    deliveries = system.deliveries()
    assert len(deliveries) == 12 and set(deliveries.values()) == {1}


def test_errors_map_to_http_codes_with_a_body_naming_the_problem(system):
    call(system, "POST", "/campaigns", campaign_body(system))

    not_found = call(system, "POST", "/campaigns/nope/pause")
    illegal = call(system, "POST", "/campaigns/c1/resume")
    exists = call(system, "POST", "/campaigns", campaign_body(system))
    unknown_provider = call(system, "POST", "/campaigns", campaign_body(system, "c2", provider="mailgun"))
    bad_sender = call(system, "POST", "/campaigns", campaign_body(system, "c3", **{"from": "nobody"}))
    too_fast = call(system, "POST", "/campaigns", campaign_body(system, "c4", max_rate=50))  # Resend: 5/s
    bad_priority = call(system, "POST", "/campaigns", campaign_body(system, "c5", priority="urgent"))
    unknown_group = call(system, "POST", "/campaigns", campaign_body(system, "c6", pacing={"gogle": 4}))
    zero_cap = call(system, "POST", "/campaigns", campaign_body(system, "c7", pacing={"google": 0}))
    capped = call(system, "POST", "/campaigns", campaign_body(system, "c8", pacing={"google": 4}))
    bad_recipient = call(
        system, "POST", "/campaigns/c1/publish", {"recipients": [{"recipient_id": "r1", "email": "not-an-address"}]}
    )
    too_many = call(
        system,
        "POST",
        "/campaigns/c1/publish",
        {"recipients": [{"recipient_id": f"r{i}", "email": f"u{i}@{system.domain}"} for i in range(1001)]},
    )
    neither = call(system, "POST", "/campaigns/c1/publish", {"strict": False})
    null = call(system, "POST", "/campaigns/c1/publish", {"recipients": None})
    bad_id = call(system, "GET", "/campaigns/someone@example.com/delivery-status")
    no_route = call(system, "DELETE", "/campaigns/c1")

    assert not_found == (
        404,
        {"statusCode": 404, "error": "CampaignNotFound", "message": "campaign 'nope' does not exist"},
    )
    assert illegal[0] == 409 and "is draft; cannot move to sending" in illegal[1]["message"]
    assert exists[0] == 409 and "already exists" in exists[1]["message"]
    assert unknown_provider[0] == 400 and unknown_provider[1]["message"].startswith(
        "provider: 'mailgun' is not registered"
    )
    assert bad_sender[0] == 422 and bad_sender[1]["message"].startswith("body.from: not a valid sender address")
    assert too_fast == (
        409,
        {
            "statusCode": 409,
            "error": "ConflictingRequest",
            "message": "max_rate: 50 is above provider 'resend''s rate of 5 requests/s",
        },
    )
    assert bad_priority[0] == 422 and bad_priority[1]["message"] == "body.priority: must be normal or high"
    assert unknown_group[0] == 409 and unknown_group[1]["message"].startswith(
        "pacing.gogle: unknown mailbox group; the groups are google, microsoft, yahoo, apple, other"
    )
    assert zero_cap[0] == 422 and zero_cap[1]["message"].startswith("body.pacing.google:")
    assert capped[0] == 201 and capped[1]["pacing"] == {"google": 4}
    assert bad_recipient[0] == 422
    assert bad_recipient[1]["message"] == "body.recipients.0.email: not a valid email address"
    assert "not-an-address" not in json.dumps(bad_recipient[1])  # the input is never echoed
    assert too_many[0] == 422 and too_many[1]["detail"][0]["type"] == "too_long"
    assert neither[0] == 422 and "exactly one of recipients or s3" in neither[1]["message"]
    assert null[0] == 422 and null[1]["detail"][0]["loc"] == ["body", "recipients"]
    assert bad_id[0] == 422 and bad_id[1]["detail"][0]["loc"] == ["path", "campaign_id"]
    assert no_route == (
        405,
        {
            "statusCode": 405,
            "error": "MethodNotAllowed",
            "message": "DELETE is not served on /campaigns/c1 (allowed: GET)",
        },
    )
    assert system.operator.get("c1").state is CampaignState.DRAFT
    assert queue_depths(boto3.client("sqs"), system.resources.queue_url)["visible"] == 0


def test_a_valid_publish_the_campaigns_state_forbids_is_a_409_like_every_state_conflict(system):
    # Given a cancelled campaign
    call(system, "POST", "/campaigns", campaign_body(system))
    call(system, "POST", "/campaigns/c1/cancel")

    # When a valid publish and a resume reach it
    publish = call(
        system,
        "POST",
        "/campaigns/c1/publish",
        {"recipients": [{"recipient_id": "r1", "email": f"u1@{system.domain}"}]},
    )
    resume = call(system, "POST", "/campaigns/c1/resume")

    # Then both are conflicts with its state, not invalid input
    assert publish == (
        409,
        {
            "statusCode": 409,
            "error": "IllegalTransition",
            "message": "campaign 'c1' is cancelled; nothing can be published to it",
        },
    )
    assert resume[0] == 409 and resume[1]["error"] == "IllegalTransition"
    assert system.operator.status("c1").total == 0


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("TRACE", "/campaigns", "GET, POST"),
        ("PUT", "/campaigns", "GET, POST"),
        ("OPTIONS", "/campaigns", "GET, POST"),
        ("DELETE", "/campaigns/c1", "GET"),
        ("GET", "/campaigns/c1/publish", "POST"),
        ("HEAD", "/campaigns/c1/delivery-status", "GET"),
        ("POST", "/openapi.json", "GET"),
    ],
)
def test_a_method_a_served_path_does_not_take_is_a_405_naming_the_allowed_ones(system, method, path, allow):
    response = api.lambda_handler(
        api_event(method, path, None, OPERATOR_ARN), lambda_context(), service=system.operator
    )

    assert response["statusCode"] == 405
    assert response["headers"]["Allow"] == allow
    assert json.loads(response["body"])["error"] == "MethodNotAllowed"


@pytest.mark.parametrize(("method", "path"), [("TRACE", "/nothing"), ("GET", "/campaigns/c1/archive"), ("GET", "/")])
def test_a_path_the_api_does_not_serve_is_a_404(system, method, path):
    status, body = call(system, method, path)

    assert (status, body["error"]) == (404, "NotFound")
    assert body["message"] == f"no route for {method} {path}"


def test_publish_from_s3_is_a_job_and_strict_rejects_a_bad_file_whole(system):
    s3 = boto3.client("s3")
    bucket = f"sendonce-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    good = "".join(f"r{i},user{i}@{system.domain},U{i}\n" for i in range(150))
    s3.put_object(Bucket=bucket, Key="lists/good.csv", Body=f"recipient_id,email,name\n{good}".encode())
    s3.put_object(
        Bucket=bucket,
        Key="lists/bad.csv",
        Body=f"recipient_id,email,name\nx1,nobody,X\n{good}x2,x2@{system.domain}\n".encode(),
    )
    call(system, "POST", "/campaigns", campaign_body(system))

    strict = call(system, "POST", "/campaigns/c1/publish", {"s3": {"bucket": bucket, "key": "lists/bad.csv"}})
    missing = call(system, "POST", "/campaigns/c1/publish", {"s3": {"bucket": bucket, "key": "lists/none.csv"}})
    assert system.operator.get("c1").state is CampaignState.DRAFT  # nothing was published
    lenient = call(
        system, "POST", "/campaigns/c1/publish", {"s3": {"bucket": bucket, "key": "lists/bad.csv"}, "strict": False}
    )
    again = call(system, "POST", "/campaigns/c1/publish", {"s3": {"bucket": bucket, "key": "lists/good.csv"}})

    # Without a jobs queue (as here) the job runs in the call; the answer is the job.
    assert strict[0] == 202 and (strict[1]["kind"], strict[1]["state"]) == ("publish_s3", "failed")
    assert strict[1]["error"] == (
        f"s3://{bucket}/lists/bad.csv: 2 bad row(s); nothing was published: "
        "line 2: email: not a valid email address; line 153: expected 3 columns, found 2"
    )
    assert missing[0] == 409 and "cannot be read (404)" in missing[1]["message"]  # the HEAD, before any job
    assert lenient[0] == 202 and lenient[1]["state"] == "done"
    progress = lenient[1]["progress"]
    assert (progress["accepted"], progress["bad_rows"], progress["batches_new"]) == (150, 2, 2)
    assert lenient[1]["result"]["problems"] == [
        "2: email: not a valid email address",
        "153: expected 3 columns, found 2",
    ]
    again = again[1]["progress"]
    assert (again["accepted"], again["batches_new"], again["messages_sent"]) == (150, 0, 0)
    assert system.operator.status("c1").total == 150


def test_reconcile_answers_202_with_its_job_and_the_job_holds_the_drifts(system):
    system.campaign(ledger_shards=2)
    system.operator.publish("c1", system.recipients(5))
    system.poller().run_until_idle(idle_seconds=1, max_seconds=60)

    status, job = call(system, "POST", "/campaigns/c1/reconcile")
    missing = call(system, "POST", "/campaigns/nope/reconcile")

    assert status == 202 and job["kind"] == "reconcile" and job["campaign_id"] == "c1"
    # Without a jobs queue (as here) the job ran in the call; GET /jobs/{id} shows it.
    status, shown = call(system, "GET", f"/jobs/{job['job_id']}")
    assert status == 200 and shown["state"] == "done" and shown["progress"]["ledger_sent"] == 5
    assert shown["result"]["ledger"]["sent"] == 5 and shown["result"]["drifts"] == []
    assert missing[0] == 404


def test_the_openapi_document_describes_every_route(system):
    status, document = call(system, "GET", "/openapi.json")

    assert status == 200 and document["openapi"].startswith("3.1")
    assert set(document["paths"]) == {
        "/campaigns",
        "/campaigns/{campaign_id}",
        "/campaigns/{campaign_id}/publish",
        "/campaigns/{campaign_id}/forecast",
        "/campaigns/{campaign_id}/pause",
        "/campaigns/{campaign_id}/resume",
        "/campaigns/{campaign_id}/cancel",
        "/campaigns/{campaign_id}/pick",
        "/campaigns/{campaign_id}/reschedule",
        "/campaigns/{campaign_id}/unschedule",
        "/campaigns/{campaign_id}/delivery-status",
        "/campaigns/{campaign_id}/preview",
        "/campaigns/{campaign_id}/test-sends",
        "/campaigns/{campaign_id}/reconcile",
        "/campaigns/{campaign_id}/audit",
        "/jobs/{job_id}",
    }
    create = document["paths"]["/campaigns"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CampaignSpec"
    }
    assert {"201", "400", "409", "422"} <= set(create["responses"])
    listing = document["paths"]["/campaigns"]["get"]
    assert set(listing["responses"]) == {"200", "422", "500"}
    [state] = listing["parameters"]
    assert (state["name"], state["in"], state["required"]) == ("state", "query", False)
    assert document["components"]["schemas"]["CampaignState"]["enum"] == [s.value for s in CampaignState]
    assert "reserved" in document["components"]["schemas"]["DeliveryStatusView"]["properties"]
    assert set(document["paths"]["/campaigns/{campaign_id}/publish"]["post"]["responses"]) >= {
        "200",
        "400",
        "404",
        "409",
    }
    forecast = document["paths"]["/campaigns/{campaign_id}/forecast"]["post"]["responses"]
    assert set(forecast) == {"200", "202", "400", "404", "409", "422", "500"}
    assert forecast["202"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/JobView"}


def test_a_created_campaign_links_to_every_operation_on_it(system):
    _, document = call(system, "GET", "/openapi.json")
    per_campaign = {
        (method, path) for path, item in document["paths"].items() if "{campaign_id}" in path for method in item
    }

    links = document["paths"]["/campaigns"]["post"]["responses"]["201"]["links"]

    targets = set()
    for link in links.values():
        pointer = link["operationRef"].removeprefix("#/paths/")
        path, method = pointer.rsplit("/", 1)
        targets.add((method, path.replace("~1", "/").replace("~0", "~")))
        assert link["parameters"] == {"campaign_id": "$response.body#/campaign_id"}
    assert targets == per_campaign
    # Every other answer naming a campaign links on the same way (a sequence can go on from it).
    for path, method, status in [
        ("/campaigns/{campaign_id}", "get", "200"),
        ("/campaigns/{campaign_id}/publish", "post", "200"),
        ("/campaigns/{campaign_id}/pause", "post", "200"),
        ("/campaigns/{campaign_id}/resume", "post", "202"),
        ("/campaigns/{campaign_id}/cancel", "post", "202"),
        ("/campaigns/{campaign_id}/delivery-status", "get", "200"),
    ]:
        assert document["paths"][path][method]["responses"][status]["links"] == links, path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def local_api(system):
    port = _free_port()
    process = subprocess.Popen(
        [str(SENDONCE), "local", "api", "--port", str(port)],
        env={**os.environ, **cli_env(system)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"

    def answering():
        try:
            return requests.get(f"{url}/openapi.json", timeout=1).status_code == 200
        except requests.ConnectionError:
            assert process.poll() is None, process.stderr.read()
            return False

    wait_for(answering, timeout=30, interval=0.1)
    yield url
    process.terminate()
    _, errors = process.communicate(timeout=10)
    assert process.returncode == 0, errors


def test_sendonce_local_api_serves_the_same_handler_over_http(system, local_api):
    created = requests.post(f"{local_api}/campaigns", json=campaign_body(system), timeout=10)
    published = requests.post(
        f"{local_api}/campaigns/c1/publish",
        timeout=10,
        json={"recipients": [{"recipient_id": "r1", "email": f"user1@{system.domain}"}]},
    )
    paused = requests.post(f"{local_api}/campaigns/c1/pause", timeout=10)  # curl -X POST .../pause: no body
    again = requests.post(f"{local_api}/campaigns/c1/pause", timeout=10)  # the pause is now ann's: 200
    existing = requests.post(f"{local_api}/campaigns", json=campaign_body(system), timeout=10)
    status = requests.get(f"{local_api}/campaigns/c1/delivery-status", timeout=10)
    swagger = requests.get(f"{local_api}/swagger", timeout=10)
    trace = requests.request("TRACE", f"{local_api}/campaigns", timeout=10)
    unknown = requests.get(f"{local_api}/nothing", timeout=10)

    assert created.status_code == 201 and created.headers["content-type"].startswith("application/json")
    assert published.status_code == 200 and published.json()["accepted"] == 1
    assert paused.status_code == 200 and paused.json()["state_changed_by"] == "ann"
    assert again.status_code == 200 and again.json()["state"] == "paused"
    assert existing.status_code == 409 and existing.json()["error"] == "IllegalTransition"
    assert status.json()["state"] == "paused" and status.json()["pending"] == 1
    assert swagger.status_code == 200 and "swagger-ui" in swagger.text
    assert trace.status_code == 405 and trace.headers["Allow"] == "GET, POST"
    assert trace.json()["error"] == "MethodNotAllowed"
    assert unknown.status_code == 404 and unknown.json()["error"] == "NotFound"


def test_an_ab_campaigns_delivery_status_carries_its_test_until_and_after_the_pick(system):
    body = campaign_body(
        system,
        "ab",
        subject=None,
        variants=[{"id": "A", "subject": "A {{ name }}"}, {"id": "B", "subject": "B {{ name }}"}],
        test={"share": 0.5, "pick_by": "opens", "after": "1h"},
        tracking={"opens": True},
    )
    body.pop("subject")
    recipients = [
        {"recipient_id": f"r{i}", "email": f"user{i}@{system.domain}", "variables": {"name": f"U{i}"}}
        for i in range(10)
    ]
    assert call(system, "POST", "/campaigns", body)[0] == 201
    assert call(system, "POST", "/campaigns/ab/publish", {"recipients": recipients})[0] == 200
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    waiting = call(system, "GET", "/campaigns/ab/delivery-status")
    picked = call(system, "POST", "/campaigns/ab/pick", {"variant": "B", "reason": "by hand"})
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    done = call(system, "GET", "/campaigns/ab/delivery-status")
    campaign = call(system, "GET", "/campaigns/ab")
    plain = call(system, "POST", "/campaigns", campaign_body(system, "plain"))

    assert waiting[0] == 200 and waiting[1]["pending"] > 0 and waiting[1]["sent"] + waiting[1]["pending"] == 10
    assert waiting[1]["ab_test"]["awaiting_winner"] is True and set(waiting[1]["ab_test"]["variants"]) == {"A", "B"}
    assert picked[0] == 200 and picked[1]["decided_now"] is True
    assert done[1]["sent"] == 10 and done[1]["ab_test"]["decision"]["variant"] == "B"
    assert system.deliveries() == {f"user{i}@{system.domain}": 1 for i in range(10)}
    assert plain[0] == 201 and call(system, "GET", "/campaigns/plain/delivery-status")[1]["ab_test"] is None
    # The campaign itself carries its test and the decision; a campaign without one, nulls
    assert campaign[1]["ab_test"] == {"variants": ["A", "B"], "share": 0.5, "pick_by": "opens", "after_s": 3600}
    assert campaign[1]["decision"]["variant"] == "B" and campaign[1]["decision"]["reason"] == "by hand"
    assert (plain[1]["ab_test"], plain[1]["decision"]) == (None, None)
