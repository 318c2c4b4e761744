from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from resend.exceptions import ResendError

from sendonce.adapters.providers.resend.sender import classify_resend_error
from sendonce.adapters.providers.ses.sender import classify_ses_error
from sendonce.domain.errors import (
    AmbiguousProviderError,
    HaltProviderError,
    PermanentProviderError,
    RetryableProviderError,
    SettingsError,
)
from sendonce.settings import ConsumerSettings


def resend_error(code, kind, headers=None):
    return ResendError(code=code, error_type=kind, message="m", suggested_action="", headers=headers)


@pytest.mark.parametrize(
    "error, expected",
    [
        (resend_error(429, "rate_limit_exceeded", {"retry-after": "2"}), RetryableProviderError),
        (resend_error(429, "daily_quota_exceeded"), HaltProviderError),
        (resend_error(409, "concurrent_idempotent_requests"), RetryableProviderError),
        (resend_error(409, "invalid_idempotent_request"), AmbiguousProviderError),
        (resend_error(503, "service_unavailable"), RetryableProviderError),
        (resend_error(500, "application_error"), AmbiguousProviderError),
        (resend_error(500, "HttpClientError"), AmbiguousProviderError),
        (resend_error(422, "validation_error"), PermanentProviderError),
        (resend_error(400, "validation_error"), PermanentProviderError),
        (resend_error(401, "missing_api_key"), HaltProviderError),
        (resend_error(403, "invalid_api_key"), HaltProviderError),
        # Resend's domain-not-verified class: the campaign pauses rather than failing each email.
        (resend_error(403, "validation_error"), HaltProviderError),
    ],
)
def test_resend_errors_are_classified(error, expected):
    assert type(classify_resend_error(error)) is expected


def test_resend_rate_limit_carries_retry_after_and_a_key_reuse_is_not_repeatable():
    assert classify_resend_error(resend_error(429, "rate_limit_exceeded", {"retry-after": "2"})).retry_after == 2.0
    assert classify_resend_error(resend_error(409, "invalid_idempotent_request")).repeatable is False


def ses_error(code, status=400, message="m"):
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, "SendEmail"
    )


@pytest.mark.parametrize(
    "error, expected",
    [
        (ses_error("TooManyRequestsException", 429, "Maximum sending rate exceeded."), RetryableProviderError),
        (ses_error("LimitExceededException", 400, "Daily message quota exceeded."), HaltProviderError),
        (ses_error("SendingPausedException"), HaltProviderError),
        (ses_error("AccountSuspendedException"), HaltProviderError),
        (ses_error("MessageRejected"), PermanentProviderError),
        # The account or the sending domain may not send (issue 32): the campaign pauses.
        (ses_error("MailFromDomainNotVerifiedException"), HaltProviderError),
        (ses_error("MessageRejected", 400, "Email address is not verified. ..."), HaltProviderError),
        (ses_error("InternalFailure", 500), AmbiguousProviderError),
        (ReadTimeoutError(endpoint_url="https://email"), AmbiguousProviderError),
    ],
)
def test_ses_errors_are_classified(error, expected):
    assert type(classify_ses_error(error)) is expected


GOOD = {
    "SENDONCE_LEDGER_TABLE": "ledger",
    "SENDONCE_CAMPAIGNS_TABLE": "campaigns",
    "SENDONCE_DEAD_LETTER_QUEUE_URL": "http://localhost:5000/123/dlq",
}


def test_settings_from_the_environment():
    settings = ConsumerSettings.from_env({**GOOD, "SENDONCE_SEND_CONCURRENCY": "4"})
    assert settings.send_concurrency == 4 and settings.ledger_table == "ledger"


@pytest.mark.parametrize(
    "env, message",
    [
        ({k: v for k, v in GOOD.items() if k != "SENDONCE_LEDGER_TABLE"}, "SENDONCE_LEDGER_TABLE: Field required"),
        ({**GOOD, "SENDONCE_SEND_CONCURRENCY": "0"}, "SENDONCE_SEND_CONCURRENCY"),
        ({**GOOD, "SENDONCE_SAFETY_MARGIN_MS": "2000"}, "safety_margin_ms must be at least"),
        ({**GOOD, "POWERTOOLS_IDEMPOTENCY_DISABLED": "true"}, "refuses to send without its ledger"),
    ],
)
def test_bad_settings_are_refused_with_the_variable_named(env, message):
    with pytest.raises(SettingsError, match=message):
        ConsumerSettings.from_env(env)


def test_provider_reasons_never_carry_a_raw_address():
    from sendonce.domain.errors import PermanentProviderError
    from sendonce.domain.models import email_fingerprint

    error = PermanentProviderError("Invalid `to` field: Ann.Lee+promo@Example.com is not allowed")

    assert "Ann.Lee" not in error.reason and "@" not in error.reason.replace("<email:", "")
    assert email_fingerprint("Ann.Lee+promo@Example.com") in error.reason


def test_resend_defaults_to_its_documented_team_limit_learned_from_headers_with_a_reserve():
    settings = ConsumerSettings.from_env(GOOD)

    assert (settings.resend_requests_per_second, settings.resend_rate_from_headers, settings.resend_rate_reserve) == (
        5.0,
        True,
        1.0,
    )
    with pytest.raises(SettingsError, match="RESEND_RATE_RESERVE"):
        ConsumerSettings.from_env({**GOOD, "SENDONCE_RESEND_RATE_RESERVE": "-1"})


def test_the_operator_api_reads_the_rates_the_consumer_paces_its_providers_at():
    from sendonce.settings import ApiSettings
    from sendonce.wiring.providers import configured_rates

    api = {**GOOD, "SENDONCE_QUEUE_URL": "http://localhost:5000/123/queue"}

    assert configured_rates(ApiSettings.from_env(api)) == {"ses": 14.0, "resend": 5.0}
    both = {**api, "SENDONCE_SES_SEND_RATE": "200", "SENDONCE_RESEND_REQUESTS_PER_SECOND": "10"}
    assert configured_rates(ApiSettings.from_env(both)) == {"ses": 200.0, "resend": 10.0}
    with pytest.raises(SettingsError, match="RESEND_REQUESTS_PER_SECOND"):
        ApiSettings.from_env({**api, "SENDONCE_RESEND_REQUESTS_PER_SECOND": "0"})
