"""sendonce_client's pure parts: the region from the URL, recipients as API bodies, error types."""

from __future__ import annotations

from dataclasses import dataclass

import botocore.session
import pytest

from sendonce.domain.models import Recipient
from sendonce_client import Client, Conflict, InvalidRequest, NotFound, SendonceAPIError, ServerError, Throttled
from sendonce_client.client import recipient_dict, region_from_url
from sendonce_client.errors import error_for


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://abc123.execute-api.eu-west-1.amazonaws.com/", "eu-west-1"),
        ("https://ABC123.execute-api.us-east-1.amazonaws.com/prod", "us-east-1"),
        ("https://x1.execute-api.cn-north-1.amazonaws.com.cn", "cn-north-1"),
        ("https://api.example.com", None),
        ("http://127.0.0.1:8080", None),
    ],
)
def test_the_region_comes_from_an_execute_api_url(url, region):
    assert region_from_url(url) == region


def test_the_region_falls_back_to_the_session_and_is_required():
    session = botocore.session.Session()
    session.set_config_variable("region", "ap-south-1")
    bare = botocore.session.Session()
    bare.set_config_variable("region", None)

    assert Client("http://127.0.0.1:1", session=session).region == "ap-south-1"
    assert Client("https://a1.execute-api.eu-west-1.amazonaws.com", session=session).region == "eu-west-1"
    assert Client("http://127.0.0.1:1", session=bare, region="us-west-2").region == "us-west-2"
    with pytest.raises(ValueError, match="no region"):
        Client("http://127.0.0.1:1", session=bare)


@dataclass
class User:
    recipient_id: str
    email: str
    variables: dict


class Row:
    def __init__(self):
        self.recipient_id, self.email = "r3", "d@example.com"


def test_recipients_may_be_mappings_models_dataclasses_or_plain_objects():
    assert recipient_dict({"recipient_id": "r0", "email": "a@example.com"}) == {
        "recipient_id": "r0",
        "email": "a@example.com",
    }
    assert recipient_dict(Recipient(recipient_id="r1", email="b@example.com", variables={"n": 1})) == {
        "recipient_id": "r1",
        "email": "b@example.com",
        "variables": {"n": 1},
    }
    assert recipient_dict(User("r2", "c@example.com", {"name": "C"}))["variables"] == {"name": "C"}
    assert recipient_dict(Row()) == {"recipient_id": "r3", "email": "d@example.com"}
    with pytest.raises(TypeError, match="recipient_id and email"):
        recipient_dict("e@example.com")


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, InvalidRequest),
        (422, InvalidRequest),
        (404, NotFound),
        (409, Conflict),
        (429, Throttled),
        (502, ServerError),
        (403, SendonceAPIError),
    ],
)
def test_each_status_has_its_error_type(status, kind):
    error = error_for(status, {"statusCode": status, "error": "Name", "message": "what and where"})

    assert type(error) is kind and (error.status, error.error, error.message) == (status, "Name", "what and where")


def test_a_422_carries_its_field_errors_and_api_gateways_own_bodies_are_understood():
    error = error_for(
        422,
        {
            "statusCode": 422,
            "error": "ValidationError",
            "message": "body.recipients.3.email: bad",
            "detail": [{"loc": ["body", "recipients", 3, "email"], "msg": "bad", "type": "value_error"}],
        },
    )
    gateway = error_for(403, {"message": "Forbidden"})

    assert [(f.path, f.msg, f.type) for f in error.fields] == [("body.recipients.3.email", "bad", "value_error")]
    assert (gateway.error, gateway.message, gateway.fields) == ("Forbidden", "Forbidden", [])


# --- the forecast ------------------------------------------------------------------------

