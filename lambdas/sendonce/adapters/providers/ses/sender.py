"""Amazon SES v2 through boto3. SES has no idempotency key, so a send is attempted once:
botocore's retries are off for this client (a retried SendEmail can send twice), and the
domain's backoff handles throttling, which SES answers before accepting anything."""

from __future__ import annotations

from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError

from sendonce.domain.capabilities import ProviderCapabilities
from sendonce.domain.errors import (
    AmbiguousProviderError,
    HaltProviderError,
    PermanentProviderError,
    RetryableProviderError,
)
from sendonce.domain.models import OutboundEmail, Receipt

# One attempt exactly: `max_attempts: 1` still made two in botocore's standard mode.
SEND_CLIENT_CONFIG = Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=10)

# The account or the sending domain may not send: every email of the campaign would fail alike,
# so the campaign pauses (halt) instead of failing recipient after recipient.
_HALT = {"SendingPausedException", "AccountSuspendedException", "MailFromDomainNotVerifiedException"}
_PERMANENT = {"MessageRejected", "BadRequestException", "NotFoundException"}
_THROTTLE = {"TooManyRequestsException", "Throttling", "ThrottlingException", "LimitExceededException"}


def classify_ses_error(exc: Exception) -> Exception:
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        return RetryableProviderError(f"ses unreachable: {exc}")  # never reached SES
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        reason = f"ses {code}: {message}"[:500]
        # An unverified sender identity: MessageRejected "Email address is not verified".
        unverified = code == "MessageRejected" and "not verified" in message.lower()
        if code in _HALT or unverified or "quota" in message.lower():
            return HaltProviderError(reason, code=code)
        if code in _THROTTLE:
            return RetryableProviderError(reason, code=code, throttled=True)
        if code in _PERMANENT:
            return PermanentProviderError(reason, code=code)
        if status >= 500:
            return AmbiguousProviderError(reason, code=code)
        return PermanentProviderError(reason, code=code)
    # Read timeout, reset connection: the request may have been accepted.
    return AmbiguousProviderError(f"ses call interrupted: {type(exc).__name__}: {exc}")


# What the domain knows of this provider (sendonce.domain.capabilities); the class below
# states the same, from here.
CAPABILITIES = ProviderCapabilities(
    idempotent=False,  # no idempotency key: a send whose outcome is unknown is never repeated
    max_batch=1,
    default_rate=14.0,  # recipients/s: a new production account's MaxSendRate
    rate_headers=False,  # the account's MaxSendRate is read once, from GetAccount
    ambiguous_outcomes=("a 5xx answer", "a read timeout or reset connection"),
)


class SesProvider:
    name = "ses"
    idempotent = CAPABILITIES.idempotent

    def __init__(
        self, *, client: Any, configuration_set: str | None = None, tracked_configuration_set: str | None = None
    ):
        self._client = client
        self._configuration_set = configuration_set
        # SES inserts the open pixel and rewrites links for a configuration set that publishes
        # opens and clicks: only a campaign that tracks them names it.
        self._tracked_configuration_set = tracked_configuration_set

    def max_send_rate(self) -> float | None:
        """The account's MaxSendRate (recipients/s) from GetAccount, or None if unavailable."""
        try:
            quota = self._client.get_account().get("SendQuota", {})
        except Exception:  # noqa: BLE001 - not fatal: the configured rate applies
            return None
        rate = quota.get("MaxSendRate")
        return float(rate) if rate else None

    def send(self, email: OutboundEmail) -> Receipt:
        body: dict[str, Any] = {}
        if email.html is not None:
            body["Html"] = {"Data": email.html, "Charset": "UTF-8"}
        if email.text is not None:
            body["Text"] = {"Data": email.text, "Charset": "UTF-8"}
        simple: dict[str, Any] = {"Subject": {"Data": email.subject, "Charset": "UTF-8"}, "Body": body}
        if email.headers:
            simple["Headers"] = [{"Name": k, "Value": v} for k, v in email.headers.items()]
        params: dict[str, Any] = {
            "FromEmailAddress": email.sender,
            "Destination": {"ToAddresses": [email.to]},
            "Content": {"Simple": simple},
            "EmailTags": [{"Name": k, "Value": v} for k, v in email.tags.items()],
        }
        if email.reply_to:
            params["ReplyToAddresses"] = [email.reply_to]
        configuration_set = self._configuration_set
        if email.tracked and self._tracked_configuration_set:
            configuration_set = self._tracked_configuration_set
        if configuration_set:
            params["ConfigurationSetName"] = configuration_set
        try:
            response = self._client.send_email(**params)
        except Exception as exc:  # every failure is classified; none escapes unexplained
            raise classify_ses_error(exc) from exc
        return Receipt(provider_message_id=response["MessageId"])
