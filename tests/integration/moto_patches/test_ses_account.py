"""ses_account.py: SES v2's account has a state, GetAccount answers it and sends obey it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
import requests
from botocore.exceptions import ClientError

from sendonce_local import moto_patches
from sendonce_local.moto_server import set_ses_account
from tests.integration.moto_patches.helpers import PATCHED, moto_as

pytestmark = pytest.mark.integration

HEADERS = [{"Name": "Feedback-ID", "Value": "c1:campaign::sendonce"}]
HEALTHY = {
    "DedicatedIpAutoWarmupEnabled": False,
    "EnforcementStatus": "HEALTHY",
    "ProductionAccessEnabled": True,
    "SendingEnabled": True,
    "SendQuota": {"Max24HourSend": -1.0, "MaxSendRate": 100000.0, "SentLast24Hours": 0.0},
}


def _account(sesv2: Any) -> dict[str, Any]:
    answer = dict(sesv2.get_account())
    answer.pop("ResponseMetadata")
    return answer


def _send(sesv2: Any, to: str = "ann@example.com") -> str:
    return str(
        sesv2.send_email(
            FromEmailAddress="news@example.com",
            Destination={"ToAddresses": [to]},
            Content={"Simple": {"Subject": {"Data": "Hi"}, "Body": {"Text": {"Data": "Hi"}}, "Headers": HEADERS}},
        )["MessageId"]
    )


def _recorded() -> list[dict[str, Any]]:
    """Every message moto recorded, as its own API shows them."""
    data = requests.get("http://motoapi.amazonaws.com/moto-api/data.json", timeout=30).json()
    return list(data.get("ses", {}).get("Message", []))


def _refusal(call: Any) -> tuple[str, int, str]:
    with pytest.raises(ClientError) as refused:
        call()
    response = refused.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Message"]


def _verified_sesv2() -> Any:
    boto3.client("ses").verify_domain_identity(Domain="example.com")
    return boto3.client("sesv2")


def test_stock_moto_has_no_get_account_nor_put_account_sending_attributes() -> None:
    with moto_as("stock"):
        sesv2 = boto3.client("sesv2")
        with pytest.raises(NotImplementedError, match="get_account action has not been implemented"):
            sesv2.get_account()
        with pytest.raises(NotImplementedError, match="put_account_sending_attributes action has not been"):
            sesv2.put_account_sending_attributes(SendingEnabled=False)


@pytest.mark.parametrize("profile", PATCHED)
def test_patched_moto_answers_a_healthy_account_by_default(profile: str) -> None:
    with moto_as(profile):
        sesv2 = _verified_sesv2()
        assert _account(sesv2) == HEALTHY

        # SentLast24Hours: recipients sent to, as the SES v1 backend counts them
        _send(sesv2), _send(sesv2, "bob@example.com")
        assert _account(sesv2)["SendQuota"]["SentLast24Hours"] == 2.0


@pytest.mark.parametrize("profile", PATCHED)
def test_sending_disabled_refuses_sends_and_records_none(profile: str) -> None:
    with moto_as(profile):
        sesv2 = _verified_sesv2()

        # Given sending disabled through the real API
        assert sesv2.put_account_sending_attributes(SendingEnabled=False)["ResponseMetadata"]["HTTPStatusCode"] == 200

        # Then GetAccount says so, and a send is refused as SES refuses it, recording nothing
        assert _account(sesv2) == {**HEALTHY, "SendingEnabled": False}
        assert _refusal(lambda: _send(sesv2)) == ("SendingPausedException", 400, "Sending is paused for this account")
        assert _recorded() == []
        assert _account(sesv2)["SendQuota"]["SentLast24Hours"] == 0.0

        # And enabled again, sends go through
        sesv2.put_account_sending_attributes(SendingEnabled=True)
        sent = _send(sesv2)
        assert [m["id"] for m in _recorded()] == [sent]


@pytest.mark.parametrize("profile", PATCHED)
def test_enforcement_status_set_locally_suspends_or_lets_sends_through(profile: str) -> None:
    with moto_as(profile):
        sesv2 = _verified_sesv2()

        # SHUTDOWN: refused as a suspended account, even with sending enabled
        set_ses_account(sesv2, enforcement_status="SHUTDOWN")
        assert _account(sesv2) == {**HEALTHY, "EnforcementStatus": "SHUTDOWN"}
        code, status, _message = _refusal(lambda: _send(sesv2))
        assert (code, status) == ("AccountSuspendedException", 400)
        assert _recorded() == []

        # PROBATION: sends still go through
        set_ses_account(boto3.session.Session(), enforcement_status="PROBATION")
        assert _account(sesv2)["EnforcementStatus"] == "PROBATION"
        on_probation = _send(sesv2)

        # HEALTHY and enabled again, with the rate and quota given; fields left out stay
        set_ses_account(sesv2, sending_enabled=False, max_send_rate=14, max_24_hour_send=50000.0)
        set_ses_account(sesv2, sending_enabled=True, enforcement_status="HEALTHY")
        assert _account(sesv2) == {
            **HEALTHY,
            "SendQuota": {"Max24HourSend": 50000.0, "MaxSendRate": 14.0, "SentLast24Hours": 1.0},
        }
        healthy = _send(sesv2)
        assert [m["id"] for m in _recorded()] == [on_probation, healthy]


@pytest.mark.parametrize("profile", PATCHED)
def test_an_invalid_local_field_is_a_bad_request_that_changes_nothing(profile: str) -> None:
    with moto_as(profile):
        sesv2 = boto3.client("sesv2")

        code, status, message = _refusal(
            lambda: set_ses_account(sesv2, sending_enabled=False, enforcement_status="ON_FIRE")
        )
        assert (code, status) == ("BadRequestException", 400)
        assert "ON_FIRE" in message and "EnforcementStatus" in message

        code, _status, message = _refusal(lambda: set_ses_account(sesv2, max_send_rate="fast"))  # type: ignore[arg-type]
        assert code == "BadRequestException" and "MaxSendRate" in message

        assert _account(sesv2) == HEALTHY


@pytest.mark.parametrize("profile", PATCHED)
def test_the_state_is_per_region_and_moto_s_reset_clears_it(profile: str) -> None:
    with moto_as(profile):
        sesv2 = boto3.client("sesv2")
        set_ses_account(sesv2, sending_enabled=False, enforcement_status="PROBATION", max_send_rate=1.0)

        # Another region's account is untouched
        assert _account(boto3.client("sesv2", region_name="eu-west-1")) == HEALTHY

        # And moto's reset puts back the defaults
        requests.post("http://motoapi.amazonaws.com/moto-api/reset", timeout=30).raise_for_status()
        assert _account(sesv2) == HEALTHY


@pytest.mark.parametrize("profile", PATCHED)
def test_a_send_the_account_allows_keeps_its_headers(profile: str) -> None:
    with moto_as(profile):
        sesv2 = _verified_sesv2()
        set_ses_account(sesv2, enforcement_status="PROBATION")

        sent = _send(sesv2)

        [message] = _recorded()
        assert message["id"] == sent and message["headers"] == HEADERS


@contextmanager
def _threaded_server() -> Iterator[str]:
    """moto's server in this process, started now: it makes its routes from moto's URL
    patterns on its first request, so one started under the patches has theirs."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def _server_sesv2(endpoint: str) -> Any:
    return boto3.client("sesv2", endpoint_url=endpoint, region_name="us-east-1")


