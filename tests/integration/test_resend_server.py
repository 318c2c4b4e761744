"""The local Resend server behaves like Resend as the resend SDK 2.52.0 sees it.

Over 500 lines: one server, a test per behaviour of Resend's that the SDK sees (keys, 409s,
429s, batch rules, listings, webhooks).
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
import resend
from resend.exceptions import (
    ApplicationError,
    InvalidApiKeyError,
    MissingRequiredFieldsError,
    RateLimitError,
    ResendError,
    ValidationError,
)

from sendonce_local.resend_server import LocalResendServer

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
T0 = 1_750_000_000.0


class FrozenClock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server():
    with LocalResendServer(rate_limit=None) as srv:
        yield srv


@pytest.fixture
def sdk(server, monkeypatch):
    monkeypatch.setattr(resend, "api_key", "re_test_local")
    monkeypatch.setattr(resend, "api_url", server.url)
    monkeypatch.setattr(resend, "default_http_client", resend.RequestsClient(timeout=5))
    return resend


def email(to: Any = "ann@example.com", **overrides: Any) -> dict[str, Any]:
    params = {
        "from": "News <news@sendonce.example>",
        "to": to,
        "subject": "Spring campaign",
        "html": "<p>Hello</p>",
        "text": "Hello",
    }
    params.update(overrides)
    return params


def raw_post(server, path: str, body: str, headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    """One request with exactly these headers (requests/urllib3 would add a User-Agent)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("POST", path, body=body.encode(), headers={"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(response.read())
    finally:
        conn.close()


# -- single sends and idempotency ---------------------------------------------------


def test_a_send_is_recorded_once_with_its_content(server, sdk):
    sent = sdk.Emails.send(
        email(
            to=["Ann <Ann@Example.com>"],
            headers={"List-Unsubscribe": "<https://u.example/1>"},
            tags=[{"name": "campaign_id", "value": "c-1"}],
        ),
        {"idempotency_key": "c-1/r-1"},
    )

    [record] = server.accepted()
    assert record.id == sent["id"]
    assert record.to == ("Ann <Ann@Example.com>",)
    assert record.subject == "Spring campaign"
    assert record.html == "<p>Hello</p>" and record.text == "Hello"
    assert record.headers == {"List-Unsubscribe": "<https://u.example/1>"}
    assert record.tags == [{"name": "campaign_id", "value": "c-1"}]
    assert record.idempotency_key == "c-1/r-1"
    assert server.deliveries() == {"ann@example.com": 1}
    assert "idempotent-replayed" not in sent["http_headers"]


def test_a_replay_with_the_same_key_returns_the_same_id_and_is_not_a_second_delivery(server, sdk):
    first = sdk.Emails.send(email(), {"idempotency_key": "c-1/r-1"})

    replay = sdk.Emails.send(email(), {"idempotency_key": "c-1/r-1"})

    assert replay["id"] == first["id"]
    assert replay["http_headers"]["idempotent-replayed"] == "true"
    assert server.deliveries() == {"ann@example.com": 1}
    assert server.stats()["replays"] == 1


def test_sends_without_a_key_are_each_accepted(server, sdk):
    sdk.Emails.send(email())
    sdk.Emails.send(email())

    assert server.deliveries() == {"ann@example.com": 2}


def test_the_body_is_compared_as_canonical_json(server):
    headers = {"Authorization": "Bearer re_x", "User-Agent": "t", "Idempotency-Key": "k"}
    status1, _, first = raw_post(server, "/emails", '{"from":"a@x.io","to":"b@y.io","subject":"s","text":"t"}', headers)
    status2, replay_headers, second = raw_post(
        server, "/emails", '{ "text": "t", "subject": "s", "to": "b@y.io", "from": "a@x.io" }', headers
    )

    assert (status1, status2) == (200, 200)
    assert second == first
    assert replay_headers["idempotent-replayed"] == "true"
    assert server.deliveries() == {"b@y.io": 1}


def test_the_same_key_with_a_different_body_is_409_invalid_idempotent_request(server, sdk):
    sdk.Emails.send(email(), {"idempotency_key": "c-1/r-1"})

    with pytest.raises(ResendError) as raised:
        sdk.Emails.send(email(subject="Changed"), {"idempotency_key": "c-1/r-1"})

    assert type(raised.value) is ResendError
    assert raised.value.code == 409
    assert raised.value.error_type == "invalid_idempotent_request"
    assert server.deliveries() == {"ann@example.com": 1}


def test_the_same_key_while_the_first_is_in_flight_is_409_concurrent_idempotent_requests(server, sdk):
    server.set_latency(600)
    first: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: first.update(sdk.Emails.send(email(), {"idempotency_key": "k"})))
    worker.start()
    deadline = time.monotonic() + 2
    while server.in_flight() == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert server.in_flight() == 1

    with pytest.raises(ResendError) as raised:
        sdk.Emails.send(email(), {"idempotency_key": "k"})
    worker.join(5)

    assert raised.value.code == 409
    assert raised.value.error_type == "concurrent_idempotent_requests"
    assert server.deliveries() == {"ann@example.com": 1}
    server.set_latency(0)
    assert sdk.Emails.send(email(), {"idempotency_key": "k"})["id"] == first["id"]


def test_concurrent_clients_get_each_key_accepted_exactly_once(server, sdk):
    server.set_latency(20, 60)
    keys = [f"c-1/r-{i}" for i in range(8)]

    def send(i: int) -> str:
        key = keys[i % len(keys)]
        try:
            return sdk.Emails.send(email(to=f"{key.replace('/', '-')}@example.com"), {"idempotency_key": key})["id"]
        except ResendError as error:
            assert (error.code, error.error_type) == (409, "concurrent_idempotent_requests")
            return "409"

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(send, range(48)))

    assert len(server.accepted()) == len(keys)
    assert set(outcomes) - {"409"} == {record.id for record in server.accepted()}
    assert set(server.deliveries().values()) == {1}


