"""One-click unsubscribe: tokens, headers, the service and the HTTP handler, with fakes."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.deliverability.unsubscribe import (
    UnsubscribeLinks,
    UnsubscribeService,
    UnsubscribeTokens,
    is_one_click,
    keys_from_secret,
)
from sendonce.domain.errors import InvalidTokenError
from sendonce.domain.models import DeliveryRecord, DeliveryState, email_fingerprint
from sendonce.handlers import unsubscribe as handler
from sendonce_local.poller import LocalLambdaContext
from tests.fakes import FakeLedger, FakeLedgerEvents, FakeSuppressions

KEY = b"0123456789abcdef0123456789abcdef"
OTHER = b"fedcba9876543210fedcba9876543210"


@pytest.fixture
def tokens() -> UnsubscribeTokens:
    return UnsubscribeTokens([KEY])


def test_a_token_round_trips_to_campaign_recipient_and_fingerprint(tokens):
    token = tokens.sign("spring-2025", "r_17", "Ann@Example.com")

    assert token.startswith("v1.spring-2025.r_17.")
    assert tokens.verify(token) == ("spring-2025", "r_17", email_fingerprint("ann@example.com"))
    assert "@" not in token and "ann" not in token.lower()


def tamperings(token: str) -> list[str]:
    version, campaign, recipient, fp, mac = token.split(".")
    flipped_mac = mac[:-2] + ("A" if mac[-2] != "A" else "B") + mac[-1]
    return [
        ".".join(["v2", campaign, recipient, fp, mac]),
        ".".join([version, campaign + "x", recipient, fp, mac]),
        ".".join([version, campaign, "r_18", fp, mac]),
        ".".join([version, campaign, recipient, "0" * 16, mac]),
        ".".join([version, campaign, recipient, fp, flipped_mac]),
        ".".join([version, recipient, campaign, fp, mac]),
        token + ".extra",
        token[:-1],
        "",
        "v1....",
    ]


def test_every_altered_token_is_refused(tokens):
    token = tokens.sign("spring-2025", "r_17", "ann@example.com")

    for altered in tamperings(token):
        with pytest.raises(InvalidTokenError):
            tokens.verify(altered)


def test_a_token_signed_with_another_key_is_refused(tokens):
    forged = UnsubscribeTokens([OTHER]).sign("c1", "r1", "ann@example.com")

    with pytest.raises(InvalidTokenError, match="signature"):
        tokens.verify(forged)


def test_key_rotation_keeps_old_links_working_and_signs_with_the_newest():
    old_link = UnsubscribeTokens([KEY]).sign("c1", "r1", "a@example.com")
    rotated = UnsubscribeTokens.from_secret(json.dumps({"keys": [OTHER.decode(), KEY.decode()]}))

    assert rotated.verify(old_link).recipient_id == "r1"
    assert UnsubscribeTokens([OTHER]).verify(rotated.sign("c1", "r1", "a@example.com"))


@pytest.mark.parametrize("secret", ["short", '{"keys": []}', '{"keys": "x"}', '{"nope": 1}'])
def test_weak_or_malformed_key_secrets_are_refused(secret):
    with pytest.raises(ValueError):
        keys_from_secret(secret)


def test_the_two_rfc_8058_headers(tokens):
    headers = UnsubscribeLinks(tokens, "https://unsubscribe.example.com/").headers("c1", "r1", "ann@example.com")

    url = headers["List-Unsubscribe"]
    assert url.startswith("<https://unsubscribe.example.com/u/v1.c1.r1.") and url.endswith(">")
    assert headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert tokens.verify(url[1:-1].rsplit("/", 1)[1]).campaign_id == "c1"


def test_links_must_be_https(tokens):
    with pytest.raises(ValueError, match="https"):
        UnsubscribeLinks(tokens, "http://unsubscribe.example.com")


@pytest.mark.parametrize(
    "body, content_type, expected",
    [
        ("List-Unsubscribe=One-Click", "application/x-www-form-urlencoded", True),
        ("List-Unsubscribe=One-Click\r\n", None, True),
        ("", "application/x-www-form-urlencoded", False),
        ("List-Unsubscribe=Nope", "application/x-www-form-urlencoded", False),
        (
            '--b\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n\r\nOne-Click\r\n--b--\r\n',
            "multipart/form-data; boundary=b",
            True,
        ),
        (
            '--b\r\nContent-Disposition: form-data; name="other"\r\n\r\nOne-Click\r\n--b--\r\n',
            "multipart/form-data; boundary=b",
            False,
        ),
    ],
)
def test_one_click_bodies(body, content_type, expected):
    assert is_one_click(body, content_type) is expected


# --- service and handler --------------------------------------------------------------


@pytest.fixture
def parts(tokens):
    ledger = FakeLedger()
    ledger.items[("c1", "r1")] = DeliveryRecord(campaign_id="c1", recipient_id="r1", state=DeliveryState.SENT)
    suppressions = FakeSuppressions()
    events = FakeLedgerEvents(ledger)
    service = UnsubscribeService(tokens=tokens, suppressions=suppressions, ledger_events=events)
    return service, suppressions, events, tokens.sign("c1", "r1", "ann@example.com")


def test_unsubscribing_twice_suppresses_once(parts):
    service, suppressions, events, token = parts

    first, second = service.unsubscribe(token), service.unsubscribe(token)

    assert (first.newly_suppressed, second.newly_suppressed) == (True, False)
    suppression = suppressions.is_suppressed("ann@example.com")
    assert suppression.reason is SuppressionReason.UNSUBSCRIBED
    assert (suppression.source, suppression.campaign_id) == ("campaign:c1", "c1")
    assert events.kinds("c1", "r1") == ["unsubscribed"]


def request(
    method: str, token: str, body: str | None = None, content_type: str = "application/x-www-form-urlencoded"
) -> dict:
    path = f"/u/{token}"
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": content_type, "host": "unsubscribe.example.com"},
        "requestContext": {
            "http": {
                "method": method,
                "path": path,
                "sourceIp": "192.0.2.1",
                "protocol": "HTTP/1.1",
                "userAgent": "Mozilla/5.0",
            },
            "stage": "$default",
            "requestId": "1",
        },
        "body": body,
        "isBase64Encoded": False,
    }


def call(service, event) -> dict:
    ctx = LocalLambdaContext(
        function_name="sendonce-unsubscribe", invoked_function_arn="arn:aws:lambda:::function:u", timeout_s=10
    )
    return handler.lambda_handler(event, ctx, service=service)


def test_get_shows_a_page_with_a_post_button_and_unsubscribes_nobody(parts):
    service, suppressions, _, token = parts

    response = call(service, request("GET", token))

    assert response["statusCode"] == 200
    assert response["headers"]["Content-Type"].startswith("text/html")
    assert '<form method="post">' in response["body"] and 'value="One-Click"' in response["body"]
    assert response["headers"]["Referrer-Policy"] == "no-referrer"
    assert suppressions.items == {}


def test_one_click_post_unsubscribes_and_is_idempotent(parts):
    service, suppressions, _, token = parts

    answers = [call(service, request("POST", token, "List-Unsubscribe=One-Click")) for _ in range(2)]

    assert [a["statusCode"] for a in answers] == [200, 200]
    assert list(suppressions.reasons().values()) == ["unsubscribed"]
    assert "You are unsubscribed" in call(service, request("GET", token))["body"]


def test_a_tampered_token_is_403_and_changes_nothing(parts):
    service, suppressions, events, token = parts

    for altered in tamperings(token)[:-2]:
        for method in ("GET", "POST"):
            response = call(service, request(method, altered, "List-Unsubscribe=One-Click"))
            assert response["statusCode"] == 403, (method, altered)

    assert suppressions.items == {} and events.annotations == {}


def test_a_post_that_does_not_ask_for_one_click_is_400(parts):
    service, suppressions, _, token = parts

    response = call(service, request("POST", token, "hello=world"))

    assert response["statusCode"] == 400 and suppressions.items == {}
