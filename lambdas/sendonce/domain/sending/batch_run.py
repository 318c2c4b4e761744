"""One batch being delivered: its report, the state its recipients' sends share, and the one
place that says what a failed send means for the batch (`record_failure`), whether it was
one recipient's request or a send group's."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sendonce.domain.campaigns.variants import variant_for
from sendonce.domain.deliverability.ports import Suppression
from sendonce.domain.deliverability.warmup import DayCapReachedError
from sendonce.domain.errors import (
    AmbiguousProviderError,
    HaltProviderError,
    PermanentProviderError,
    RetryableProviderError,
)
from sendonce.domain.models import BatchMessage, Campaign, CampaignState
from sendonce.domain.sending.ports import EmailProvider
from sendonce.domain.sending.rendering import CompiledContent

logger = logging.getLogger(__name__)


@dataclass
class BatchReport:
    """What happened to one batch; the handler turns it into metrics and the ack decision."""

    campaign_id: str | None = None
    batch_id: str | None = None
    sent: int = 0
    duplicates_prevented: int = 0
    failed: int = 0
    unknown: int = 0
    conflicts: int = 0
    # Recipients that must come back: retryable errors, held elsewhere, out of time.
    returning: int = 0
    dead_lettered: int = 0
    cancelled: int = 0
    suppressed: int = 0
    poison_reason: str | None = None
    skipped_state: CampaignState | None = None
    halted_reason: str | None = None
    # When the message should come back: the latest lease held by another consumer.
    return_at_ms: int | None = None
    errors_by_class: Counter[str] = field(default_factory=Counter)
    last_error: str | None = None
    # Every recipient ended but the batch's end could not be recorded on the campaign (or the
    # completion check failed): the message comes back to record it, never forgotten.
    unsettled: str | None = None
    # Emails whose request a mailbox group's cap held to a later second, by group (the
    # report's "held" per group and minute).
    held_by_cap: Counter[str] = field(default_factory=Counter)
    # An A/B campaign's recipients of the rest, left pending until its winner is recorded.
    awaiting_winner: int = 0

    @property
    def must_return(self) -> bool:
        """The SQS message must come back (reported as a batch item failure)."""
        return self.returning > 0 or self.unsettled is not None


class BatchIncompleteError(Exception):
    """Raised by the record handler so that BatchProcessor reports the message as failed."""

    def __init__(self, report: BatchReport):
        if report.returning or report.unsettled is None:
            message = f"{report.returning} recipient(s) of batch {report.batch_id} must be retried" + (
                f" (last error: {report.last_error})" if report.last_error else ""
            )
        else:
            message = f"batch {report.batch_id} ended but could not be settled: {report.unsettled}"
        super().__init__(message)
        self.report = report


@dataclass
class BatchRun:
    """Shared by the concurrent sends of one batch; every count goes through the lock."""

    batch: BatchMessage
    campaign: Campaign
    provider: EmailProvider
    content: CompiledContent
    remaining_ms: Callable[[], int]
    report: BatchReport
    # The message's last receive: what is released now is dead-lettered (protocol.py).
    last_receive: bool = False
    # How long the message waited in the queue before this receive (the limiter keeps it
    # for the operator's view of the sharing), when the queue said.
    dwell_ms: int | None = None
    halt: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    returning_ids: list[str] = field(default_factory=list)
    # The suppressed addresses among the batch's, by fingerprint: read once, by the first
    # send that needs them (a redelivered message of ended deliveries reads nothing).
    suppressed: dict[str, Suppression] | None = None
    suppressed_lock: threading.Lock = field(default_factory=threading.Lock)
    # The sending domain's warm-up cap for today was reached (deliverability/warmup.py).
    day_cap: DayCapReachedError | None = None

    def variant_of(self, recipient_id: str) -> str | None:
        """An A/B campaign's variant for the recipient (variants.HELD: one of the rest, and no
        winner in the campaign as read for this batch); None for any other campaign."""
        test = self.campaign.ab_test
        if test is None:
            return None
        return variant_for(self.campaign.campaign_id, recipient_id, test, self.campaign.decision)

    def count(
        self, attr: str, recipient_id: str | None = None, error: str | None = None, error_class: str | None = None
    ) -> None:
        self.count_many(attr, [recipient_id] if recipient_id else [], error=error, error_class=error_class, size=1)

    def count_many(
        self,
        attr: str,
        recipient_ids: list[str],
        *,
        error: str | None = None,
        error_class: str | None = None,
        size: int | None = None,
    ) -> None:
        """`size` recipients (default: those named) ended as `attr`; a failure of one request
        counts once in errors_by_class, however many recipients it carried."""
        with self.lock:
            setattr(self.report, attr, getattr(self.report, attr) + (len(recipient_ids) if size is None else size))
            if attr == "returning":
                self.returning_ids.extend(recipient_ids)
            if error:
                self.report.last_error = error
            if error_class:
                self.report.errors_by_class[error_class] += 1

    def held_by_cap(self, group: str, emails: int) -> None:
        """A request of `emails` to `group` waited for a later second: its cap was full."""
        with self.lock:
            self.report.held_by_cap[group] += emails

    def hold_until(self, lease_until_ms: int | None) -> None:
        """Another consumer holds a delivery until then: the message comes back no earlier."""
        if lease_until_ms:
            with self.lock:
                self.report.return_at_ms = max(self.report.return_at_ms or 0, lease_until_ms)

    def halt_sending(self, exc: HaltProviderError) -> None:
        with self.lock:
            if isinstance(exc, DayCapReachedError):
                # Not the provider's: the campaign waits for the next day's opening.
                self.day_cap = self.day_cap or exc
                self.report.halted_reason = exc.reason
            else:
                self.report.halted_reason = f"{self.provider.name}: {exc.reason}"
            self.report.errors_by_class[exc.error_class] += 1
        self.halt.set()


def record_failure(run: BatchRun, recipient_ids: list[str], exc: Exception, *, log_extra: Mapping[str, object]) -> None:
    """What a send that raised means for the recipients it carried — one request, one or many
    recipients. The ledger already holds the outcome (the guard settled the claim); this
    counts it and decides whether the message must come back."""
    if isinstance(exc, PermanentProviderError):
        run.count_many("failed", recipient_ids, error=exc.reason, error_class=exc.error_class)
        logger.warning("delivery failed permanently", extra={**log_extra, "reason": exc.reason})
    elif isinstance(exc, HaltProviderError):
        run.halt_sending(exc)
    elif isinstance(exc, AmbiguousProviderError):
        if run.provider.idempotent and exc.repeatable:
            # The provider answers a repeat under the same key from its key store.
            run.count_many("returning", recipient_ids, error=exc.reason, error_class=exc.error_class)
        else:
            run.count_many("unknown", recipient_ids, error=exc.reason, error_class=exc.error_class)
            logger.error(
                "provider outcome unknown; never re-sent automatically", extra={**log_extra, "reason": exc.reason}
            )
    elif isinstance(exc, RetryableProviderError):
        run.count_many("returning", recipient_ids, error=exc.reason, error_class=exc.error_class)
    else:
        # E.g. the ledger write after a send failed: the claim stays held until its lease
        # ends, then the claim rules decide (repeat under the key, or unknown).
        run.count_many("returning", recipient_ids, error=f"{type(exc).__name__}: {exc}"[:300])
        logger.exception("delivery interrupted", extra=dict(log_extra), exc_info=exc)