def test_an_idempotency_key_must_be_1_to_256_chars(server, sdk):
    sdk.Emails.send(email(), {"idempotency_key": "k" * 256})

    with pytest.raises(ResendError) as raised:
        sdk.Emails.send(email(), {"idempotency_key": "k" * 257})
    status, _, body = raw_post(
        server,
        "/emails",
        json.dumps(email()),
        {"Authorization": "Bearer re_x", "User-Agent": "t", "Idempotency-Key": ""},
    )

    assert (raised.value.code, raised.value.error_type) == (400, "invalid_idempotency_key")
    assert (status, body["name"]) == (400, "invalid_idempotency_key")
    assert len(server.accepted()) == 1


def test_keys_expire_after_24_hours(server, sdk):
    clock = FrozenClock()
    server.clock = clock
    first = sdk.Emails.send(email(), {"idempotency_key": "k"})

    clock.now += 24 * 3600 - 1
    still_replayed = sdk.Emails.send(email(), {"idempotency_key": "k"})
    clock.now += 1
    fresh = sdk.Emails.send(email(), {"idempotency_key": "k"})

    assert still_replayed["id"] == first["id"]
    assert fresh["id"] != first["id"]
    assert "idempotent-replayed" not in fresh["http_headers"]
    assert server.deliveries() == {"ann@example.com": 2}


# -- validation ----------------------------------------------------------------------


def test_missing_and_invalid_fields_raise_the_sdk_validation_classes(server, sdk):
    with pytest.raises(MissingRequiredFieldsError) as missing:
        sdk.Emails.send(email(subject=""))
    with pytest.raises(ValidationError) as invalid:
        sdk.Emails.send(email(to="not-an-address"))
    with pytest.raises(ValidationError) as too_many:
        sdk.Emails.send(email(to=[f"r{i}@example.com" for i in range(51)]))

    assert (missing.value.code, missing.value.error_type) == (422, "missing_required_field")
    assert (invalid.value.code, invalid.value.error_type) == (422, "validation_error")
    assert "`to`" in invalid.value.message
    assert too_many.value.code == 422
    assert server.accepted() == []


# -- batches -------------------------------------------------------------------------


