"""The forecast through the operator HTTP API (issue 32, item 5), against moto's server: the
real handler behind the local API server, wired from ApiSettings as the deployed function is
(the suppression list, the limiter's slots); an S3 object forecast by a `forecast_s3` job
whose parts the real jobs handler takes from its queue, wired from JobsSettings.

- an inline list's counts (suppressed, repeats, bad rows, per group) equal the CLI's for the
  same file, and its bad row is named by index and field;
- the S3 job's result equals the inline forecast of the same rows;
- nothing is written: the ledger and the suppression list as they were, the campaigns table
  as it was but for the job's own item.
"""

from __future__ import annotations

import csv
import functools
import uuid

import boto3
import pytest
import requests

from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.handlers import api
from sendonce.handlers import jobs as jobs_handler
from sendonce.settings import ApiSettings, JobsSettings
from sendonce.wiring.api import build_campaign_service
from sendonce.wiring.clients import clients
from sendonce.wiring.jobs import build_job_service
from sendonce_local.http_api import LocalHttpApi
from sendonce_local.poller import EventSourcePoller
from tests.integration.operator_helpers import OPERATOR_ARN, as_json, sendonce, write_csv

pytestmark = pytest.mark.integration

COUNTS = ("rows_read", "bad_rows", "repeated_ids", "duplicate_addresses", "suppressed", "audience", "groups")


@pytest.fixture
def forecast_api(system, deliverability):
    """The API over `system`'s tables with the suppression list and a jobs queue; the jobs
    worker's service over the same (its parts taken by `run_jobs`)."""
    r = system.resources
    jobs_queue = boto3.client("sqs").create_queue(QueueName=f"jobs-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    common = dict(
        ledger_table=r.ledger_table,
        campaigns_table=r.campaigns_table,
        queue_url=r.queue_url,
        dead_letter_queue_url=r.dead_letter_queue_url,
        jobs_queue_url=jobs_queue,
        suppressions_table=deliverability.resources.suppressions_table,
        # The consumer's rate, as the stack gives both functions (SENDONCE_RESEND_REQUESTS_PER_SECOND)
        resend_requests_per_second=1000,
    )
    service = build_campaign_service(ApiSettings(**common), clients())
    worker = build_job_service(JobsSettings(**common), clients())

    def run_jobs() -> None:
        EventSourcePoller(
            sqs_client=boto3.client("sqs"),
            queue_url=jobs_queue,
            handler=functools.partial(jobs_handler.lambda_handler, service=worker),
        ).run_until_idle(idle_seconds=1, max_seconds=120)

    handler = functools.partial(api.lambda_handler, service=service)
    with LocalHttpApi(handler, caller_arn=OPERATOR_ARN, function_name="sendonce-api") as server:
        server.run_jobs = run_jobs  # type: ignore[attr-defined]
        yield server


PEOPLE = [
    ("r1", "ann@gmail.com", "Ann"),
    ("r2", "gone@gmail.com", "Gone"),  # suppressed
    ("r3", "bob@hotmail.co.uk", "Bob"),
    ("r4", "cy@yahoo.fr", "Cy"),
    ("r1", "ann@gmail.com", "Ann"),  # a repeated id
    ("r5", "ANN@gmail.com", "Ann again"),  # ann's address under another id
    ("r6", "not an address", "Bad"),  # a bad row
    ("r7", "di@icloud.com", "Di"),
    ("r8", "ed@example.org", "Ed"),
]


def snapshot(system, deliverability) -> dict[str, list]:
    dynamodb = boto3.client("dynamodb")
    tables = {
        "ledger": system.resources.ledger_table,
        "campaigns": system.resources.campaigns_table,
        "suppressions": deliverability.resources.suppressions_table,
    }
    return {
        name: sorted(
            (item for item in dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]), key=lambda i: repr(i)
        )
        for name, table in tables.items()
    }


def without_jobs(items: list[dict]) -> list[dict]:
    return [item for item in items if not item["pk"]["S"].startswith("job#")]


def rows_of(path) -> list[dict]:
    with open(path, newline="") as f:
        return [
            {"recipient_id": row["recipient_id"], "email": row["email"], "variables": {"name": row["name"]}}
            for row in csv.DictReader(f)
        ]


