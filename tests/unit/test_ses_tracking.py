"""A campaign that tracks opens or clicks sends through SES's tracked configuration set (the
one whose event destination publishes opens and clicks, so SES adds the pixel and rewrites the
links); every other email through the stack's own. Checked on the request the real sesv2
client would send (botocore's Stubber)."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import ANY, Stubber

from sendonce.adapters.providers.ses.sender import SesProvider
from sendonce.domain.models import Campaign, Content, Recipient, Tracking
from sendonce.domain.sending.provider_call import compose
from sendonce.domain.sending.rendering import CompiledContent


def campaign(tracking: Tracking | None) -> Campaign:
    return Campaign(
        campaign_id="c1",
        name="n",
        provider="ses",
        sender="news@example.com",
        content=Content(subject="Hi", html='<a href="https://example.com/">x</a>'),
        tracking=tracking,
    )


@pytest.mark.parametrize(
    ("tracking", "configuration_set"),
    [(Tracking(opens=True), "s-events-tracked"), (Tracking(clicks=True), "s-events-tracked"), (None, "s-events")],
)
def test_the_tracked_configuration_set_is_named_only_for_a_campaign_that_tracks(tracking, configuration_set):
    client = boto3.client("sesv2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    provider = SesProvider(client=client, configuration_set="s-events", tracked_configuration_set="s-events-tracked")
    sent = campaign(tracking)
    email = compose(
        sent, CompiledContent(sent.content), Recipient(recipient_id="r1", email="a@example.org"), "k1", None
    )

    with Stubber(client) as stub:
        stub.add_response(
            "send_email",
            {"MessageId": "m-1"},
            {
                "FromEmailAddress": "news@example.com",
                "Destination": {"ToAddresses": ["a@example.org"]},
                "Content": ANY,
                "EmailTags": ANY,
                "ConfigurationSetName": configuration_set,
            },
        )
        assert provider.send(email).provider_message_id == "m-1"
        stub.assert_no_pending_responses()