def test_a_batch_returns_ids_in_request_order(server, sdk):
    addresses = [f"r{i}@example.com" for i in range(5)]

    sent = sdk.Batch.send([email(to=a) for a in addresses], {"idempotency_key": "c-1/b-1"})

    by_id = {record.id: record for record in server.accepted()}
    assert [by_id[item["id"]].to for item in sent["data"]] == [(a,) for a in addresses]
    assert [by_id[item["id"]].batch_index for item in sent["data"]] == list(range(5))
    assert "errors" not in sent
    assert server.deliveries() == {a: 1 for a in addresses}


def test_a_batch_of_more_than_100_is_422_and_nothing_is_accepted(server, sdk):
    with pytest.raises(ValidationError) as raised:
        sdk.Batch.send([email(to=f"r{i}@example.com") for i in range(101)])

    assert (raised.value.code, raised.value.error_type) == (422, "validation_error")
    assert server.accepted() == []


def test_a_strict_batch_with_one_bad_entry_fails_whole(server, sdk):
    batch = [email(to="a@example.com"), email(to="b@example.com", subject=""), email(to="c@example.com")]

    with pytest.raises(MissingRequiredFieldsError) as raised:
        sdk.Batch.send(batch, {"idempotency_key": "b-1", "batch_validation": "strict"})

    assert raised.value.code == 422
    assert "emails[1]" in raised.value.message
    assert server.accepted() == []
    # a failed request is not stored, so the corrected batch goes through with the same key
    batch[1]["subject"] = "Spring campaign"
    assert len(sdk.Batch.send(batch, {"idempotency_key": "b-1"})["data"]) == 3


def test_a_permissive_batch_accepts_the_valid_entries_and_reports_the_bad_one(server, sdk):
    batch = [email(to="a@example.com"), email(to="b@example.com", subject=""), email(to="c@example.com")]

    sent = sdk.Batch.send(batch, {"idempotency_key": "b-1", "batch_validation": "permissive"})

    assert len(sent["data"]) == 2
    assert sent["errors"] == [{"index": 1, "message": "Missing `subject` field."}]
    assert server.deliveries() == {"a@example.com": 1, "c@example.com": 1}
    replay = sdk.Batch.send(batch, {"idempotency_key": "b-1", "batch_validation": "permissive"})
    assert replay["data"] == sent["data"] and replay["errors"] == sent["errors"]
    assert len(server.accepted()) == 2


def test_a_batch_retry_must_have_the_same_membership(server, sdk):
    batch = [email(to="a@example.com"), email(to="b@example.com")]
    first = sdk.Batch.send(batch, {"idempotency_key": "b-1"})

    replay = sdk.Batch.send(batch, {"idempotency_key": "b-1"})
    with pytest.raises(ResendError) as raised:
        sdk.Batch.send(batch[:1], {"idempotency_key": "b-1"})

    assert replay["data"] == first["data"]
    assert (raised.value.code, raised.value.error_type) == (409, "invalid_idempotent_request")
    assert len(server.accepted()) == 2


# -- rate limit, failures, stalls, rejections, halts ---------------------------------


def test_over_the_rate_limit_is_429_with_ratelimit_headers(server, sdk):
    server.clock = FrozenClock()
    server.set_rate_limit(2)

    first = sdk.Emails.send(email())
    second = sdk.Emails.send(email())
    with pytest.raises(RateLimitError) as raised:
        sdk.Emails.send(email())

    assert (first["http_headers"]["ratelimit-limit"], first["http_headers"]["ratelimit-remaining"]) == ("2", "1")
    assert second["http_headers"]["ratelimit-remaining"] == "0"
    assert (raised.value.code, raised.value.error_type) == (429, "rate_limit_exceeded")
    assert raised.value.headers["ratelimit-limit"] == "2"
    assert raised.value.headers["ratelimit-remaining"] == "0"
    assert raised.value.headers["ratelimit-reset"] == "1"
    assert raised.value.headers["retry-after"] == "1"
    assert len(server.accepted()) == 2
    server.advance_clock(1.0)
    assert sdk.Emails.send(email())["http_headers"]["ratelimit-remaining"] == "1"


def test_a_500_is_not_stored_so_a_retry_with_the_same_key_is_processed_fresh(server, sdk):
    server.fail_next(1, 500)

    with pytest.raises(ApplicationError) as raised:
        sdk.Emails.send(email(), {"idempotency_key": "k"})
    assert server.accepted() == []
    retried = sdk.Emails.send(email(), {"idempotency_key": "k"})

    assert (raised.value.code, raised.value.error_type) == (500, "application_error")
    assert "idempotent-replayed" not in retried["http_headers"]
    assert [record.id for record in server.accepted()] == [retried["id"]]


