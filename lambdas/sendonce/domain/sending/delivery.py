"""The consumer's domain: deliver one batch so that each recipient gets the email once.

Per recipient: claim in the ledger (through the DeliveryGuard), render, call the provider,
record the outcome. Per batch: read the campaign's state first (pause and cancel are state
read by the pipeline), keep a time budget, and say whether the SQS message may be
acknowledged or must come back. Batch mode's send groups are `groups.py`; what both paths
do around the provider is `sender.py`; what a failed send means is `batch_run.record_failure`.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from pydantic import ValidationError

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import AUTOMATIC_HALT, CampaignEvent
from sendonce.domain.campaigns.ports import CampaignCounters, CampaignScheduler, CampaignStore, ReportAggregatesStore
from sendonce.domain.campaigns.report_data import group_count, prevented_writer
from sendonce.domain.campaigns.status import complete_if_done
from sendonce.domain.campaigns.variants import assign
from sendonce.domain.campaigns.window_pauses import close_window, outside_window, pause_until
from sendonce.domain.deliverability.feedback_id import FeedbackId
from sendonce.domain.deliverability.group_caps import GroupPacing
from sendonce.domain.deliverability.ports import GroupCaps, Suppressions, WarmupBudget
from sendonce.domain.deliverability.unsubscribe import UnsubscribeLinks
from sendonce.domain.deliverability.warmup import DayCapReachedError, Warmup
from sendonce.domain.errors import (
    CampaignNotFoundError,
    IllegalTransitionError,
    InvalidMessageError,
    PermanentProviderError,
    SuppressedError,
)
from sendonce.domain.models import (
    FINAL_STATES,
    BatchMessage,
    Campaign,
    CampaignState,
    DeliveryKey,
    DeliveryRequest,
    DeliveryState,
    Receipt,
    Recipient,
    email_fingerprint,
    is_valid_email,
)
from sendonce.domain.sending.batch_run import BatchReport, BatchRun, record_failure
from sendonce.domain.sending.delivery_tables import Event, cancel_event
from sendonce.domain.sending.groups import GroupDelivery
from sendonce.domain.sending.ports import (
    DeliveryGuard,
    EmailProvider,
    GroupGuard,
    Ledger,
    Queue,
    RateLimiter,
)
from sendonce.domain.sending.provider_call import Sender
from sendonce.domain.sending.rendering import CompiledContent, RenderError

logger = logging.getLogger(__name__)

# Compiled content kept per campaign in a process (it never changes after creation): read
# from its own item once, not per message. Bounded: a process may serve many campaigns.
CONTENT_CACHE_SIZE = 32


def parse_batch(body: str) -> BatchMessage:
    """Parse an SQS body, or raise InvalidMessageError saying exactly what is wrong."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, TypeError) as exc:
        raise InvalidMessageError(f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidMessageError("body is not a JSON object")
    try:
        return BatchMessage.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(body)'}: {err['msg']}"
            for err in exc.errors(include_url=False)[:5]
        )
        raise InvalidMessageError(f"invalid batch message: {problems}") from exc


