"""ses_headers.py: SES v2 simple sends keep the headers they were given."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
import requests

from tests.integration.moto_patches.helpers import PATCHED, moto_as

pytestmark = pytest.mark.integration

HEADERS = [
    {"Name": "Feedback-ID", "Value": "c1:campaign::sendonce"},
    {"Name": "List-Unsubscribe-Post", "Value": "List-Unsubscribe=One-Click"},
]


def _send(headers: list[dict[str, str]] | None) -> str:
    boto3.client("ses").verify_domain_identity(Domain="example.com")
    simple: dict[str, Any] = {"Subject": {"Data": "Hi"}, "Body": {"Text": {"Data": "Hi"}}}
    if headers is not None:
        simple["Headers"] = headers
    return str(
        boto3.client("sesv2").send_email(
            FromEmailAddress="news@example.com",
            Destination={"ToAddresses": ["ann@example.com"]},
            Content={"Simple": simple},
        )["MessageId"]
    )


def _recorded(message_id: str) -> dict[str, Any]:
    """The message as moto's own API shows it (what sendonce_local.moto_server reads)."""
    data = requests.get("http://motoapi.amazonaws.com/moto-api/data.json", timeout=30).json()
    [message] = [m for m in data["ses"]["Message"] if m["id"] == message_id]
    return dict(message)


def test_stock_moto_drops_a_simple_send_s_headers() -> None:
    with moto_as("stock"):
        message = _recorded(_send(HEADERS))

    assert message["subject"] == "Hi"
    assert "headers" not in message


@pytest.mark.parametrize("profile", PATCHED)
def test_patched_moto_keeps_a_simple_send_s_headers(profile: str) -> None:
    with moto_as(profile):
        # Given two sends, the first with headers, the second without
        with_headers, without = _send(HEADERS), _send(None)

        # Then each recorded message shows exactly what it was sent with
        assert _recorded(with_headers)["headers"] == HEADERS
        assert _recorded(without)["headers"] == []
        # And the rest of the record is stock's
        assert {k: v for k, v in _recorded(with_headers).items() if k != "headers"} == {
            "id": with_headers,
            "source": "news@example.com",
            "subject": "Hi",
            "body": "Hi",
            "destinations": {"ToAddresses": ["ann@example.com"]},
        }


@pytest.mark.parametrize("profile", PATCHED)
def test_patched_moto_still_refuses_an_unverified_sender(profile: str) -> None:
    from botocore.exceptions import ClientError

    with moto_as(profile):
        with pytest.raises(ClientError, match="MessageRejected"):
            boto3.client("sesv2").send_email(
                FromEmailAddress="news@unverified.example",
                Destination={"ToAddresses": ["ann@example.com"]},
                Content={"Simple": {"Subject": {"Data": "Hi"}, "Body": {"Text": {"Data": "Hi"}}, "Headers": HEADERS}},
            )
