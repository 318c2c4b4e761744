"""The local HTTP API (`sendonce local api`, the integration tests' public endpoints) turns
each request into API Gateway's HTTP API (v2) event and each answer into its response."""

from __future__ import annotations

import base64
import json

import pytest

from sendonce_local.http_api import http_api_event, http_response


def test_a_request_becomes_a_v2_event_with_the_iam_caller():
    event = http_api_event(
        method="POST",
        target="/campaigns/c1/pause?dry=1&tag=a&tag=b",
        headers={"Content-Type": "application/json", "Cookie": "a=1; b=2", "User-Agent": "curl/8"},
        body=b'{"reason": "x"}',
        caller_arn="arn:aws:iam::123456789012:user/ann",
    )

    assert (event["version"], event["rawPath"], event["rawQueryString"]) == (
        "2.0",
        "/campaigns/c1/pause",
        "dry=1&tag=a&tag=b",
    )
    assert event["queryStringParameters"] == {"dry": "1", "tag": "a,b"}  # repeated names joined, as API Gateway does
    assert event["headers"]["content-type"] == "application/json" and "cookie" not in event["headers"]
    assert event["cookies"] == ["a=1", "b=2"]
    assert event["requestContext"]["http"]["method"] == "POST"
    assert event["requestContext"]["authorizer"]["iam"]["userArn"] == "arn:aws:iam::123456789012:user/ann"
    assert (event["body"], event["isBase64Encoded"]) == ('{"reason": "x"}', False)


def test_a_binary_body_is_base64_and_no_body_is_absent():
    binary = http_api_event(
        method="PUT",
        target="/x",
        headers={"content-type": "application/octet-stream"},
        body=b"\xff\x00",
        caller_arn="arn",
    )
    empty = http_api_event(method="POST", target="/x", headers={}, body=b"", caller_arn="arn")

    assert binary["isBase64Encoded"] and base64.b64decode(binary["body"]) == b"\xff\x00"
    assert "body" not in empty and "queryStringParameters" not in empty and not empty["isBase64Encoded"]


@pytest.mark.parametrize("content_type, as_text", [
    ("application/json", True),
    ("APPLICATION/JSON; CHARSET=UTF-8", True),
    ("text/plain", True),
    ("text/html; charset=utf-8", True),
    ("application/xml", True),
    ("application/javascript", True),
    ("text/plain; charset=iso-8859-1", False),
    # Form posts arrive base64-encoded behind an HTTP API: the one-click unsubscribe POST among them.
    ("application/x-www-form-urlencoded", False),
    ("multipart/form-data; boundary=x", False),
    ("application/octet-stream", False),
    (None, False),
])  # fmt: skip
def test_only_text_media_types_arrive_as_text(content_type, as_text):
    headers = {"content-type": content_type} if content_type else {}

    event = http_api_event(method="POST", target="/u/t", headers=headers, body=b"List-Unsubscribe=One-Click")

    assert event["isBase64Encoded"] is not as_text
    body = event["body"] if as_text else base64.b64decode(event["body"]).decode()
    assert body == "List-Unsubscribe=One-Click"


def test_text_that_is_not_utf8_arrives_as_the_bytes_sent():
    event = http_api_event(
        method="POST", target="/campaigns", headers={"content-type": "application/json"}, body=b"\xff\xfe{"
    )

    assert event["isBase64Encoded"] and base64.b64decode(event["body"]) == b"\xff\xfe{"


def test_a_public_route_has_no_authorizer_and_repeated_headers_are_joined():
    event = http_api_event(
        method="GET", target="/prod/u/t", headers=[("Accept", "text/html"), ("accept", "*/*")], body=b"", stage="prod"
    )

    assert "authorizer" not in event["requestContext"]
    assert event["headers"]["accept"] == "text/html,*/*"
    assert (event["requestContext"]["stage"], event["rawPath"]) == ("prod", "/prod/u/t")


def test_an_answer_becomes_the_http_response():
    status, headers, body = http_response({
        "statusCode": 201, "headers": {"Content-Type": "text/html", "Content-Length": "999"},
        "cookies": ["s=1; Secure"], "body": base64.b64encode(b"<p>hi</p>").decode(), "isBase64Encoded": True,
    })  # fmt: skip
    bare = http_response({"accepted": 3})

    assert (status, body) == (201, b"<p>hi</p>")
    assert headers == [("Content-Type", "text/html"), ("Set-Cookie", "s=1; Secure")]  # the server sets the length
    assert bare == (200, [("Content-Type", "application/json")], json.dumps({"accepted": 3}).encode())
