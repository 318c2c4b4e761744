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
