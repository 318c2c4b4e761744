"""Issue 36: requests the operator API's own OpenAPI document calls valid, each sent exactly as
a fuzz found it through the real handler (with a scheduler, as deployed), answer as the
document says; and the document states each rule the API has (an IANA zone, RFC 3339 times)."""

from __future__ import annotations

import json
import re

import pytest

from sendonce.handlers import api
from tests.integration.operator_helpers import api_event, lambda_context, scheduling_operator

pytestmark = pytest.mark.integration

DOCUMENT = json.loads(api.document())
SPEC = DOCUMENT["components"]["schemas"]["CampaignSpec"]


@pytest.fixture
def call(system):
    service = scheduling_operator(system)

    def send(method: str, path: str, body=None, *, raw: str | None = None) -> tuple[int, dict]:
        event = api_event(method, path, body)
        if raw is not None:
            event["body"] = raw
        answer = api.lambda_handler(event, lambda_context(), service=service)
        return answer["statusCode"], json.loads(answer["body"])

    return send


def _draft(call, campaign_id: str = "0") -> None:
    spec = {"id": campaign_id, "name": "n", "subject": "s", "from": "a@b.example", "html": "<p>x</p>"}
    assert call("POST", "/campaigns", {**spec, "provider": "resend"})[0] == 201


def _schema_of(name: str) -> dict:
    return DOCUMENT["components"]["schemas"][name]


def test_a_window_zone_the_document_does_not_list_is_refused_and_every_listed_one_is_accepted(call):
    zones = _schema_of("SendWindow")["properties"]["tz"]["enum"]
    window = {"days": ["mon"], "from": "09:00", "to": "17:00"}
    spec = {"name": "n", "subject": "s", "from": "a@b.example", "html": "<p>x</p>", "provider": "resend"}

    zeros = call("POST", "/campaigns", {**spec, "id": "w0", "window": {**window, "tz": "0" * 63}})
    listed = call("POST", "/campaigns", {**spec, "id": "w1", "window": {**window, "tz": zones[-1]}})

    assert "0" * 63 not in zones and "Europe/Berlin" in zones
    assert zeros[0] == 422 and zeros[1]["detail"][0]["loc"] == ["body", "window", "tz"]
    assert listed[0] == 201


def test_a_window_whose_to_is_before_its_from_spans_midnight_and_is_accepted(call):
    spec = {"id": "night", "name": "n", "subject": "s", "from": "a@b.example", "html": "<p>x</p>"}
    window = {"days": ["fri"], "from": "22:00", "to": "00:00", "tz": "Europe/Berlin"}

    created = call("POST", "/campaigns", {**spec, "provider": "resend", "window": window})

    assert created[0] == 201


def test_the_fuzzed_create_with_a_past_send_at_is_a_409_and_its_astral_sender_is_fine(call):
    # The fuzz's request (its `from` holds U+DF2E9, written as a surrogate *pair*: one character).
    raw = (
        '{"from": "\\u00d4\\u00d6\\u00f3\\udb3c\\udee9\\u00ab@B.A.wIC01L060.3qO3", "id": "0", "name": "\\u00ed", '
        '"provider": "resend", "subject": "\\u00d5\\u012c\\u010c\\u00dd\\u00f1\\u012fU", "text": "0", '
        '"delivery_mode": "single", "html": "", "ledger_shards": 1, "reply_to": "0@0.0", '
        '"send_at": "2000-01-01T00:00:00Z", "window": null}'
    )
    status, answer = call("POST", "/campaigns", raw=raw)

    assert (status, answer["error"]) == (409, "ConflictingRequest") and "send_at" in answer["message"]
    assert "in the past" in answer["message"]


def test_the_fuzzed_create_with_a_max_rate_above_the_providers_rate_is_a_409_naming_max_rate(call):
    # Schema-valid (no document can state a deployment's rates): refused by what stands now.
    body = {"id": "0", "name": "0", "subject": "0", "from": "0@0.0", "text": "0", "provider": "resend"}

    status, answer = call("POST", "/campaigns", {**body, "delivery_mode": "batch", "max_rate": 99999.0})

    assert (status, answer["error"]) == (409, "ConflictingRequest")
    assert answer["message"] == "max_rate: 99999 is above provider 'resend''s rate of 5 requests/s"


