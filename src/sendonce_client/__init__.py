"""Publish campaigns to sendonce from a backend: a SigV4-signed client of the operator API.

    from sendonce_client import Client
    client = Client("https://abc123.execute-api.eu-west-1.amazonaws.com")
    client.create_campaign({...})
    client.publish("spring-2026", users)

See docs/api.md, "Publishing from your backend".
"""

from sendonce_client.client import MAX_RECIPIENTS_PER_REQUEST, Client, PublishSummary, region_from_url
from sendonce_client.errors import (
    Conflict,
    ConnectionFailed,
    FieldError,
    InvalidRequest,
    JobFailed,
    JobTimedOut,
    NotFound,
    PublishFailed,
    SendonceAPIError,
    ServerError,
    Throttled,
)
from sendonce_client.forecast import ForecastResult

__all__ = [
    "MAX_RECIPIENTS_PER_REQUEST",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "FieldError",
    "ForecastResult",
    "InvalidRequest",
    "JobFailed",
    "JobTimedOut",
    "NotFound",
    "PublishFailed",
    "PublishSummary",
    "SendonceAPIError",
    "ServerError",
    "Throttled",
    "region_from_url",
]
