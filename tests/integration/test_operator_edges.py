"""The edges of operator input against the real parts (boto3 against moto's server): the
largest recipients the validators accept are published and resumed without stranding
anyone, and the API answers malformed bodies with a 4xx naming the body."""

from __future__ import annotations

import json

import boto3
import pytest

from sendonce.adapters.sqs_queue import SqsQueue
from sendonce.domain import limits
from sendonce.domain.campaigns.recipients_file import InlineRecipient
from sendonce.domain.models import CampaignState
from sendonce.handlers import api
from sendonce_local.http_api import http_api_event
from sendonce_ops.sqs_tools import queue_depths
from tests.integration.operator_helpers import OPERATOR_ARN, lambda_context

pytestmark = pytest.mark.integration


def largest_recipients(n: int, domain: str) -> list[InlineRecipient]:
    people = []
    for i in range(n):
        base = InlineRecipient(recipient_id=f"r{i:04d}", email=f"user{i}@{domain}", variables={"note": ""})
        room = limits.RECIPIENT_JSON_BYTES - len(base.model_dump_json().encode())
        people.append(
            InlineRecipient(recipient_id=f"r{i:04d}", email=f"user{i}@{domain}", variables={"note": "x" * room})
        )
    return people


def test_the_queue_splits_send_message_batch_by_bytes_as_well_as_by_count(system):
    sqs = boto3.client("sqs")
    queue = SqsQueue(client=sqs, queue_url=system.resources.queue_url)
    bodies = [json.dumps({"n": i, "pad": "x" * 200_000}) for i in range(10)]  # 2 MB: over any request limit
    sent = []
    sqs.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch", lambda params, **_: sent.append(len(params["Entries"]))
    )

    queue.publish("c1", bodies)

    assert queue_depths(sqs, system.resources.queue_url)["visible"] == 10
    assert sent == [1] * 10  # 200 KB each: one per 256 KiB request


def test_a_body_larger_than_an_sqs_message_is_refused_before_anything_is_sent(system):
    sqs = boto3.client("sqs")
    queue = SqsQueue(client=sqs, queue_url=system.resources.queue_url)

    with pytest.raises(ValueError, match="larger than SQS's 262,144 bytes"):
        queue.publish("c1", ["small", "x" * (limits.SQS_MESSAGE_BYTES + 1)])

    assert queue_depths(sqs, system.resources.queue_url)["visible"] == 0


def test_the_largest_recipients_are_published_and_resumed_with_nobody_left_pending(system):
    system.campaign()
    people = largest_recipients(1000, system.domain)  # 10 batches of ~250 KB each

    report = system.operator.publish("c1", people)
    system.operator.pause("c1")
    _, job = system.operator.resume("c1")
    republished = job.progress["republished"]

    sqs = boto3.client("sqs")
    assert (report.accepted, report.messages_sent) == (1000, 10)
    assert republished == 1000
    assert queue_depths(sqs, system.resources.queue_url)["visible"] == 20
    assert system.operator.get("c1").state is CampaignState.SENDING


def raw_call(system, method: str, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, dict]:
    event = http_api_event(
        method=method, target=path, headers={"content-type": content_type}, body=body, caller_arn=OPERATOR_ARN
    )
    response = api.lambda_handler(event, lambda_context(), service=system.operator)
    return response["statusCode"], json.loads(response["body"])


@pytest.mark.parametrize("path", ["/campaigns", "/campaigns/c1/pause", "/campaigns/c1/publish"])
@pytest.mark.parametrize(
    "body, content_type, message",
    [
        (b"\xff\xfe{", "application/json", "body: not UTF-8 text"),
        (b"{not json", "application/json", "body: not valid JSON: Expecting property name enclosed in double quotes"),
        (b'{"reason": NaN}', "application/json", "body: not valid JSON: NaN is not JSON"),
        (b"[" * 10_000 + b"]" * 10_000, "application/json", "body: not valid JSON: nested deeper than 32 levels"),
        (b'{"reason": "\\ud800"}', "application/json", "body: not valid JSON: a string holds a lone surrogate"),
        (b"{}", "text/plain", "body: send JSON with content-type application/json"),
    ],
)
def test_a_body_that_is_not_utf8_json_is_a_400_naming_the_body_never_a_500(system, path, body, content_type, message):
    system.campaign()

    status, answer = raw_call(system, "POST", path, body, content_type)

    assert status == 400
    assert answer["error"] == "InvalidBody" and answer["message"].startswith(message)