def test_moto_s_server_routes_the_account_actions_only_when_patched() -> None:
    # Stock moto's server has no route for them: its "/v2/.*" pattern is no Flask rule
    with _threaded_server() as stock:
        assert _refusal(_server_sesv2(stock).get_account)[:2] == ("404", 404)

    with moto_patches.patched(), _threaded_server() as endpoint:
        sesv2 = _server_sesv2(endpoint)
        sesv2.create_email_identity(EmailIdentity="example.com")
        try:
            assert _account(sesv2)["EnforcementStatus"] == "HEALTHY"

            # The helper reaches the server by its URL, and the refusals render as boto3 reads them
            set_ses_account(endpoint, sending_enabled=False)
            assert _refusal(lambda: _send(sesv2))[:2] == ("SendingPausedException", 400)
            set_ses_account(endpoint, sending_enabled=True, enforcement_status="SHUTDOWN", max_send_rate=3)
            assert _refusal(lambda: _send(sesv2))[:2] == ("AccountSuspendedException", 400)
            assert _account(sesv2)["SendQuota"]["MaxSendRate"] == 3.0
            assert _refusal(lambda: set_ses_account(endpoint, enforcement_status="nope"))[:2] == (
                "BadRequestException",
                400,
            )
        finally:
            requests.post(f"{endpoint}/moto-api/reset", timeout=30).raise_for_status()
        assert _account(sesv2)["EnforcementStatus"] == "HEALTHY"