def test_an_injected_429_is_the_team_limits_answer_and_accepts_nothing(server, sdk):
    server.fail_next(1, 429)  # whatever the sender's speed: the chaos tests' storm

    with pytest.raises(RateLimitError) as raised:
        sdk.Emails.send(email(), {"idempotency_key": "k"})
    retried = sdk.Emails.send(email(), {"idempotency_key": "k"})

    assert (raised.value.code, raised.value.error_type) == (429, "rate_limit_exceeded")
    assert "5 requests per second" in raised.value.message  # the team's default limit, none set
    assert (raised.value.headers["retry-after"], raised.value.headers["ratelimit-remaining"]) == ("1", "0")
    assert server.stats()["errors"]["rate_limit_exceeded"] == 1
    assert [record.id for record in server.accepted()] == [retried["id"]]


def test_a_503_is_a_plain_resend_error_with_service_unavailable(server, sdk):
    server.fail_next(2, 503)

    for _ in range(2):
        with pytest.raises(ResendError) as raised:
            sdk.Emails.send(email())
        assert (type(raised.value), raised.value.code, raised.value.error_type) == (
            ResendError,
            503,
            "service_unavailable",
        )
    sdk.Emails.send(email())

    assert server.deliveries() == {"ann@example.com": 1}


def test_a_stall_accepts_the_email_while_the_client_times_out_and_the_retry_is_a_replay(server, sdk, monkeypatch):
    monkeypatch.setattr(resend, "default_http_client", resend.RequestsClient(timeout=1))
    server.stall_next(1, seconds=2.5)

    with pytest.raises(ResendError) as raised:
        sdk.Emails.send(email(), {"idempotency_key": "c-1/r-1"})
    [record] = server.accepted()
    retried = sdk.Emails.send(email(), {"idempotency_key": "c-1/r-1"})

    assert (raised.value.code, raised.value.error_type) == (500, "HttpClientError")
    assert retried["id"] == record.id
    assert retried["http_headers"]["idempotent-replayed"] == "true"
    assert server.deliveries() == {"ann@example.com": 1}


def test_rejected_addresses_fail_permanently_and_others_go_through(server, sdk):
    server.reject(["bounce@example.com"])

    with pytest.raises(ValidationError) as raised:
        sdk.Emails.send(email(to="Bounce <BOUNCE@example.com>"))
    sdk.Emails.send(email(to="ann@example.com"))
    permissive = sdk.Batch.send(
        [email(to="ann@example.com"), email(to="bounce@example.com")], {"batch_validation": "permissive"}
    )

    assert (raised.value.code, raised.value.error_type) == (422, "validation_error")
    assert permissive["errors"][0]["index"] == 1
    assert server.deliveries() == {"ann@example.com": 2}


def test_halt_errors_until_resume(server, sdk):
    server.suspend_key()
    with pytest.raises(ResendError) as suspended:
        sdk.Emails.send(email())
    server.exhaust_daily_quota()
    with pytest.raises(RateLimitError) as quota:
        sdk.Emails.send(email())
    server.resume()
    sdk.Emails.send(email())

    assert (type(suspended.value), suspended.value.code, suspended.value.error_type) == (
        ResendError,
        403,
        "suspended_api_key",
    )
    assert (quota.value.code, quota.value.error_type) == (429, "daily_quota_exceeded")
    assert server.deliveries() == {"ann@example.com": 1}