def test_an_oversized_template_or_an_injected_header_is_a_422_naming_the_field(system):
    base = {
        "id": "c9",
        "name": "n",
        "subject": "s",
        "from": f"news@{system.domain}",
        "html": "<p>x</p>",
        "provider": "resend",
    }

    large = raw_call(system, "POST", "/campaigns", json.dumps({**base, "html": "x" * 500_000}).encode())
    injected = raw_call(
        system,
        "POST",
        "/campaigns",
        json.dumps({**base, "from": f"News\r\nBcc: x@evil.example <news@{system.domain}>"}).encode(),
    )
    batch_on_ses = raw_call(
        system, "POST", "/campaigns", json.dumps({**base, "provider": "ses", "delivery_mode": "batch"}).encode()
    )

    assert large[0] == 422 and large[1]["detail"][0]["loc"] == ["body", "html"]
    assert injected[0] == 422 and injected[1]["message"].startswith("body.from: not a valid sender address")
    assert batch_on_ses[0] == 400 and batch_on_ses[1]["message"].startswith("delivery_mode: 'batch' needs a provider")
    with pytest.raises(Exception):  # noqa: B017 - nothing was created
        system.operator.get("c9")


def test_delivery_mode_batch_is_created_and_shown_by_the_api(system):
    body = {
        "id": "c8",
        "name": "n",
        "subject": "s",
        "from": f"news@{system.domain}",
        "html": "<p>x</p>",
        "provider": "resend",
        "delivery_mode": "batch",
    }

    created = raw_call(system, "POST", "/campaigns", json.dumps(body).encode())
    shown = raw_call(system, "GET", "/campaigns/c8", b"")

    assert created[0] == 201 and created[1]["delivery_mode"] == "batch"
    assert shown[1]["delivery_mode"] == "batch"
    assert system.operator.get("c8").delivery_mode == "batch"


def test_inline_publish_reports_and_optionally_dedupes_a_repeated_address(system):
    system.campaign()
    people = [
        {"recipient_id": "r1", "email": f"ann@{system.domain}"},
        {"recipient_id": "r2", "email": f"ANN@{system.domain.upper()}"},
        {"recipient_id": "r3", "email": f"ann+news@{system.domain}"},
    ]

    reported = raw_call(system, "POST", "/campaigns/c1/publish", json.dumps({"recipients": people}).encode())
    system.campaign("c2")
    deduped = raw_call(
        system, "POST", "/campaigns/c2/publish", json.dumps({"recipients": people, "dedupe_addresses": True}).encode()
    )

    assert reported[0] == 200
    assert (reported[1]["accepted"], reported[1]["duplicate_addresses"]) == (3, 1)
    assert reported[1]["problems"] == [
        "recipients.1: same address as recipients.0, under another recipient_id; "
        "published (it gets the email twice; dedupe addresses to send it once)"
    ]
    assert (deduped[1]["accepted"], deduped[1]["duplicate_addresses"]) == (2, 1)
    assert "ann" not in json.dumps(reported[1]).lower()


def test_the_cli_reports_a_repeated_address_with_both_lines_and_dedupes_it_on_request(system, tmp_path):
    from tests.integration.operator_helpers import as_json, sendonce

    people = tmp_path / "people.csv"
    people.write_text(
        f"recipient_id,email\nr1,ann@{system.domain}\nr2,bob@{system.domain}\nr3, Ann@{system.domain.upper()}\n"
    )
    system.campaign("c1", delivery_mode="batch")
    system.campaign("c2")

    reported = sendonce(system, "campaign", "publish", "c1", "--recipients", str(people), "--json")
    deduped = sendonce(system, "campaign", "publish", "c2", "--recipients", str(people), "--dedupe-addresses", "--json")
    status = as_json(sendonce(system, "campaign", "status", "c1", "--json"))

    assert (
        reported.exit_code == 0 and f"{people}:4: same address as line 2, under another recipient_id" in reported.stderr
    )
    assert as_json(reported)["duplicate_addresses"] == 1 and as_json(reported)["accepted"] == 3
    assert f"{people}:4: same address as line 2; not published (dedupe addresses)" in deduped.stderr
    assert as_json(deduped)["accepted"] == 2
    assert "ann@" not in (reported.stderr + deduped.stderr).lower()
    assert status["delivery_mode"] == "batch"
