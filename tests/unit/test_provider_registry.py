"""The provider registry, the capabilities it carries, and the settings it adds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sendonce.adapters.providers import registry
from sendonce.adapters.providers.resend.sender import ResendProvider
from sendonce.adapters.providers.ses.sender import SesProvider
from sendonce.domain.capabilities import ProviderCapabilities
from sendonce.domain.errors import SettingsError
from sendonce.settings import ConsumerSettings, EventsSettings, consumer_settings_model, events_settings_model
from tests.third_provider import PROVIDER as STANDIN

BASE = {
    "SENDONCE_LEDGER_TABLE": "ledger",
    "SENDONCE_CAMPAIGNS_TABLE": "campaigns",
    "SENDONCE_DEAD_LETTER_QUEUE_URL": "https://sqs.example/dlq",
}


def test_the_built_in_providers_and_what_their_capabilities_allow():
    providers = registry.registered()

    assert registry.names() == ("ses", "resend")
    assert registry.batch_names() == ("resend",)
    assert [p.capabilities.refusals() for p in providers.values()] == [("delivery_mode: batch",), ()]
    # The adapters state what their folder registers, from the same object.
    assert (SesProvider.idempotent, ResendProvider.idempotent) == (False, True)
    assert ResendProvider.max_batch == providers["resend"].capabilities.max_batch == 100
    assert [p.default_rate() for p in providers.values()] == [14.0, 4.0]


def test_a_provider_is_registered_once_under_a_plain_name():
    with pytest.raises(ValueError, match="registered twice"):
        registry.registered([registry.registered()["ses"]])
    assert list(registry.registered([STANDIN])) == ["ses", "resend", "standin"]
    assert registry.batch_names(registry.registered([STANDIN])) == ("resend",)  # 10 a request, no keys


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"idempotent": True}, "idempotency_window_s"),
        ({"idempotent": False, "max_batch": 0}, "max_batch"),
        ({"idempotent": False, "default_rate": 0}, "default_rate"),
    ],
)
def test_capabilities_that_contradict_themselves_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        ProviderCapabilities(**{"default_rate": 1.0, **fields})


def test_a_providers_settings_are_its_own_variables_and_bad_ones_name_them():
    model = consumer_settings_model(registry.registered([STANDIN]))

    settings = model.from_env({**BASE, "SENDONCE_STANDIN_API_URL": "http://127.0.0.1:9", "SENDONCE_SES_SEND_RATE": "7"})

    assert settings.provider_settings(STANDIN).api_url == "http://127.0.0.1:9"
    assert settings.ses_send_rate == 7.0
    with pytest.raises(SettingsError, match="SENDONCE_STANDIN_SEND_RATE"):
        model.from_env({**BASE, "SENDONCE_STANDIN_SEND_RATE": "-1"})
    # The registered providers' models know nothing of it.
    with pytest.raises(ValidationError, match="standin_api_url"):
        ConsumerSettings(**{k.removeprefix("SENDONCE_").lower(): v for k, v in BASE.items()}, standin_api_url="x")
    assert "standin_webhook_secret" in events_settings_model(registry.registered([STANDIN])).model_fields
    assert "standin_webhook_secret" not in EventsSettings.model_fields


def test_a_provider_reads_the_variables_its_registration_names_besides_its_own():
    settings = ConsumerSettings.from_env({**BASE, "RESEND_API_URL": "http://127.0.0.1:8"})

    assert settings.resend_api_url == "http://127.0.0.1:8"
    assert ConsumerSettings.env_fallbacks == {"resend_api_url": "RESEND_API_URL"}


def test_the_rate_part_of_a_providers_settings_is_what_its_pace_reads():
    # The operator API carries only this part: a campaign's max_rate may not exceed the rate.
    for provider in registry.registered().values():
        assert issubclass(provider.settings, provider.rate_settings), provider.name
        rate = provider.settings(**{field: 0.5 for field in provider.rate_settings.model_fields})
        assert provider.pace(rate, None).rate == 0.5, provider.name
