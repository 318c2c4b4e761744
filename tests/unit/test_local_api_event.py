"""`sendonce local api` turns each request into API Gateway's HTTP API (v2) event."""

from __future__ import annotations

import base64

from sendonce_local.api_server import http_api_event


def test_a_request_becomes_a_v2_event_with_the_iam_caller():
    event = http_api_event(
        method="POST",
        target="/campaigns/c1/pause?dry=1&tag=a&tag=b",
        headers={"Content-Type": "application/json", "Cookie": "a=1; b=2", "User-Agent": "curl/8"},
        body=b'{"reason": "x"}',
        caller_arn="arn:aws:iam::123456789012:user/ann",
    )

    assert (event["version"], event["rawPath"], event["rawQueryString"]) == ("2.0", "/campaigns/c1/pause", "dry=1&tag=a&tag=b")
    assert event["queryStringParameters"] == {"dry": "1", "tag": "a,b"}  # repeated names joined, as API Gateway does
    assert event["headers"]["content-type"] == "application/json" and "cookie" not in event["headers"]
    assert event["cookies"] == ["a=1", "b=2"]
    assert event["requestContext"]["http"]["method"] == "POST"
    assert event["requestContext"]["authorizer"]["iam"]["userArn"] == "arn:aws:iam::123456789012:user/ann"
    assert (event["body"], event["isBase64Encoded"]) == ('{"reason": "x"}', False)


def test_a_binary_body_is_base64_and_no_body_is_absent():
    binary = http_api_event(method="PUT", target="/x", headers={"content-type": "application/octet-stream"},
                            body=b"\xff\x00", caller_arn="arn")
    empty = http_api_event(method="POST", target="/x", headers={}, body=b"", caller_arn="arn")

    assert binary["isBase64Encoded"] and base64.b64decode(binary["body"]) == b"\xff\x00"
    assert "body" not in empty and "queryStringParameters" not in empty
