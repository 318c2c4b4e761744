"""Domain errors. Adapters translate SDK errors into these; nothing else crosses the ports."""

from __future__ import annotations


class SendonceError(Exception):
    """Base of every error sendonce raises on purpose."""


class SettingsError(SendonceError):
    """A setting is missing or invalid; raised at cold start."""


class InvalidMessageError(SendonceError):
    """An SQS body that can never be processed (poison): kept in the DLQ with this reason."""


class InvalidCampaignError(SendonceError):
    """A campaign spec or recipient that cannot be accepted; the message names the field."""


class ConflictingRequestError(InvalidCampaignError):
    """A well-formed request that what stands now refuses: the clock (a send_at already past, or
    too far ahead), the campaign's templates (variables they lack), the suppression list, a
    provider this deployment does not configure, an object the bucket does not hold. The same
    request may succeed later (the API's 409)."""


class UnknownProviderError(InvalidCampaignError):
    """A campaign names a provider that is not registered."""


class CampaignNotFoundError(SendonceError):
    pass


class JobNotFoundError(SendonceError):
    pass


class IllegalTransitionError(SendonceError):
    """A campaign state change that the state machine does not allow."""


class CampaignBusyError(SendonceError):
    """A write to the campaign item kept meeting a transaction on the same item (publishing
    records batches in transactions) after bounded retries; nothing was written, try again."""


class CampaignScheduleError(SendonceError):
    """The campaign is scheduled, but its one-time schedule could not be set; the message says
    how to set it again (reschedule)."""


class SuppressionsUnavailableError(SendonceError):
    """The suppression list could not be read in full: nobody of the message may be sent."""


class LeaseLostError(SendonceError):
    """A ledger write fenced by owner failed: another consumer owns the delivery now."""


class PayloadConflictError(SendonceError):
    """The same delivery was claimed before with different content (recipient email or variables)."""


class ProviderError(SendonceError):
    """A provider call failed. Subclasses say what the failure means for the delivery."""

    error_class = "provider"

    def __init__(self, reason: str, *, code: str | None = None, retry_after: float | None = None):
        from sendonce.domain.models import redact_emails  # models imports nothing from here

        reason = redact_emails(reason)
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.retry_after = retry_after


class RetryableProviderError(ProviderError):
    """Not sent: throttled, busy, or a concurrent request with the same key. Safe to try again.

    `throttled` marks a provider "too fast" answer, which slows the shared send rate.
    """

    error_class = "retryable"

    def __init__(
        self,
        reason: str,
        *,
        code: str | None = None,
        retry_after: float | None = None,
        throttled: bool = False,
        proves_not_accepted: bool = True,
    ):
        super().__init__(reason, code=code, retry_after=retry_after)
        self.throttled = throttled
        # False when the answer says another request with the same key is under way
        # (Resend's 409 concurrent_idempotent_requests): that one may yet be accepted.
        self.proves_not_accepted = proves_not_accepted


class PermanentProviderError(ProviderError):
    """Not sent and never will be: invalid or rejected address, validation error."""

    error_class = "permanent"


class HaltProviderError(ProviderError):
    """Not sent, and nothing else will be: quota exhausted, key suspended, sending paused."""

    error_class = "halt"


class AmbiguousProviderError(ProviderError):
    """The provider may or may not have accepted the email: timeout, reset connection, 5xx.

    `repeatable` says whether repeating the call under the same idempotency key is safe;
    it is not when the provider reports the key was used for different content.
    """

    error_class = "ambiguous"

    def __init__(self, reason: str, *, code: str | None = None, repeatable: bool = True):
        super().__init__(reason, code=code)
        self.repeatable = repeatable


class SuppressedError(SendonceError):
    """The recipient's address is on the suppression list: the delivery ends as suppressed, unsent."""

    error_class = "suppressed"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class InvalidTokenError(SendonceError):
    """An unsubscribe token that is malformed, altered or signed with an unknown key."""


class WebhookSignatureError(SendonceError):
    """A provider webhook whose signature is missing, wrong or outside the time tolerance."""
