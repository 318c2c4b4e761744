"""What the providers receive carries one Feedback-ID of the documented shape: emails composed as
the consumer composes them, sent through the real adapters (the resend SDK to the local Resend
server, one by one and in a batch; boto3's SES v2 to moto's server, whose record keeps a simple
send's headers with sendonce_local.moto_patches.ses_headers)."""

from __future__ import annotations

import re
import uuid

import boto3
import pytest
import requests

from sendonce.adapters.aws_session import aws_session
from sendonce.adapters.providers.resend.sender import ResendProvider
from sendonce.adapters.providers.ses.sender import SEND_CLIENT_CONFIG, SesProvider
from sendonce.domain.deliverability.feedback_id import FeedbackId
from sendonce.domain.deliverability.unsubscribe import UnsubscribeLinks, UnsubscribeTokens
from sendonce.domain.models import Campaign, Content, OutboundEmail, Recipient
from sendonce.domain.sending.provider_call import compose
from sendonce.domain.sending.rendering import CompiledContent
from sendonce_local.moto_server import MotoServer, ses_sent_messages
from sendonce_local.resend_server import LocalResendServer
from sendonce_local.resources import verify_ses_sender

pytestmark = pytest.mark.integration

FEEDBACK = FeedbackId("acme-mail", "newsletter", "acme-eu")
# <campaign>:<stream>:<customer>:<SenderId>, the SenderId 5-15 characters.
SHAPE = re.compile(r"^[A-Za-z0-9_-]+:[A-Za-z0-9._-]+:[A-Za-z0-9._-]*:[A-Za-z0-9._-]{5,15}$")
LINKS = UnsubscribeLinks(UnsubscribeTokens([b"k" * 32]), "https://unsubscribe.example.com")


def emails(domain: str, n: int, campaign_id: str = "spring") -> list[OutboundEmail]:
    campaign = Campaign(
        campaign_id=campaign_id,
        name="Spring",
        provider="resend",
        sender=f"news@{domain}",
        content=Content(subject="Hi {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}"),
    )
    content = CompiledContent(campaign.content)
    return [
        compose(
            campaign,
            content,
            Recipient(recipient_id=f"r{i}", email=f"user{i}@{domain}", variables={"name": f"User {i}"}),
            f"{campaign_id}:r{i}",
            LINKS,
            feedback_id=FEEDBACK,
        )
        for i in range(n)
    ]


def assert_one_feedback_id(headers: list[tuple[str, str]], recipient_id: str, address: str) -> None:
    [value] = [v for name, v in headers if name.lower() == "feedback-id"]
    assert SHAPE.fullmatch(value), value
    assert value == "spring:newsletter:acme-eu:acme-mail"
    assert recipient_id not in value.split(":") and address not in value


# --- Resend --------------------------------------------------------------------------


def _accepted_by_resend(server: LocalResendServer) -> list[dict]:
    """What the server recorded, read as any client would (GET /_local/accepted)."""
    return list(requests.get(f"{server.url}/_local/accepted", timeout=30).json()["accepted"])


def test_resend_receives_one_feedback_id_per_email_one_by_one(resend_server: LocalResendServer) -> None:
    provider = ResendProvider(api_key="re_test_local", api_url=resend_server.url)

    for email in emails("example.com", 2):
        provider.send(email)

    accepted = _accepted_by_resend(resend_server)
    assert [a["endpoint"] for a in accepted] == ["/emails", "/emails"]
    for index, received in enumerate(accepted):
        assert_one_feedback_id(list(received["headers"].items()), f"r{index}", f"user{index}@example.com")


def test_resend_receives_one_feedback_id_per_email_in_a_batch(resend_server: LocalResendServer) -> None:
    provider = ResendProvider(api_key="re_test_local", api_url=resend_server.url)

    receipts = provider.send_batch(emails("example.com", 3), idempotency_key="spring:group-1")

    assert len(receipts) == 3
    accepted = _accepted_by_resend(resend_server)
    assert [(a["endpoint"], a["batch_index"]) for a in accepted] == [("/emails/batch", i) for i in range(3)]
    for index, received in enumerate(accepted):
        assert_one_feedback_id(list(received["headers"].items()), f"r{index}", f"user{index}@example.com")


# --- SES (moto's server) ---------------------------------------------------------------


def test_ses_receives_one_feedback_id_per_email(aws_env: dict[str, str], moto: MotoServer) -> None:
    domain = f"{uuid.uuid4().hex[:8]}.example.com"
    verify_ses_sender(aws_session(), domain)
    provider = SesProvider(client=boto3.client("sesv2", config=SEND_CLIENT_CONFIG))

    ids = [provider.send(email).provider_message_id for email in emails(domain, 2)]

    recorded = {m["id"]: m for m in ses_sent_messages(moto.endpoint)}
    for index, message_id in enumerate(ids):
        message = recorded[message_id]
        assert "headers" in message, "moto's record keeps no headers: is moto_patches.ses_headers applied?"
        assert message["recipients"] == [f"user{index}@{domain}"]
        headers = [(h["Name"], h["Value"]) for h in message["headers"]]
        assert_one_feedback_id(headers, f"r{index}", f"user{index}@{domain}")
        # And the rest of what was composed, as SES would add it.
        assert dict(headers)["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
