"""Context parsing and the sizing arithmetic (no synthesis)."""

from __future__ import annotations

import pytest

from sendonce_cdk.config import ConfigError, SendonceConfig
from sendonce_cdk.providers.ses import configuration_set_name

pytestmark = pytest.mark.infra


def config(**context: object) -> SendonceConfig:
    return SendonceConfig.from_context(dict(context))


def test_bare_context_gives_the_documented_defaults() -> None:
    defaults = config()

    assert defaults.stack_name == "Sendonce"
    assert defaults.providers == ("ses",)
    assert defaults.sender_domain == "example.com"
    assert defaults.resend_api_key_secret_name == "sendonce/resend-api-key"
    assert defaults.send_rate == 14
    assert defaults.removal_policy == "retain"
    assert (defaults.oncall_email, defaults.oncall_https_url, defaults.ses_configuration_set) == (None, None, None)
    assert defaults.resend_webhook_secret_name == "sendonce/resend-webhook-secret"
    assert defaults.unsubscribe_key_secret_name == "sendonce/unsubscribe-key"
    # No base URL: the consumer sends without List-Unsubscribe (docs/deploy.md says bulk senders must set it).
    assert (defaults.unsubscribe_base_url, defaults.recipients_bucket) == (None, None)


def test_the_feedback_id_defaults_to_the_deployment_s_sender_id() -> None:
    assert config().feedback_id_settings == {"feedback_id_sender_id": "sendonce", "feedback_id_stream": "campaign"}
    # From `-c key=value`: an empty customer is the default, not an error.
    assert config(feedback_id_sender_id="acme-mail", feedback_id_customer="").feedback_id_customer == ""


@pytest.mark.parametrize(
    ("context", "refusal"),
    [
        ({"feedback_id_sender_id": "abc"}, "feedback_id_sender_id: a SenderId of 3 characters"),
        ({"feedback_id_sender_id": "a" * 16}, "feedback_id_sender_id: a SenderId of 16 characters"),
        ({"feedback_id_stream": "news:letter"}, "feedback_id_stream: 'news:letter' has characters"),
        ({"feedback_id_customer": "acme eu"}, "feedback_id_customer: 'acme eu' has characters"),
    ],
)
def test_a_bad_feedback_id_is_refused_naming_the_key(context: dict[str, str], refusal: str) -> None:
    with pytest.raises(ConfigError, match=refusal):
        config(**context)


def test_the_stack_names_its_ses_configuration_set() -> None:
    assert configuration_set_name(config()) == "Sendonce-events"
    assert configuration_set_name(config(stack_name="Mail")) == "Mail-events"
    assert configuration_set_name(config(ses_configuration_set="sendonce-events")) == "sendonce-events"
    assert configuration_set_name(config(stack_name="S" * 128)) == "S" * 57 + "-events"  # SES allows 64
    assert configuration_set_name(config(provider="resend")) is None


def test_function_timeout_covers_one_full_batch() -> None:
    # ceil(100 / 8) = 13 rounds x 10 s + 20 s backoff + 5 s ledger + 15 s margin = 170 s -> 180 s.
    defaults = config()
    assert defaults.function_timeout_seconds == 180
    assert defaults.visibility_timeout_seconds == 6 * 180
    assert defaults.safety_margin_ms == 15_000


def test_function_timeout_grows_with_batch_size_and_slower_providers() -> None:
    assert config(batch_size=2).function_timeout_seconds == 330  # 2 x 155 + 15 = 325
    assert config(send_concurrency=4).function_timeout_seconds == 300  # 25 x 10 + 40 = 290
    assert config(provider_timeout_seconds=5).function_timeout_seconds == 120  # 13 x 5 + 40 = 105


def test_a_batch_that_cannot_fit_in_lambdas_15_minutes_is_refused() -> None:
    with pytest.raises(ConfigError, match="function timeout"):
        config(batch_size=10)


@pytest.mark.parametrize(
    ("send_rate", "latency_ms", "send_concurrency", "expected"),
    [
        (14, 250, 8, 2),  # ceil(0.44) = 1, raised to AWS's minimum of 2
        (200, 250, 8, 7),  # ceil(6.25)
        (1000, 250, 8, 32),  # ceil(31.25)
        (1_000_000, 250, 8, 1000),  # ceil(31250), clamped to AWS's maximum
    ],
)
def test_max_concurrency_from_the_send_rate(
    send_rate: float, latency_ms: int, send_concurrency: int, expected: int
) -> None:
    # A raised account quota and a fixed events share, so that the reservations fit.
    sized = config(
        send_rate=send_rate,
        provider_latency_ms=latency_ms,
        send_concurrency=send_concurrency,
        account_concurrency=5000,
        events_reserved_concurrency=100,
    )
    assert sized.max_concurrency == expected


