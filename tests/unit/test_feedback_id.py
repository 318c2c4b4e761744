"""The Feedback-ID header: its parts refused by name at their bounds, and every composed email
(consumer, preview, test send) carrying exactly one, of the campaign, never of the recipient."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sendonce.domain.campaigns.preview import PreviewService, TestSendService
from sendonce.domain.deliverability.feedback_id import HEADER, FeedbackId
from sendonce.domain.deliverability.unsubscribe import UnsubscribeLinks, UnsubscribeTokens
from sendonce.domain.errors import SettingsError
from sendonce.domain.models import Campaign, Content, Recipient
from sendonce.domain.sending.provider_call import compose
from sendonce.domain.sending.rendering import CompiledContent
from sendonce.settings import ApiSettings, ConsumerSettings
from tests.fakes import FakeCampaignStore, FakeProvider, FakeTestSendLog
from tests.unit.helpers import World, batch

SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
safe_text = st.text(alphabet=SAFE, min_size=0, max_size=40)
unsafe_character = st.characters(codec="utf-8").filter(lambda c: c not in SAFE)


def feedback_headers(headers: dict[str, str]) -> list[str]:
    return [value for name, value in headers.items() if name.lower() == HEADER.lower()]


# --- the value: bounds, characters, shape ---------------------------------------------


@pytest.mark.parametrize(("length", "valid"), [(4, False), (5, True), (15, True), (16, False)])
def test_the_sender_id_is_5_to_15_characters(length: int, valid: bool) -> None:
    sender_id = "s" * length
    if valid:
        assert FeedbackId(sender_id).sender_id == sender_id
    else:
        with pytest.raises(ValueError, match=rf"sender_id: a SenderId of {length} characters"):
            FeedbackId(sender_id)


@settings(max_examples=200, deadline=None)
@given(sender_id=safe_text, stream=safe_text, customer=safe_text)
def test_safe_parts_are_accepted_exactly_within_their_lengths(sender_id: str, stream: str, customer: str) -> None:
    valid = 5 <= len(sender_id) <= 15 and 1 <= len(stream) <= 32 and len(customer) <= 32
    try:
        made = FeedbackId(sender_id, stream, customer)
    except ValueError as exc:
        assert not valid
        message = str(exc)
        # Each bad part is named, and only those.
        assert ("sender_id:" in message) == (not 5 <= len(sender_id) <= 15)
        assert ("stream:" in message) == (not 1 <= len(stream) <= 32)
        assert ("customer:" in message) == (len(customer) > 32)
    else:
        assert valid
        # Four fields from the right, as Gmail reads them, whatever the campaign id.
        assert made.value("c-1_x").split(":") == ["c-1_x", stream, customer, sender_id]


@settings(max_examples=100, deadline=None)
@given(
    field=st.sampled_from(["sender_id", "stream", "customer"]),
    character=unsafe_character,
    position=st.integers(min_value=0, max_value=6),
)
def test_a_character_outside_the_safe_set_is_refused_naming_the_field(
    field: str, character: str, position: int
) -> None:
    good = {"sender_id": "acme-mail", "stream": "newsletter", "customer": "acme"}
    value = good[field][:position] + character + good[field][position:]
    with pytest.raises(ValueError, match=rf"{field}: .* has characters other than") as refused:
        FeedbackId(**{**good, field: value})
    if character == ":":
        assert "a colon would split" in str(refused.value)


def test_empty_parts_sender_id_and_stream_are_refused_customer_may_be_empty() -> None:
    with pytest.raises(ValueError, match="sender_id: a SenderId of 0 characters"):
        FeedbackId("")
    with pytest.raises(ValueError, match="stream: a stream of 0 characters"):
        FeedbackId("acme-mail", "")
    assert FeedbackId("acme-mail", "news", "").header("c1") == ("Feedback-ID", "c1:news::acme-mail")


def test_the_default_is_the_deployment_s_sender_id_on_the_campaign_stream() -> None:
    assert FeedbackId().header("spring") == ("Feedback-ID", "spring:campaign::sendonce")


# --- settings: the field named in the error -------------------------------------------

CONSUMER = {
    "SENDONCE_LEDGER_TABLE": "ledger",
    "SENDONCE_CAMPAIGNS_TABLE": "campaigns",
    "SENDONCE_DEAD_LETTER_QUEUE_URL": "https://sqs.example.com/dlq",
}
API = {**CONSUMER, "SENDONCE_QUEUE_URL": "https://sqs.example.com/q"}


@pytest.mark.parametrize(("model", "environ"), [(ConsumerSettings, CONSUMER), (ApiSettings, API)])
def test_settings_default_to_the_sendonce_sender_id_and_refuse_bad_parts_by_variable(model, environ) -> None:
    assert model.from_env(environ).feedback_id == FeedbackId("sendonce", "campaign", "")
    configured = model.from_env(
        {
            **environ,
            "SENDONCE_FEEDBACK_ID_SENDER_ID": "acme-mail",
            "SENDONCE_FEEDBACK_ID_STREAM": "newsletter",
            "SENDONCE_FEEDBACK_ID_CUSTOMER": "acme-eu",
        }
    )
    assert configured.feedback_id.value("c1") == "c1:newsletter:acme-eu:acme-mail"

    with pytest.raises(SettingsError, match="SENDONCE_FEEDBACK_ID_SENDER_ID: .*a SenderId of 3 characters"):
        model.from_env({**environ, "SENDONCE_FEEDBACK_ID_SENDER_ID": "abc"})
    with pytest.raises(SettingsError, match="SENDONCE_FEEDBACK_ID_CUSTOMER: .*'a:b' has characters"):
        model.from_env({**environ, "SENDONCE_FEEDBACK_ID_CUSTOMER": "a:b"})


# --- composed emails --------------------------------------------------------------------

FEEDBACK = FeedbackId("acme-mail", "newsletter", "acme-eu")
ANN = Recipient(recipient_id="r-ann-7", email="ann.lee@example.com", variables={"name": "Ann"})


def campaign() -> Campaign:
    return Campaign(
        campaign_id="spring",
        name="Spring",
        provider="resend",
        sender="news@example.com",
        content=Content(subject="Hi {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}"),
    )


def assert_one_feedback_id_of_the_campaign(headers: dict[str, str], recipient: Recipient) -> None:
    [value] = feedback_headers(headers)
    assert value == "spring:newsletter:acme-eu:acme-mail"
    # No recipient data: neither the id, nor the address or any part of it.
    for secret in (recipient.recipient_id, recipient.email, *recipient.email.split("@")):
        assert secret not in value


def test_compose_adds_exactly_one_feedback_id_beside_the_unsubscribe_headers() -> None:
    links = UnsubscribeLinks(UnsubscribeTokens([b"k" * 32]), "https://u.example.com")
    content = CompiledContent(campaign().content)

    email = compose(campaign(), content, ANN, "key", links, feedback_id=FEEDBACK)

    assert_one_feedback_id_of_the_campaign(email.headers, ANN)
    assert email.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    # Without one (until the wiring passes it), nothing is added.
    assert feedback_headers(compose(campaign(), content, ANN, "key", links).headers) == []


def test_every_email_the_consumer_sends_carries_its_campaign_s_feedback_id() -> None:
    world = World()
    world.campaign("spring")
    service = world.service(feedback_id=FEEDBACK)

    world.process(batch("spring", n=3), service=service)

    assert len(world.provider.accepted) == 3
    for email in world.provider.accepted:
        [value] = feedback_headers(email.headers)
        assert value == "spring:newsletter:acme-eu:acme-mail"
        assert email.tags["recipient_id"] not in value and email.to not in value


def test_preview_and_test_sends_carry_what_the_consumer_sends() -> None:
    campaigns = FakeCampaignStore()
    campaigns.create(campaign())
    provider = FakeProvider("resend")

    preview = PreviewService(campaigns=campaigns, feedback_id=FEEDBACK).preview("spring", ANN)
    TestSendService(
        campaigns=campaigns,
        providers={"resend": provider},
        log=FakeTestSendLog(),
        feedback_id=FEEDBACK,
        sleep=lambda s: None,
    ).send("spring", ["me@example.com"], variables={"name": "Ann"}, by="ann")

    assert_one_feedback_id_of_the_campaign(preview.headers, ANN)
    [sent] = provider.accepted
    assert_one_feedback_id_of_the_campaign(sent.headers, ANN)
    assert "me@example.com" not in sent.headers[HEADER]