def test_an_inline_forecast_counts_as_the_cli_does_for_the_same_file_and_writes_nothing(
    system, deliverability, forecast_api, tmp_path
):
    # Given a campaign, a suppressed address and a file of the people above
    url = forecast_api.url
    created = requests.post(
        f"{url}/campaigns",
        json={
            "id": "c1",
            "name": "Spring",
            "subject": "Hello {{ name }}",
            "from": f"News <news@{system.domain}>",
            "html": "<p>Hi {{ name }}</p>",
            "provider": "resend",
        },
        timeout=30,
    )
    assert created.status_code == 201
    deliverability.suppressions.add("gone@gmail.com", SuppressionReason.UNSUBSCRIBED, "test")
    people = write_csv(tmp_path / "people.csv", PEOPLE)
    before = snapshot(system, deliverability)

    # When the API forecasts the file's rows inline, and the CLI forecasts the file
    answer = requests.post(f"{url}/campaigns/c1/forecast", json={"recipients": rows_of(people)}, timeout=30)
    cli = as_json(sendonce(system, "campaign", "forecast", "c1", "--recipients", str(people), "--json"))

    # Then the counts are the CLI's, the bad row named by its index and field
    assert answer.status_code == 200, answer.text
    forecast = answer.json()
    assert {k: forecast[k] for k in COUNTS} == {k: cli[k] for k in COUNTS}
    assert (forecast["audience"], forecast["suppressed"], forecast["repeated_ids"]) == (6, 1, 1)
    assert (forecast["bad_rows"], forecast["duplicate_addresses"]) == (1, 1)
    assert forecast["groups"] == {"google": 2, "microsoft": 1, "yahoo": 1, "apple": 1, "other": 1}
    assert "recipients.6: email: not a valid email address" in forecast["problems"]
    assert forecast["exact"] is True and forecast["suppressions_checked"] is True
    # Nobody sends now: the whole configured rate, an ETA of milliseconds
    assert forecast["campaigns_sharing"] == 0 and forecast["rate"] > 0 and forecast["eta_s"] < 1
    assert forecast["ends_at"] is not None and forecast["provider"] == "resend"
    # And nothing was written anywhere
    assert snapshot(system, deliverability) == before
    assert requests.get(f"{url}/campaigns/c1", timeout=30).json()["state"] == "draft"


def test_an_s3_forecast_jobs_result_equals_the_inline_forecast_of_the_same_rows(system, deliverability, forecast_api):
    url = forecast_api.url
    system.campaign("c1")
    deliverability.suppressions.add("gone@gmail.com", SuppressionReason.UNSUBSCRIBED, "test")
    rows = [{"recipient_id": r, "email": e, "variables": {"name": n}} for r, e, n in PEOPLE]
    s3 = boto3.client("s3")
    bucket = f"sendonce-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(
        Bucket=bucket,
        Key="people.csv",
        Body=("recipient_id,email,name\n" + "".join(",".join(p) + "\n" for p in PEOPLE)),
    )
    inline = requests.post(f"{url}/campaigns/c1/forecast", json={"recipients": rows}, timeout=30).json()
    before = snapshot(system, deliverability)

    # When the API starts the S3 forecast (202, a job) and the jobs worker takes its parts
    started = requests.post(
        f"{url}/campaigns/c1/forecast", json={"s3": {"bucket": bucket, "key": "people.csv"}}, timeout=30
    )
    assert started.status_code == 202, started.text
    job_id = started.json()["job_id"]
    assert started.json()["kind"] == "forecast_s3" and started.json()["state"] == "running"
    forecast_api.run_jobs()
    job = requests.get(f"{url}/jobs/{job_id}", timeout=30).json()

    # Then its result is the inline forecast (lines of the file instead of indexes)
    assert job["state"] == "done", job
    result = job["result"]
    assert {k: result[k] for k in COUNTS} == {k: inline[k] for k in COUNTS}
    assert (result["exact"], result["parts"], result["lines"]) == (True, 1, len(PEOPLE) + 1)
    assert result["rate"] == inline["rate"] and result["recipients_per_request"] == inline["recipients_per_request"]
    assert "8: email: not a valid email address" in result["problems"]
    assert job["progress"]["ranges_done"] == 1 and job["progress"]["audience"] == inline["audience"]
    # And nothing was written but the job's own item
    after = snapshot(system, deliverability)
    assert after["ledger"] == before["ledger"] and after["suppressions"] == before["suppressions"]
    assert without_jobs(after["campaigns"]) == without_jobs(before["campaigns"])


def test_bad_input_is_a_clear_error_naming_the_field(system, deliverability, forecast_api):
    url = forecast_api.url
    system.campaign("c1")

    unknown = requests.post(f"{url}/campaigns/nope/forecast", json={"recipients": [{"recipient_id": "a"}]}, timeout=30)
    empty = requests.post(f"{url}/campaigns/c1/forecast", json={"recipients": []}, timeout=30)
    both = requests.post(
        f"{url}/campaigns/c1/forecast", json={"recipients": [{}], "s3": {"bucket": "abc", "key": "a.csv"}}, timeout=30
    )
    not_rows = requests.post(f"{url}/campaigns/c1/forecast", json={"recipients": ["ann@example.com"]}, timeout=30)
    missing = requests.post(
        f"{url}/campaigns/c1/forecast", json={"s3": {"bucket": "no-such-bucket-here", "key": "a.csv"}}, timeout=30
    )
    all_bad = requests.post(f"{url}/campaigns/c1/forecast", json={"recipients": [{"email": "x@y.z"}]}, timeout=30)

    assert unknown.status_code == 404 and unknown.json()["error"] == "CampaignNotFound"
    assert empty.status_code == 422
    assert empty.json()["message"] == "body.recipients: no recipients: give at least one (or an s3 object)"
    assert both.status_code == 422 and "exactly one of recipients or s3" in both.json()["message"]
    assert not_rows.status_code == 422 and not_rows.json()["message"].startswith("body.recipients.0: ")
    assert missing.status_code == 409 and missing.json()["error"] == "MissingFile"
    # A list of bad rows only is still forecast: nobody to send to, each row named
    assert all_bad.status_code == 200
    assert (all_bad.json()["audience"], all_bad.json()["bad_rows"]) == (0, 1)
    assert all_bad.json()["problems"] == ["recipients.0: recipient_id: Field required"]