def test_a_daily_quota_counts_accepted_emails_not_replays(server, sdk):
    clock = FrozenClock()
    server.clock = clock
    server.set_daily_quota(2)
    sdk.Emails.send(email(to="a@example.com"), {"idempotency_key": "a"})
    sdk.Emails.send(email(to="b@example.com"))
    sdk.Emails.send(email(to="a@example.com"), {"idempotency_key": "a"})

    with pytest.raises(RateLimitError) as raised:
        sdk.Emails.send(email(to="c@example.com"), {"idempotency_key": "c"})
    server.set_daily_quota(3)
    retried = sdk.Emails.send(email(to="c@example.com"), {"idempotency_key": "c"})
    with pytest.raises(RateLimitError):
        sdk.Emails.send(email(to="d@example.com"))
    clock.now += 24 * 3600
    sdk.Emails.send(email(to="d@example.com"))

    assert raised.value.error_type == "daily_quota_exceeded"
    assert "idempotent-replayed" not in retried["http_headers"]  # the refused request did not keep its key
    assert server.deliveries() == {"a@example.com": 1, "b@example.com": 1, "c@example.com": 1, "d@example.com": 1}


def test_latency_delays_each_new_send(server, sdk):
    server.set_latency(150, 200)

    started = time.monotonic()
    sdk.Emails.send(email())

    assert 0.15 <= time.monotonic() - started < 1.5


# -- auth ----------------------------------------------------------------------------


def test_auth_and_user_agent_are_required(server, sdk, monkeypatch):
    body = json.dumps(email())
    no_key = raw_post(server, "/emails", body, {"User-Agent": "t"})
    no_agent = raw_post(server, "/emails", body, {"Authorization": "Bearer re_x"})
    monkeypatch.setattr(resend, "api_key", "sk_not_resend")
    with pytest.raises(InvalidApiKeyError) as wrong_key:
        sdk.Emails.send(email())

    assert (no_key[0], no_key[2]["name"]) == (401, "missing_api_key")
    assert no_agent[0] == 403
    assert (wrong_key.value.code, wrong_key.value.error_type) == (403, "invalid_api_key")
    assert server.accepted() == []


def test_a_configured_api_key_is_the_only_one_accepted(monkeypatch):
    with LocalResendServer(api_key="re_the_one") as srv:
        monkeypatch.setattr(resend, "api_url", srv.url)
        monkeypatch.setattr(resend, "api_key", "re_another")
        with pytest.raises(InvalidApiKeyError):
            resend.Emails.send(email())
        monkeypatch.setattr(resend, "api_key", "re_the_one")
        resend.Emails.send(email())

        assert srv.deliveries() == {"ann@example.com": 1}


# -- control endpoints and process ---------------------------------------------------


def test_control_endpoints_steer_and_report(server, sdk):
    base = f"{server.url}/_local"
    assert requests.get(f"{base}/health", timeout=5).json()["status"] == "ok"

    state = requests.post(
        f"{base}/faults",
        json={
            "fail_next": {"count": 1, "status": 503},
            "reject": {"addresses": ["bounce@example.com"]},
            "rate_limit": 50,
        },
        timeout=5,
    ).json()
    assert state["fail_next"] == [503]
    assert state["reject"] == {"bounce@example.com": {"status": 422, "name": "validation_error"}}
    assert state["rate_limit"] == 50
    with pytest.raises(ResendError) as unavailable:
        sdk.Emails.send(email())
    with pytest.raises(ValidationError):
        sdk.Emails.send(email(to="bounce@example.com"))
    sent = sdk.Emails.send(email(), {"idempotency_key": "k"})

    assert unavailable.value.code == 503
    assert requests.get(f"{base}/deliveries", timeout=5).json() == {
        "deliveries": {"ann@example.com": 1},
        "emails_accepted": 1,
    }
    [record] = requests.get(f"{base}/accepted", timeout=5).json()["accepted"]
    assert (record["id"], record["to"], record["idempotency_key"]) == (sent["id"], ["ann@example.com"], "k")
    assert requests.get(f"{base}/stats", timeout=5).json()["errors"] == {
        "service_unavailable": 1,
        "validation_error": 1,
    }

    requests.post(f"{base}/faults", json={"halt": "suspended_api_key"}, timeout=5)
    with pytest.raises(ResendError) as halted:
        sdk.Emails.send(email())
    assert halted.value.error_type == "suspended_api_key"

    assert requests.post(f"{base}/reset", timeout=5).json() == {"status": "reset"}
    assert requests.get(f"{base}/deliveries", timeout=5).json()["deliveries"] == {}
    assert requests.get(f"{base}/faults", timeout=5).json()["halt"] is None
    assert sdk.Emails.send(email(), {"idempotency_key": "k"})["id"] != sent["id"]  # keys were forgotten too

    bad = requests.post(f"{base}/faults", json={"fail_nxt": {"count": 1}}, timeout=5)
    assert (bad.status_code, bad.json()["name"]) == (400, "validation_error")


