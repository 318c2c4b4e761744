"""The public endpoints - one-click unsubscribe (GET/POST /u/{token}) and Resend webhooks
(POST /webhooks/resend) - fuzzed through local HTTP APIs over moto: Schemathesis from the
document below (the routes and answers docs/deliverability.md lists), and Hypothesis with
tokens and Svix signatures that verify, so that the code behind the signature is reached
too. Every answer must be a documented status, never a 5xx."""

from __future__ import annotations

import json

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis import checks
from schemathesis.specs.openapi import checks as openapi_checks

from sendonce_local.resend_server import svix_headers
from tests.fuzz.conftest import REQUEST_TIMEOUT_S, fuzz_tests_per_operation

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 40
SETTINGS = dict(
    max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(hypothesis.HealthCheck)
)
TOKEN = {"name": "token", "in": "path", "required": True, "schema": {"type": "string"}}
PAGE = {"content": {"text/html": {"schema": {"type": "string"}}}}
PUBLIC_API = {
    "openapi": "3.1.0",
    "info": {"title": "sendonce public endpoints", "version": "1"},
    "paths": {
        "/u/{token}": {
            "get": {
                "parameters": [TOKEN],
                "responses": {
                    "200": {"description": "confirmation page", **PAGE},
                    "403": {"description": "bad token", **PAGE},
                    "404": {"description": "no such route"},
                },
            },
            "post": {
                "parameters": [TOKEN],
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": {"type": "object", "properties": {"List-Unsubscribe": {"type": "string"}}}
                        },
                        "multipart/form-data": {"schema": {"type": "object"}},
                    },
                },
                "responses": {
                    "200": {"description": "unsubscribed", **PAGE},
                    "400": {"description": "not a one-click body", **PAGE},
                    "403": {"description": "bad token", **PAGE},
                    "404": {"description": "no such route"},
                },
            },
        },
        "/webhooks/resend": {
            "post": {
                "parameters": [
                    {"name": n, "in": "header", "required": False, "schema": {"type": "string"}}
                    for n in ("svix-id", "svix-timestamp", "svix-signature")
                ],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {}}}},
                "responses": {
                    "200": {"description": "applied, duplicate, unreadable or not ours"},
                    "401": {"description": "signature missing, wrong or stale, or the body is no JSON object"},
                },
            },
        },
    },
}
DOCUMENTED = {("GET", "/u"): {200, 403, 404}, ("POST", "/u"): {200, 400, 403, 404}, ("POST", "/webhooks"): {200, 401}}
schema = schemathesis.openapi.from_dict(PUBLIC_API)
CHECKS = [checks.not_a_server_error, openapi_checks.status_code_conformance]


def base_url(public, path: str) -> str:
    return public.unsubscribe_api.url if path.startswith("/u/") else public.events_api.url


def _answers_as_documented(case, public):
    case.call_and_validate(base_url=base_url(public, case.formatted_path), timeout=REQUEST_TIMEOUT_S, checks=CHECKS)


globals().update(fuzz_tests_per_operation(schema, _answers_as_documented, hypothesis.settings(**SETTINGS), "test_fuzz"))


def _valid_token(public, system, recipient: str) -> str:
    return public.tokens().sign("c1", recipient, f"{recipient}@{system.domain}")


@hypothesis.settings(**SETTINGS)
@hypothesis.given(
    recipient=st.from_regex(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,20}$", fullmatch=True),
    body=st.one_of(
        st.binary(max_size=300), st.sampled_from([b"List-Unsubscribe=One-Click", b"List-Unsubscribe=one-click"])
    ),
    content_type=st.sampled_from(
        [
            "application/x-www-form-urlencoded",
            "multipart/form-data",
            "multipart/form-data; boundary=x",
            "text/plain",
            "application/octet-stream",
            "",
        ]
    ),
    method=st.sampled_from(["GET", "POST"]),
)
def test_a_valid_token_with_any_body_gets_a_documented_answer(public, system, recipient, body, content_type, method):
    url = f"{public.unsubscribe_api.url}/u/{_valid_token(public, system, recipient)}"
    headers = {"content-type": content_type} if content_type else {}

    status = requests.request(method, url, data=body, headers=headers, timeout=REQUEST_TIMEOUT_S).status_code

    assert status in DOCUMENTED[(method, "/u")] - {404} - {403}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
webhook_bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                [
                    "email.sent",
                    "email.delivered",
                    "email.bounced",
                    "email.complained",
                    "email.opened",
                    "email.failed",
                    "email.suppressed",
                    "contact.created",
                ]
            )
            | st.text(max_size=10),
            "created_at": st.text(max_size=30),
            "data": st.fixed_dictionaries(
                {},
                optional={
                    "email_id": st.text(max_size=20),
                    "to": st.lists(st.text(max_size=20), max_size=2),
                    "tags": st.dictionaries(st.sampled_from(["campaign_id", "recipient_id"]), st.text(max_size=20))
                    | json_values,
                    "bounce": st.fixed_dictionaries(
                        {}, optional={"type": st.sampled_from(["Permanent", "Temporary"]) | st.text()}
                    ),
                },
            )
            | json_values,
        }
    ).map(lambda v: json.dumps(v).encode()),
)


@hypothesis.settings(**SETTINGS)
@hypothesis.given(body=webhook_bodies, svix_id=st.from_regex(r"^msg_[A-Za-z0-9]{1,20}$", fullmatch=True))
def test_a_webhook_with_a_valid_svix_signature_and_any_body_gets_a_documented_answer(public, body, svix_id):
    text = body.decode("utf-8", "replace")
    headers = {**svix_headers(public.resources.webhook_secret, svix_id, text), "content-type": "application/json"}

    response = requests.post(
        f"{public.events_api.url}/webhooks/resend", data=text.encode(), headers=headers, timeout=REQUEST_TIMEOUT_S
    )

    try:
        is_object = isinstance(json.loads(text), dict)
    except ValueError:
        is_object = False
    # Signed but not a JSON object: refused like a bad signature (Resend never sends one).
    assert response.status_code == (200 if is_object else 401), response.text