class DeliveryService:
    def __init__(
        self,
        *,
        ledger: Ledger,
        guard: DeliveryGuard,
        campaigns: CampaignStore,
        providers: Mapping[str, EmailProvider],
        queue: Queue,
        group_guard: GroupGuard | None = None,
        limiter: RateLimiter | None = None,
        suppressions: Suppressions | None = None,
        unsubscribe: UnsubscribeLinks | None = None,
        feedback_id: FeedbackId | None = None,
        send_concurrency: int = 8,
        safety_margin_ms: int = 15_000,
        throttle_retries: int = 3,
        max_receive_count: int = 5,
        instance_id: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        counters: CampaignCounters | None = None,
        scheduler: CampaignScheduler | None = None,
        window_clock_ms: Callable[[], int] | None = None,
        report_aggregates: ReportAggregatesStore | None = None,
        group_caps: GroupCaps | None = None,
        pacing: GroupPacing | None = None,
        warmup: Warmup | None = None,
        warmup_budget: WarmupBudget | None = None,
    ):
        self._ledger = ledger
        self._scheduler = scheduler  # sets a send window's next opening when the window pauses
        # What time it is for send windows: the clock, unless a local stack moves its own
        # (the one that fires its schedules) to reach an opening without waiting for it.
        self._window_clock_ms = window_clock_ms or clock_ms
        self._counters = counters
        self._report_aggregates = report_aggregates
        self._guard = guard
        self._campaigns = campaigns
        self._providers = providers
        self._queue = queue
        self._send_concurrency = send_concurrency
        self._safety_margin_ms = safety_margin_ms
        self._max_receive_count = max_receive_count
        self._instance_id = instance_id or uuid.uuid4().hex[:8]
        self._clock_ms = clock_ms
        self._contents: dict[str, CompiledContent] = {}
        self._sender = Sender(
            limiter=limiter,
            suppressions=suppressions,
            unsubscribe=unsubscribe,
            feedback_id=feedback_id,
            group_caps=group_caps,
            pacing=pacing,
            warmup=warmup,
            warmup_budget=warmup_budget,
            day_clock_ms=self._window_clock_ms,
            safety_margin_ms=safety_margin_ms,
            throttle_retries=throttle_retries,
            sleep=sleep,
        )
        self._groups = (
            None
            if group_guard is None
            else GroupDelivery(
                ledger=ledger,
                campaigns=campaigns,
                guard=guard,
                group_guard=group_guard,
                sender=self._sender,
                instance_id=self._instance_id,
                clock_ms=clock_ms,
                concurrency=send_concurrency,
            )
        )

    def process(
        self, body: str, *, receive_count: int, remaining_ms: Callable[[], int], dwell_ms: int | None = None
    ) -> BatchReport:
        try:
            batch = parse_batch(body)
        except InvalidMessageError as exc:
            return self._poison(body, str(exc))
        report = BatchReport(campaign_id=batch.campaign_id, batch_id=batch.batch_id)
        try:
            campaign = self._campaigns.get(batch.campaign_id)
        except CampaignNotFoundError:
            return self._poison(body, f"campaign {batch.campaign_id!r} does not exist", report)
        if outside_window(campaign, self._window_clock_ms()):
            campaign = self._hold_for_window(campaign)
        if campaign.state is CampaignState.CANCELLED:
            self._close_cancelled(batch, report, last_receive=receive_count >= self._max_receive_count)
            report.skipped_state = campaign.state
            return report
        if not campaign.accepts_sends:
            # Paused (or not started): send nothing and acknowledge. The recipients stay
            # pending in the ledger; resume republishes exactly those.
            report.skipped_state = campaign.state
            logger.info(
                "campaign not sending; batch acknowledged unsent", extra={"campaign_state": campaign.state.value}
            )
            return report
        provider = self._providers.get(campaign.provider)
        if provider is None:
            return self._poison(
                body, f"campaign {campaign.campaign_id!r} names unknown provider {campaign.provider!r}", report
            )
        try:
            content = self._content(campaign)
        except RenderError as exc:
            return self._poison(body, f"campaign {campaign.campaign_id!r}: {exc}", report)

        batch = self._hold_for_winner(campaign, batch, report)
        if not batch.recipients:
            if campaign.state is CampaignState.SENDING:
                self._settle_batch(campaign.campaign_id, report)
            return report
        last_receive = receive_count >= self._max_receive_count
        run = BatchRun(
            batch=batch,
            campaign=campaign,
            provider=provider,
            content=content,
            remaining_ms=remaining_ms,
            report=report,
            last_receive=last_receive,
            dwell_ms=dwell_ms,
        )
        if last_receive:
            self._dead_letter_first(batch)
        if campaign.delivery_mode == "batch" and self._groups is not None and hasattr(provider, "send_batch"):
            singles = self._groups.deliver(run)
        else:
            singles = batch.recipients
        workers = min(self._send_concurrency, len(singles))
        if workers == 1:
            for recipient in singles:
                self._deliver(run, recipient)
        elif workers > 1:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="send") as pool:
                list(pool.map(lambda r: self._deliver(run, r), singles))

        if report.duplicates_prevented or report.held_by_cap:
            self._record_counts(batch, report)
        if run.halt.is_set():
            self._pause_for_halt(run)
        if report.must_return and last_receive:
            # Those released to pending during this attempt are dead-lettered too, with the last error.
            self._ledger.close_unclaimed(
                batch.campaign_id,
                run.returning_ids,
                state=DeliveryState.DEAD_LETTERED,
                reason=report.last_error or "message moved to the dead-letter queue",
                batch_id=batch.batch_id,
            )
            records = self._ledger.get_many(batch.campaign_id, run.returning_ids)
            report.dead_lettered = sum(1 for r in records.values() if r.state is DeliveryState.DEAD_LETTERED)
        if not report.must_return and not run.halt.is_set() and campaign.state is CampaignState.SENDING:
            self._settle_batch(batch.campaign_id, report)
        return report

    @staticmethod
    def _hold_for_winner(campaign: Campaign, batch: BatchMessage, report: BatchReport) -> BatchMessage:
        """An A/B campaign without a winner sends only its test's recipients: the rest are left
        unclaimed, pending in the ledger, until the pick republishes them (campaigns/variants.py).
        Which recipient is which comes from its id alone, never from what was sent before."""
        test = campaign.ab_test
        if test is None or campaign.decision is not None:
            return batch
        rest = [r for r in batch.recipients if assign(campaign.campaign_id, r.recipient_id, test) is None]
        if not rest:
            return batch
        report.awaiting_winner = len(rest)
        held = {r.recipient_id for r in rest}
        return batch.model_copy(update={"recipients": [r for r in batch.recipients if r.recipient_id not in held]})

    def _record_counts(self, batch: BatchMessage, report: BatchReport) -> None:
        """One write for the campaign's report of what only the consumer sees: the message's
        refused claims, and its emails that a mailbox group's cap held to a later second (a
        fresh message sent without waiting has neither and writes nothing). Not a reason to
        send again or to return the message: a failure is logged (the DuplicateSendsPrevented
        metric still counts them)."""
        if self._report_aggregates is None:
            return
        counts = {group_count(group, "held"): n for group, n in report.held_by_cap.items() if n}
        if report.duplicates_prevented:
            counts["prevented"] = report.duplicates_prevented
        try:
            self._report_aggregates.add_counts(
                batch.campaign_id, at_ms=self._clock_ms(), counts=counts, writer=prevented_writer(batch.batch_id)
            )
        except Exception as exc:  # noqa: BLE001 - the report's count only; nothing is resent
            logger.warning(
                "consumer counts not added to the campaign report",
                extra={
                    "campaign_id": batch.campaign_id,
                    "counts": counts,
                    "error": f"{type(exc).__name__}: {exc}"[:300],
                },
            )

    def _content(self, campaign: Campaign) -> CompiledContent:
        compiled = self._contents.get(campaign.campaign_id)
        if compiled is None:
            compiled = CompiledContent(campaign.content or self._campaigns.content(campaign.campaign_id))
            if len(self._contents) >= CONTENT_CACHE_SIZE:
                self._contents.pop(next(iter(self._contents)))
            self._contents[campaign.campaign_id] = compiled
        return compiled

    def _dead_letter_first(self, batch: BatchMessage) -> None:
        """SQS moves the message to the DLQ if this attempt does not end it, whether the
        attempt returns, crashes or times out: say so in the ledger first, so that no
        recipient is left pending behind a message in the DLQ. Dead-lettered deliveries are
        claimable, so this attempt sends them as usual."""
        self._ledger.close_unclaimed(
            batch.campaign_id,
            [r.recipient_id for r in batch.recipients],
            state=DeliveryState.DEAD_LETTERED,
            reason="last receive: the message goes to the dead-letter queue unless this attempt ends it",
            batch_id=batch.batch_id,
        )

    def _settle_batch(self, campaign_id: str, report: BatchReport) -> None:
        """Every recipient of this message ended: one batch fewer open. At zero (or below,
        after a message was settled twice) the ledger decides whether the campaign is complete.
        A failure here is never swallowed: the message comes back and settles again (a second
        decrement only brings the check earlier; the ledger decides)."""
        try:
            if self._campaigns.batch_settled(campaign_id) <= 0:
                completed = complete_if_done(
                    self._campaigns, self._ledger, campaign_id, now_ms=self._clock_ms(), counters=self._counters
                )
                if completed is not None:
                    logger.info(
                        "campaign completed", extra={"campaign_id": campaign_id, "reason": completed.state_reason}
                    )
        except Exception as exc:  # noqa: BLE001 - reported: the message comes back to settle again
            report.unsettled = f"{type(exc).__name__}: {exc}"[:500]
            logger.error(
                "batch ended but could not be settled; the message comes back",
                extra={"campaign_id": campaign_id, "error": report.unsettled},
            )

    def _close_cancelled(self, batch: BatchMessage, report: BatchReport, *, last_receive: bool) -> None:
        """The campaign was cancelled: close each delivery of the batch as the protocol says —
        cancelled, or unknown where an attempt may have been accepted. A delivery a live
        consumer holds is left to it; the message comes back when its lease has run out."""
        if last_receive:
            # As for a send: if this attempt dies before it has closed them all, SQS moves
            # the message to the DLQ and the ledger already says so (found by the explorer).
            self._dead_letter_first(batch)
        ids = [r.recipient_id for r in batch.recipients]
        records = self._ledger.get_many(batch.campaign_id, ids)
        now_ms = self._clock_ms()
        for recipient_id in ids:
            record = records.get(recipient_id)
            event = cancel_event(record, now_ms=now_ms)
            if event is None:
                if record is not None and record.state not in FINAL_STATES:
                    report.returning += 1
                    report.last_error = "delivery held by a live consumer; closed when it ends"
                    report.return_at_ms = max(report.return_at_ms or 0, record.lease_until_ms or 0)
                continue
            reason = (
                "campaign cancelled"
                if event is Event.CLOSE_CANCELLED
                else ("campaign cancelled after an attempt that may have been accepted by the provider")
            )
            closed = self._ledger.close_as_read(
                record,
                event,
                reason=reason,
                now_ms=now_ms,
                key=DeliveryKey(campaign_id=batch.campaign_id, recipient_id=recipient_id),
                batch_id=batch.batch_id,
            )
            if closed is None:
                report.returning += 1  # changed while we looked: decide again when the message returns
                report.last_error = "delivery changed while the cancelled campaign was being closed"
            elif closed.state is DeliveryState.CANCELLED:
                report.cancelled += 1
            else:
                report.unknown += 1

    def _poison(self, body: str, reason: str, report: BatchReport | None = None) -> BatchReport:
        report = report or BatchReport()
        report.poison_reason = reason
        # Kept in the DLQ with its reason instead of being retried maxReceiveCount times
        # to no purpose. If this send fails, the exception makes the message come back.
        self._queue.dead_letter(body, reason=reason)
        logger.error("poison message moved to the dead-letter queue", extra={"reason": reason})
        return report

    def _pause_for_day_cap(self, campaign: Campaign, reached: DayCapReachedError) -> None:
        """Today's warm-up cap of its sending domain is reached: the campaign pauses until the
        next day's opening, which resumes it with its remaining recipients (the send window's
        pause and opening: campaigns/window_pauses.py); the unsent stay pending."""
        pause_until(self._campaigns, self._scheduler, campaign, opens_at_ms=reached.opens_at_ms, reason=reached.reason)

    def _hold_for_window(self, campaign: Campaign) -> Campaign:
        """Its send window is closed: pause it (the next opening resumes it) and send nothing
        of this message. Returns the campaign as it is now; one that is sending again (resumed
        meanwhile, which republishes its recipients) is held as paused for this message."""
        close_window(self._campaigns, self._scheduler, campaign, now_ms=self._window_clock_ms())
        campaign = self._campaigns.get(campaign.campaign_id)
        if campaign.state is CampaignState.SENDING:
            campaign = campaign.model_copy(update={"state": CampaignState.PAUSED})
        return campaign

    def _pause_for_halt(self, run: BatchRun) -> None:
        if run.day_cap is not None:
            self._pause_for_day_cap(run.campaign, run.day_cap)
            return
        try:
            lifecycle.apply(
                self._campaigns,
                run.campaign.campaign_id,
                CampaignEvent.HALT,
                by=AUTOMATIC_HALT,
                reason=run.report.halted_reason,
            )
            logger.error("provider halted sending; campaign paused", extra={"reason": run.report.halted_reason})
        except IllegalTransitionError:
            logger.warning("campaign already left 'sending' when the halt arrived")
        # The unsent recipients are pending in the ledger; resume republishes them, so
        # the message is acknowledged rather than retried against a halted provider.
        run.report.returning = 0
        run.returning_ids.clear()

    def _deliver(self, run: BatchRun, recipient: Recipient) -> None:
        extra = {
            "campaign_id": run.batch.campaign_id,
            "batch_id": run.batch.batch_id,
            "recipient_id": recipient.recipient_id,
            "email_fp": email_fingerprint(recipient.email),
        }
        if run.halt.is_set():
            return  # left unclaimed: pending for resume
        if run.remaining_ms() < self._safety_margin_ms:
            run.count("returning", recipient.recipient_id, error="time budget exhausted before claiming")
            return
        request = DeliveryRequest(
            campaign_id=run.batch.campaign_id,
            recipient_id=recipient.recipient_id,
            batch_id=run.batch.batch_id,
            email=recipient.email,
            variables=recipient.variables,
            provider=run.provider.name,
            provider_idempotent=run.provider.idempotent,
            owner=f"{self._instance_id}-{uuid.uuid4().hex[:12]}",
            last_receive=run.last_receive,
            variant=run.variant_of(recipient.recipient_id),
        )
        try:
            result = self._guard.send_once(request, lambda: self._send(run, recipient, request))
        except SuppressedError:
            run.count("suppressed")
            return
        except Exception as exc:  # noqa: BLE001 - one recipient's failure must not end the batch
            record_failure(run, [recipient.recipient_id], exc, log_extra=extra)
            return

        if result.kind == "sent":
            run.count("sent")
        elif result.kind == "replayed":
            if result.closed_as_unknown:
                run.count("unknown", error=result.reason, error_class="stale")
            else:
                run.count("duplicates_prevented")
                logger.info("duplicate send prevented", extra={**extra, "ledger_state": result.state})
        elif result.kind in ("held", "lease_lost"):
            run.count(
                "returning",
                recipient.recipient_id,
                error=f"delivery {result.kind.replace('_', ' ')} (another consumer holds it)",
            )
            run.hold_until(result.lease_until_ms)
        elif result.kind == "conflict":
            run.count("conflicts", error="recipient was claimed before with different content")
            logger.error("payload conflict: not sent", extra=extra)
        else:  # pragma: no cover - GuardResult kinds are closed
            raise AssertionError(result.kind)

    def _send(self, run: BatchRun, recipient: Recipient, request: DeliveryRequest) -> Receipt:
        """Runs under the ledger's claim. Every exception here settles the claim."""
        if not is_valid_email(recipient.email):
            raise PermanentProviderError("invalid email address")
        suppression = self._sender.suppression(run, recipient)
        if suppression:
            raise SuppressedError(suppression)
        try:
            email = self._sender.email(run, recipient, request.key.idempotency_key)
        except RenderError as exc:
            raise PermanentProviderError(str(exc)) from exc
        # Today's warm-up place before the in-flight mark: a refusal then proves nothing was sent.
        self._sender.warm_up(run, 1)
        if not run.provider.idempotent:
            # Past this write a lost consumer may have sent: its delivery becomes unknown
            # instead of being claimed again.
            self._ledger.mark_in_flight(request.key, owner=request.owner, now_ms=self._clock_ms())
        return self._sender.call(
            run, lambda: run.provider.send(email), self._sender.places(run, [recipient.email]), emails=0
        )