def test_the_clock_endpoint_expires_keys_for_a_server_in_another_process(server, sdk):
    first = sdk.Emails.send(email(), {"idempotency_key": "k"})

    requests.post(f"{server.url}/_local/clock", json={"advance_seconds": 24 * 3600}, timeout=5)

    assert sdk.Emails.send(email(), {"idempotency_key": "k"})["id"] != first["id"]


def test_unknown_paths_and_methods_answer_resend_json(server):
    missing = requests.get(f"{server.url}/domains", timeout=5)
    wrong_method = requests.delete(f"{server.url}/emails", timeout=5)

    assert (missing.status_code, missing.json()["name"]) == (404, "not_found")
    assert (wrong_method.status_code, wrong_method.json()["name"]) == (405, "method_not_allowed")


def test_the_module_runs_as_a_process_and_prints_its_url(monkeypatch):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sendonce_local.resend_server",
            "--port",
            "0",
            "--rate-limit",
            "5",
            "--latency-ms",
            "0:5",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        monkeypatch.setattr(resend, "api_url", url)
        monkeypatch.setattr(resend, "api_key", "re_test_local")
        sent = resend.Emails.send(email(), {"idempotency_key": "k"})

        assert sent["http_headers"]["ratelimit-limit"] == "5"
        assert requests.get(f"{url}/_local/deliveries", timeout=5).json()["deliveries"] == {"ann@example.com": 1}
        assert requests.get(f"{url}/_local/faults", timeout=5).json()["latency_ms"] == [0.0, 5.0]
    finally:
        process.terminate()
        assert process.wait(timeout=5) == 0


def test_the_team_limit_defaults_to_resends_documented_five_per_second():
    with LocalResendServer() as srv:
        assert srv.faults()["rate_limit"] == 5
        response = requests.post(
            f"{srv.url}/emails", json=email(), timeout=5, headers={"Authorization": "Bearer re_x", "User-Agent": "t"}
        )
    assert response.status_code == 200
    assert (response.headers["ratelimit-limit"], response.headers["ratelimit-remaining"]) == ("5", "4")


# -- webhooks out of order and repeated (issue 18) ------------------------------------


class _Receiver:
    """A webhook endpoint on loopback that answers 200 and records (svix-id, type) in order."""

    def __init__(self) -> None:
        import http.server

        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                received.append((self.headers["svix-id"], body["type"], body["created_at"]))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_webhooks_can_be_delivered_newest_first_and_twice(server, sdk):
    receiver = _Receiver()
    try:
        base = f"{server.url}/_local"
        server.set_webhook(receiver.url)
        server.complain(["ann@example.com"])
        state = requests.post(f"{base}/faults", json={"webhook_out_of_order": True, "webhook_copies": 2}, timeout=5)
        assert (state.json()["webhook_out_of_order"], state.json()["webhook_copies"]) == (True, 2)

        sdk.Emails.send(email())
        assert server.wait_for_webhooks(10)

        firsts = list(dict.fromkeys((svix_id, kind) for svix_id, kind, _ in receiver.received))
        assert [kind for _, kind in firsts] == ["email.complained", "email.delivered", "email.sent"]
        assert len(receiver.received) == 6  # each twice, with its svix-id
        assert all(h.attempts == [200, 200] for h in server.webhook_deliveries())
        # Each carries its own time: the complaint (sent first) is the newest.
        times = {kind: created for _, kind, created in receiver.received}
        assert times["email.sent"] < times["email.delivered"] < times["email.complained"]

        bad = requests.post(f"{base}/faults", json={"webhook_copies": 0}, timeout=5)
        assert (bad.status_code, bad.json()["name"]) == (400, "validation_error")
        requests.post(f"{base}/reset", timeout=5)
        faults = requests.get(f"{base}/faults", timeout=5).json()
        assert (faults["webhook_out_of_order"], faults["webhook_copies"]) == (False, 1)
    finally:
        receiver.close()