def test_max_concurrency_override() -> None:
    assert config(max_concurrency="12").max_concurrency == 12


def test_command_line_context_arrives_as_strings() -> None:
    parsed = config(send_rate="50", send_concurrency="16", provider="SES, resend", removal_policy="DESTROY")
    assert (parsed.send_rate, parsed.send_concurrency) == (50.0, 16)
    assert parsed.providers == ("ses", "resend")
    assert parsed.retain is False


@pytest.mark.parametrize(
    "bad",
    [
        {"provider": "mailgun"},
        {"provider": ","},
        {"removal_policy": "snapshot"},
        {"send_rate": "0"},
        {"send_rate": "fast"},
        {"send_concurrency": "2.5"},
        {"send_concurrency": 65},
        {"provider_timeout_seconds": 61},
        {"batch_size": 0},
        {"max_concurrency": 1},
        {"oncall_https_url": "http://pager.example.org"},
        {"unsubscribe_base_url": "http://unsubscribe.example.org"},
        {"ses_configuration_set": "sendonce events"},
        {"recipients_bucket": "Acme_Lists"},
        {"unsubscribe_rate_limit": 0},
        {"unsubscribe_burst_limit": "lots"},
        {"webhook_rate_limit": "10001"},
        {"webhook_burst_limit": 5001},
        {"webhook_rate_limit": "2.5"},
        {"events_reserved_concurrency": 0},
        {"unsubscribe_reserved_concurrency": -1},
        {"api_reserved_concurrency": 0},
        {"account_concurrency": 100},
    ],
)
def test_bad_context_is_refused_before_synthesis(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        config(**bad)


def test_flood_protection_defaults() -> None:
    defaults = config()
    assert (defaults.unsubscribe_rate_limit, defaults.unsubscribe_burst_limit) == (50, 100)
    assert (defaults.webhook_rate_limit, defaults.webhook_burst_limit) == (100, 200)
    assert defaults.consumer_reserved_concurrency == defaults.max_concurrency == 2
    assert defaults.events_reserved_concurrency == 10
    assert (defaults.unsubscribe_reserved_concurrency, defaults.api_reserved_concurrency) == (10, 10)
    assert defaults.account_concurrency == 1000
    assert defaults.aggregator_reserved_concurrency == 10
    assert defaults.account_health_reserved_concurrency == 1  # SES is deployed: its account is checked
    assert defaults.reserved_concurrency_total == 48  # + the jobs worker's 5


@pytest.mark.parametrize(
    ("send_rate", "expected"),
    [
        (14, 10),  # ceil(14 x 3 x 0.05 x 2) = 5, raised to the minimum of 10
        (200, 60),
        (1000, 300),
    ],
)
def test_events_reserved_concurrency_follows_the_send_rate(send_rate: float, expected: int) -> None:
    assert config(send_rate=send_rate).events_reserved_concurrency == expected


def test_flood_protection_from_command_line_strings() -> None:
    parsed = config(
        webhook_rate_limit="300",
        webhook_burst_limit="600",
        events_reserved_concurrency="25",
        unsubscribe_reserved_concurrency="5",
        api_reserved_concurrency="3",
        account_concurrency="3000",
    )
    assert (parsed.webhook_rate_limit, parsed.webhook_burst_limit) == (300, 600)
    assert (parsed.events_reserved_concurrency, parsed.unsubscribe_reserved_concurrency) == (25, 5)
    assert (parsed.api_reserved_concurrency, parsed.account_concurrency) == (3, 3000)


def test_reservations_that_leave_lambda_too_little_unreserved_are_refused() -> None:
    # 2 + 10 + 10 + 10 + 10 (counters) + 5 (jobs) + 1 (SES account health) = 48 fits a 1,000 quota;
    # 2 + 863 + 10 + 10 + 10 + 5 + 1 = 901 > 1,000 - 100.
    assert config(events_reserved_concurrency=862).reserved_concurrency_total == 900
    with pytest.raises(
        ConfigError,
        match=r"reserve 901 .*consumer 2 = max_concurrency.*events 863.*jobs 5, account health 1.*account_concurrency 1000",
    ):
        config(events_reserved_concurrency=863)
    # The consumer's share grows with max_concurrency: the same check covers it.
    with pytest.raises(ConfigError, match="max_concurrency"):
        config(max_concurrency=900)
    assert config(max_concurrency=900, account_concurrency=1500).consumer_reserved_concurrency == 900
