"""The consumer's side of deliverability: suppressed recipients are not sent, and every
email carries the one-click unsubscribe headers."""

from __future__ import annotations

import pytest

from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.deliverability.unsubscribe import UnsubscribeLinks, UnsubscribeTokens
from sendonce.domain.errors import SettingsError
from sendonce.domain.models import DeliveryState, email_fingerprint
from sendonce.settings import ConsumerSettings
from tests.fakes import FakeSuppressions
from tests.unit.helpers import World, batch

KEY = b"0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("provider", ["resend", "ses"])
def test_a_suppressed_recipient_ends_suppressed_and_is_not_sent(provider):
    world = World(provider_name=provider)
    world.campaign()
    suppressions = FakeSuppressions()
    suppressions.add("USER2@example.com", SuppressionReason.UNSUBSCRIBED, "campaign:c0", "c0")
    service = world.service(suppressions=suppressions)

    report = world.process(batch(n=5), service=service)
    again = world.process(batch(n=5), service=service)  # a redelivered message

    assert (report.sent, report.suppressed, report.returning) == (4, 1, 0)
    assert "user2@example.com" not in world.provider.deliveries()
    record = world.ledger.items[("c1", "r2")]
    assert record.state is DeliveryState.SUPPRESSED and record.maybe_sent_at_ms is None
    assert again.sent == 0 and sum(world.provider.deliveries().values()) == 4
    # One read of the list per message, none per recipient; a message of ended deliveries reads nothing
    assert (suppressions.batch_reads, suppressions.reads) == (1, 0)


def test_every_email_carries_one_click_headers_that_name_its_delivery():
    world = World()
    world.campaign()
    tokens = UnsubscribeTokens([KEY])
    service = world.service(unsubscribe=UnsubscribeLinks(tokens, "https://unsubscribe.example.com"))

    world.process(batch(n=3), service=service)

    assert len(world.provider.accepted) == 3
    for email in world.provider.accepted:
        assert email.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        token = email.headers["List-Unsubscribe"].strip("<>").rsplit("/", 1)[1]
        claims = tokens.verify(token)
        assert (claims.campaign_id, claims.recipient_id) == ("c1", email.tags["recipient_id"])
        assert claims.fingerprint == email_fingerprint(email.to)


CONSUMER = {
    "SENDONCE_LEDGER_TABLE": "ledger",
    "SENDONCE_CAMPAIGNS_TABLE": "campaigns",
    "SENDONCE_DEAD_LETTER_QUEUE_URL": "https://sqs.example.com/dlq",
}


def test_consumer_settings_take_the_suppressions_table_and_the_unsubscribe_key_and_url():
    settings = ConsumerSettings.from_env(
        {
            **CONSUMER,
            "SENDONCE_SUPPRESSIONS_TABLE": "supp",
            "SENDONCE_UNSUBSCRIBE_KEY_SECRET": "sendonce/unsubscribe-key",
            "SENDONCE_UNSUBSCRIBE_BASE_URL": "https://unsubscribe.example.com",
        }
    )

    assert (settings.suppressions_table, settings.unsubscribe_base_url) == ("supp", "https://unsubscribe.example.com")
    with pytest.raises(SettingsError):  # a key without a URL (or the reverse) is a mistake
        ConsumerSettings.from_env({**CONSUMER, "SENDONCE_UNSUBSCRIBE_KEY_SECRET": "k"})
    with pytest.raises(SettingsError):  # RFC 8058 wants https
        ConsumerSettings.from_env(
            {
                **CONSUMER,
                "SENDONCE_UNSUBSCRIBE_KEY_SECRET": "k",
                "SENDONCE_UNSUBSCRIBE_BASE_URL": "http://unsubscribe.example.com",
            }
        )