def test_a_max_rate_dynamodb_cannot_store_is_outside_the_documents_range(call):
    # The fuzz's 5e-324 passed `exclusiveMinimum: 0` and failed the store's write (a 500).
    body = {"name": "n", "subject": "s", "from": "a@b.example", "html": "<p>x</p>", "provider": "resend"}
    rate = SPEC["properties"]["max_rate"]["anyOf"][0]

    tiny = call("POST", "/campaigns", {**body, "id": "tiny", "max_rate": 5e-324})
    least = call("POST", "/campaigns", {**body, "id": "least", "max_rate": rate["minimum"]})

    assert (rate["minimum"], rate["maximum"]) == (0.001, 100_000)
    assert tiny[0] == 422 and tiny[1]["detail"][0]["loc"] == ["body", "max_rate"]
    assert least[0] == 201 and call("GET", "/campaigns/least")[1]["max_rate"] == 0.001


def test_a_lone_surrogate_anywhere_is_a_400_naming_the_body_as_the_document_says(call):
    status, answer = call("POST", "/campaigns", raw='{"id": "0", "from": "\\ud800 <a@b.example>"}')

    assert (status, answer["error"]) == (400, "InvalidBody") and "lone surrogate" in answer["message"]
    assert "lone surrogates" in DOCUMENT["info"]["description"]


def test_the_fuzzed_publish_with_a_send_at_in_year_888_is_a_409_naming_send_at(call):
    _draft(call)
    body = {"recipients": [{"recipient_id": "r", "email": "a@b.example"}], "send_at": "0888-06-22T10:04:02.2844+10:24"}

    status, answer = call("POST", "/campaigns/0/publish", body)

    assert status == 409 and answer["message"].startswith("send_at: 0888-06-21T23:40:02Z is in the past")
    assert call("GET", "/campaigns/0")[1]["state"] == "draft"  # nothing published


def test_the_fuzzed_reschedule_with_a_lower_case_z_is_read_as_rfc_3339_and_refused_only_as_too_far(call):
    _draft(call)
    scheduled = call(
        "POST",
        "/campaigns/0/publish",
        {"recipients": [{"recipient_id": "r", "email": "a@b.example"}], "send_at": _in_a_day()},
    )

    far = call("POST", "/campaigns/0/reschedule", {"send_at": "5107-10-09T21:06:33.00z"})
    soon = call("POST", "/campaigns/0/reschedule", {"send_at": _in_a_day(hours=2, lower=True)})

    assert scheduled[0] == 200
    assert far[0] == 409 and "more than" in far[1]["message"] and "days ahead" in far[1]["message"]
    assert soon[0] == 200 and soon[1]["state"] == "scheduled"


def test_send_at_is_rfc_3339_in_the_document_and_the_api_reads_every_form_of_it(call):
    pattern = re.compile(SPEC["properties"]["send_at"]["anyOf"][0]["pattern"])

    assert SPEC["properties"]["send_at"]["format"] == "date-time"
    for text in ("2026-12-02T09:00:00+01:00", "2026-12-02t09:00:00.123456789z", "0001-01-01T00:00:00Z"):
        assert pattern.search(text), text
    for text in ("2026-12-02 09:00:00Z", "2026-12-02T09:00Z", "2026-13-02T09:00:00Z", "2026-12-02T09:00:60Z"):
        assert not pattern.search(text), text


@pytest.mark.parametrize(
    ("path", "body"),
    [("/campaigns/0/preview", [None, None]), ("/campaigns/0/cancel", [None, None]), ("/campaigns", [{}])],
)
def test_a_json_array_body_is_a_422_naming_the_body_never_its_first_item(call, path, body):
    _draft(call)

    status, answer = call("POST", path, body)

    assert status == 422 and answer["detail"] == [
        {"loc": ["body"], "msg": "a JSON object is expected, not an array", "type": "model_attributes_type"}
    ]
    assert call("GET", "/campaigns/0")[1]["state"] == "draft"


def test_booleans_are_json_booleans_only(call):
    _draft(call)

    status, answer = call(
        "POST", "/campaigns/0/test-sends", {"include_suppressed": 0, "to": ["0@0.0"], "variables": {}}
    )

    assert status == 422 and answer["detail"][0]["loc"] == ["body", "include_suppressed"]


def _in_a_day(hours: int = 0, lower: bool = False) -> str:
    import datetime as dt

    at = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1, hours=hours)).replace(microsecond=0)
    text = at.isoformat().replace("+00:00", "Z")
    return text.replace("T", "t").replace("Z", "z") if lower else text