ANSWER = {
    "campaign_id": "c1", "provider": "ses", "delivery_mode": "single", "rows_read": 3, "bad_rows": 1,
    "repeated_ids": 0, "duplicate_addresses": 0, "dedupe_addresses": False, "suppressed": 0,
    "suppressions_checked": True, "audience": 2, "groups": {"google": 2, "other": 0}, "rate": 14.0,
    "recipients_per_request": 1, "recipients_per_s": 14.0, "campaigns_sharing": 0, "starts_at_ms": 0,
    "ends_at_ms": 143, "starts_at": "1970-01-01T00:00:00Z", "ends_at": "1970-01-01T00:00:00Z", "eta_s": 0.143,
    "not_applied": ["warm-up"], "problems": ["recipients.2: email: not a valid email address"], "exact": True,
    "lines": 4,
}  # fmt: skip


def test_a_forecast_answer_is_typed_and_priced_with_the_cost_model_as_the_cli_prices_it():
    from sendonce_client import ForecastResult
    from sendonce_ops.cost.model import audience_cost

    result = ForecastResult.of(ANSWER, job_id="j1")

    assert (result.audience, result.bad_rows, result.eta_s, result.exact, result.job_id) == (2, 1, 0.143, True, "j1")
    assert result.cost == audience_cost(2, "ses", "single") and result.cost["aws_total"] > 0
    assert result.extra == {"starts_at_ms": 0, "ends_at_ms": 143, "lines": 4}
    assert ForecastResult.of({**ANSWER, "audience": 0}).cost == {"aws_total": 0.0, "note": "nobody to send to"}
    assert ForecastResult.of(ANSWER, price=False).cost is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of recipients or s3"),
        ({"recipients": [{"recipient_id": "a", "email": "a@x.io"}], "s3": "s3://b/k.csv"}, "exactly one"),
        ({"recipients": []}, "no recipients to forecast"),
        ({"recipients": [{"recipient_id": f"r{i}", "email": "a@x.io"} for i in range(1001)]}, "from S3"),
        ({"s3": "b/k.csv"}, "not an S3 location"),
        ({"s3": "s3://bucket-only"}, "not an S3 location"),
    ],
)
def test_a_forecast_the_api_would_refuse_is_refused_before_any_request(kwargs, message):
    client = Client("http://127.0.0.1:1", region="eu-west-1")  # nothing listens: a request would fail otherwise
    with pytest.raises(ValueError, match=message):
        client.forecast("c1", **kwargs)


def test_an_s3_location_is_a_mapping_or_an_s3_url():
    from sendonce_client.forecast import s3_source

    assert s3_source("s3://acme/lists/a.csv") == {"bucket": "acme", "key": "lists/a.csv"}
    assert s3_source({"bucket": "acme", "key": "a.txt", "format": "csv"}) == {
        "bucket": "acme",
        "key": "a.txt",
        "format": "csv",
    }


class ScriptedJobs(Client):
    """A client whose GET /jobs/{id} answers from a script (the job as it moves on)."""

    def __init__(self, states: list[dict]):
        self.slept: list[float] = []
        super().__init__("http://127.0.0.1:1", region="eu-west-1", sleep=self.slept.append)
        self._states = states

    def job(self, job_id: str) -> dict:
        return self._states.pop(0) if len(self._states) > 1 else self._states[0]


def test_waiting_for_a_job_polls_until_it_is_done_and_raises_when_it_failed_or_the_wait_ran_out():
    from sendonce_client import JobFailed, JobTimedOut

    running = {"job_id": "j1", "state": "running"}
    done = {"job_id": "j1", "state": "done", "result": {"audience": 3}}

    polled = ScriptedJobs([running, running, done])
    assert polled.wait_for_job("j1", poll_s=0.5)["result"] == {"audience": 3} and polled.slept == [0.5, 0.5]
    with pytest.raises(JobFailed, match="the file is empty") as failed:
        ScriptedJobs([running, {"job_id": "j1", "state": "failed", "error": "the file is empty"}]).wait_for_job("j1")
    assert failed.value.job["state"] == "failed"
    with pytest.raises(JobTimedOut, match="still running after 0 s"):
        ScriptedJobs([running]).wait_for_job("j1", timeout_s=0)
