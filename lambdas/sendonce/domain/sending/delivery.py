"""The consumer's domain: deliver one batch so that each recipient gets the email once.

Per recipient: claim in the ledger (through the DeliveryGuard), render, call the provider,
record the outcome. Per batch: read the campaign's state first (pause and cancel are state
read by the pipeline), keep a time budget, and say whether the SQS message may be
acknowledged or must come back.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import ValidationError

from sendonce.domain.errors import (
    AmbiguousProviderError,
    ProviderError,
    CampaignNotFoundError,
    HaltProviderError,
    IllegalTransitionError,
    InvalidMessageError,
    PermanentProviderError,
    RetryableProviderError,
    SuppressedError,
)
from sendonce.domain.ports import Suppressions
from sendonce.domain.models import (
    FINAL_STATES,
    BatchMessage,
    Campaign,
    CampaignState,
    DeliveryKey,
    DeliveryRecord,
    DeliveryRequest,
    DeliveryState,
    OutboundEmail,
    Receipt,
    Recipient,
    SendGroup,
    email_fingerprint,
    is_valid_email,
)
from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import AUTOMATIC_HALT, CampaignEvent
from sendonce.domain.campaigns.service import complete_if_done
from sendonce.domain.sending.protocol import Event, Verdict, cancel_event, classify
from sendonce.domain.ports import CampaignStore, DeliveryGuard, EmailProvider, GroupGuard, Ledger, Queue, RateLimiter
from sendonce.domain.sending.rendering import CompiledContent, RenderError
from sendonce.domain.deliverability.unsubscribe import UnsubscribeLinks

logger = logging.getLogger(__name__)

T = TypeVar("T")



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
            f"{'.'.join(str(p) for p in err['loc']) or '(body)'}: {err['msg']}" for err in exc.errors(include_url=False)[:5]
        )
        raise InvalidMessageError(f"invalid batch message: {problems}") from exc


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
    errors_by_class: Counter = field(default_factory=Counter)
    last_error: str | None = None

    @property
    def must_return(self) -> bool:
        """The SQS message must come back (reported as a batch item failure)."""
        return self.returning > 0


class BatchIncompleteError(Exception):
    """Raised by the record handler so that BatchProcessor reports the message as failed."""

    def __init__(self, report: BatchReport):
        super().__init__(
            f"{report.returning} recipient(s) of batch {report.batch_id} must be retried"
            + (f" (last error: {report.last_error})" if report.last_error else "")
        )
        self.report = report


@dataclass
class _BatchRun:
    batch: BatchMessage
    campaign: Campaign
    provider: EmailProvider
    content: CompiledContent
    remaining_ms: Callable[[], int]
    report: BatchReport
    halt: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    returning_ids: list[str] = field(default_factory=list)

    def count(self, attr: str, recipient_id: str | None = None, error: str | None = None, error_class: str | None = None):
        with self.lock:
            setattr(self.report, attr, getattr(self.report, attr) + 1)
            if attr == "returning" and recipient_id:
                self.returning_ids.append(recipient_id)
            if error:
                self.report.last_error = error
            if error_class:
                self.report.errors_by_class[error_class] += 1


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
        send_concurrency: int = 8,
        safety_margin_ms: int = 15_000,
        throttle_retries: int = 3,
        max_receive_count: int = 5,
        instance_id: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ):
        self._ledger = ledger
        self._guard = guard
        self._campaigns = campaigns
        self._providers = providers
        self._queue = queue
        self._group_guard = group_guard
        self._limiter = limiter
        self._suppressions = suppressions
        self._unsubscribe = unsubscribe
        self._send_concurrency = send_concurrency
        self._safety_margin_ms = safety_margin_ms
        self._throttle_retries = throttle_retries
        self._max_receive_count = max_receive_count
        self._instance_id = instance_id or uuid.uuid4().hex[:8]
        self._sleep = sleep
        self._clock_ms = clock_ms

    def process(self, body: str, *, receive_count: int, remaining_ms: Callable[[], int]) -> BatchReport:
        try:
            batch = parse_batch(body)
        except InvalidMessageError as exc:
            return self._poison(body, str(exc))
        report = BatchReport(campaign_id=batch.campaign_id, batch_id=batch.batch_id)
        try:
            campaign = self._campaigns.get(batch.campaign_id)
        except CampaignNotFoundError:
            return self._poison(body, f"campaign {batch.campaign_id!r} does not exist", report)
        if campaign.state is CampaignState.CANCELLED:
            self._close_cancelled(batch, report)
            report.skipped_state = campaign.state
            return report
        if not campaign.accepts_sends:
            # Paused (or not started): send nothing and acknowledge. The recipients stay
            # pending in the ledger; resume republishes exactly those.
            report.skipped_state = campaign.state
            logger.info("campaign not sending; batch acknowledged unsent", extra={"campaign_state": campaign.state.value})
            return report
        provider = self._providers.get(campaign.provider)
        if provider is None:
            return self._poison(body, f"campaign {campaign.campaign_id!r} names unknown provider {campaign.provider!r}", report)
        try:
            content = CompiledContent(campaign.content)
        except RenderError as exc:
            return self._poison(body, f"campaign {campaign.campaign_id!r}: {exc}", report)

        run = _BatchRun(batch=batch, campaign=campaign, provider=provider, content=content, remaining_ms=remaining_ms, report=report)
        last_receive = receive_count >= self._max_receive_count
        if last_receive:
            self._dead_letter_first(batch)
        if campaign.delivery_mode == "batch" and self._group_guard is not None and hasattr(provider, "send_batch"):
            singles = self._deliver_groups(run)
        else:
            singles = batch.recipients
        workers = min(self._send_concurrency, len(singles))
        if workers == 1:
            for recipient in singles:
                self._deliver(run, recipient)
        elif workers > 1:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="send") as pool:
                list(pool.map(lambda r: self._deliver(run, r), singles))

        if run.halt.is_set():
            self._pause_for_halt(run)
        if report.must_return and last_receive:
            # Those released to pending during this attempt are dead-lettered too, with the last error.
            self._ledger.close_unclaimed(
                batch.campaign_id, run.returning_ids, state=DeliveryState.DEAD_LETTERED,
                reason=report.last_error or "message moved to the dead-letter queue", batch_id=batch.batch_id,
            )
            records = self._ledger.get_many(batch.campaign_id, run.returning_ids)
            report.dead_lettered = sum(1 for r in records.values() if r.state is DeliveryState.DEAD_LETTERED)
        if not report.must_return and not run.halt.is_set() and campaign.state is CampaignState.SENDING:
            self._settle_batch(batch.campaign_id)
        return report

    def _dead_letter_first(self, batch: BatchMessage) -> None:
        """SQS moves the message to the DLQ if this attempt does not end it, whether the
        attempt returns, crashes or times out: say so in the ledger first, so that no
        recipient is left pending behind a message in the DLQ. Dead-lettered deliveries are
        claimable, so this attempt sends them as usual."""
        self._ledger.close_unclaimed(
            batch.campaign_id, [r.recipient_id for r in batch.recipients], state=DeliveryState.DEAD_LETTERED,
            reason="last receive: the message goes to the dead-letter queue unless this attempt ends it",
            batch_id=batch.batch_id,
        )

    def _settle_batch(self, campaign_id: str) -> None:
        """Every recipient of this message ended: one batch fewer open. At zero (or below,
        after a message was settled twice) the ledger decides whether the campaign is complete."""
        try:
            if self._campaigns.batch_settled(campaign_id) <= 0:
                completed = complete_if_done(self._campaigns, self._ledger, campaign_id, now_ms=self._clock_ms())
                if completed is not None:
                    logger.info("campaign completed", extra={"campaign_id": campaign_id, "reason": completed.state_reason})
        except Exception:  # noqa: BLE001 - the batch itself is done; a later batch or resume completes it
            logger.exception("could not check whether the campaign completed")

    def _close_cancelled(self, batch: BatchMessage, report: BatchReport) -> None:
        """The campaign was cancelled: close each delivery of the batch as the protocol says —
        cancelled, or unknown where an attempt may have been accepted. A delivery a live
        consumer holds is left to it; the message comes back when its lease has run out."""
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
            reason = "campaign cancelled" if event is Event.CLOSE_CANCELLED else (
                "campaign cancelled after an attempt that may have been accepted by the provider")
            closed = self._ledger.close_as_read(
                record, event, reason=reason, now_ms=now_ms,
                key=DeliveryKey(campaign_id=batch.campaign_id, recipient_id=recipient_id), batch_id=batch.batch_id,
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

    def _pause_for_halt(self, run: _BatchRun) -> None:
        try:
            lifecycle.apply(
                self._campaigns, run.campaign.campaign_id, CampaignEvent.HALT, by=AUTOMATIC_HALT,
                reason=run.report.halted_reason,
            )
            logger.error("provider halted sending; campaign paused", extra={"reason": run.report.halted_reason})
        except IllegalTransitionError:
            logger.warning("campaign already left 'sending' when the halt arrived")
        # The unsent recipients are pending in the ledger; resume republishes them, so
        # the message is acknowledged rather than retried against a halted provider.
        run.report.returning = 0
        run.returning_ids.clear()

    def _deliver(self, run: _BatchRun, recipient: Recipient) -> None:
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
        )
        try:
            result = self._guard.send_once(request, lambda: self._send(run, recipient, request))
        except SuppressedError:
            run.count("suppressed")
            return
        except PermanentProviderError as exc:
            run.count("failed", error=exc.reason, error_class=exc.error_class)
            logger.warning("delivery failed permanently", extra={**extra, "reason": exc.reason})
            return
        except HaltProviderError as exc:
            with run.lock:
                run.report.halted_reason = f"{run.provider.name}: {exc.reason}"
                run.report.errors_by_class[exc.error_class] += 1
            run.halt.set()
            return
        except AmbiguousProviderError as exc:
            if run.provider.idempotent and exc.repeatable:
                run.count("returning", recipient.recipient_id, error=exc.reason, error_class=exc.error_class)
            else:
                run.count("unknown", error=exc.reason, error_class=exc.error_class)
                logger.error("provider outcome unknown; never re-sent automatically", extra={**extra, "reason": exc.reason})
            return
        except RetryableProviderError as exc:
            run.count("returning", recipient.recipient_id, error=exc.reason, error_class=exc.error_class)
            return
        except Exception as exc:  # noqa: BLE001 - one recipient's failure must not end the batch
            # E.g. the ledger write after a send failed: the claim stays held until its lease
            # ends, then the claim rules decide (repeat under the key, or unknown).
            run.count("returning", recipient.recipient_id, error=f"{type(exc).__name__}: {exc}"[:300])
            logger.exception("delivery interrupted", extra=extra)
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
            run.count("returning", recipient.recipient_id, error=f"delivery {result.kind.replace('_', ' ')} (another consumer holds it)")
            if result.lease_until_ms:
                with run.lock:
                    run.report.return_at_ms = max(run.report.return_at_ms or 0, result.lease_until_ms)
        elif result.kind == "conflict":
            run.count("conflicts", error="recipient was claimed before with different content")
            logger.error("payload conflict: not sent", extra=extra)
        else:  # pragma: no cover - GuardResult kinds are closed
            raise AssertionError(result.kind)

    def _send(self, run: _BatchRun, recipient: Recipient, request: DeliveryRequest) -> Receipt:
        """Runs under the ledger's claim. Every exception here settles the claim."""
        if not is_valid_email(recipient.email):
            raise PermanentProviderError("invalid email address")
        suppression = self._suppression(recipient)
        if suppression:
            raise SuppressedError(suppression)
        try:
            email = self._email(run, recipient, request.key.idempotency_key)
        except RenderError as exc:
            raise PermanentProviderError(str(exc)) from exc
        if not run.provider.idempotent:
            # Past this write a lost consumer may have sent: its delivery becomes unknown
            # instead of being claimed again.
            self._ledger.mark_in_flight(request.key, owner=request.owner, now_ms=self._clock_ms())
        return self._send_with_backoff(run, email)

    def _suppression(self, recipient: Recipient) -> str | None:
        if self._suppressions is None:
            return None
        found = self._suppressions.is_suppressed(recipient.email)
        return f"address suppressed ({found.reason.value}, {found.source})" if found else None

    def _email(self, run: _BatchRun, recipient: Recipient, idempotency_key: str) -> OutboundEmail:
        """The rendered email. Deterministic for a recipient: batch mode relies on it."""
        rendered = run.content.render(recipient.variables)
        headers = {}
        if self._unsubscribe is not None:
            headers = self._unsubscribe.headers(run.campaign.campaign_id, recipient.recipient_id, recipient.email)
        return OutboundEmail(
            idempotency_key=idempotency_key,
            sender=run.campaign.sender,
            to=recipient.email,
            reply_to=run.campaign.reply_to,
            subject=rendered.subject,
            html=rendered.html,
            text=rendered.text,
            headers=headers,
            tags={"campaign_id": run.campaign.campaign_id, "recipient_id": recipient.recipient_id},
        )

    def _send_with_backoff(self, run: _BatchRun, email: OutboundEmail) -> Receipt:
        return self._call_with_backoff(run, lambda: run.provider.send(email))

    def _call_with_backoff(self, run: _BatchRun, call: Callable[[], T]) -> T:
        attempt = 0
        refused_all = True  # every answer so far said "not accepted"
        while True:
            if self._limiter is not None:
                deadline = time.time() + (run.remaining_ms() - self._safety_margin_ms) / 1000
                if not self._limiter.acquire(run.provider.name, deadline=deadline):
                    raise RetryableProviderError("no slot in the shared send rate before the time budget ends")
            try:
                return call()
            except RetryableProviderError as exc:
                refused_all = refused_all and exc.proves_not_accepted
                exc.proves_not_accepted = refused_all
                if exc.throttled and self._limiter is not None:
                    self._limiter.throttled(run.provider.name)
                # Throttled or busy means not accepted, so trying again cannot duplicate.
                delay = min(8.0, exc.retry_after if exc.retry_after else 0.2 * 2**attempt) * random.uniform(0.8, 1.2)
                out_of_time = run.remaining_ms() - delay * 1000 < self._safety_margin_ms
                if attempt >= self._throttle_retries or out_of_time or run.halt.is_set():
                    raise
                attempt += 1
                self._sleep(delay)

    # --- batch mode: one provider request per send group -------------------------------

    def _deliver_groups(self, run: _BatchRun) -> list[Recipient]:
        """Send the batch as groups; returns the recipients left to the one-by-one path
        (addresses or templates that fail before any request is made, suppressed
        addresses, and deliveries whose earlier attempt went out under their own key)."""
        batch = run.batch
        hashes = {r.recipient_id: self._guard.payload_hash(r.email, r.variables) for r in batch.recipients}
        groups = self._campaigns.groups_of_batch(batch.campaign_id, batch.batch_id)
        records = self._ledger.get_many(batch.campaign_id, [r.recipient_id for r in batch.recipients])
        # A recorded group whose request may have gone out is replayed exactly (same members,
        # same key), so the provider answers from its key store. One that never went out —
        # recorded, then the time ran out; or refused outright — binds nobody: its members
        # are decided afresh (suppressed since, now in another group, ...).
        # A group whose first request is older than the key window cannot be replayed: its
        # members go one by one, and the claim rules close them as unknown.
        replayed: set[str] = set()
        now_ms = self._clock_ms()
        for group in groups:
            if self._replayable(group, records, hashes, now_ms):
                self._run_group(run, group, hashes)
                replayed.update(r.recipient_id for r in group.recipients)
        singles, candidates = [], []
        for recipient in batch.recipients:
            if recipient.recipient_id in replayed:
                continue
            if not is_valid_email(recipient.email) or not self._renders(run, recipient) or self._suppression(recipient):
                singles.append(recipient)  # the one-by-one path records why it is not sent
            else:
                candidates.append(recipient)
        if not candidates or run.halt.is_set():
            return singles
        if replayed:
            records = self._ledger.get_many(batch.campaign_id, [r.recipient_id for r in candidates])
        group_id = f"{batch.batch_id}-g{len(groups) + 1}"
        key = SendGroup(campaign_id=batch.campaign_id, group_id=group_id, recipients=[]).idempotency_key
        members = []
        foreign: set[str] = set()
        for recipient in candidates:
            record = records.get(recipient.recipient_id)
            verdict = classify(record, payload_hash=hashes[recipient.recipient_id], provider_idempotent=True,
                               now_ms=now_ms, group_key=key)
            if verdict is Verdict.CLAIM:
                members.append(recipient)
            elif verdict is Verdict.FINAL:
                run.count("duplicates_prevented")
            elif verdict is Verdict.CONFLICT:
                run.count("conflicts", error="recipient was claimed before with different content")
            elif verdict is Verdict.STALE:
                singles.append(recipient)  # the one-by-one claim closes it as unknown
            elif verdict is Verdict.GROUPED and record is not None and record.group_key:
                foreign.add(record.group_key)
            elif verdict is Verdict.GROUPED:
                singles.append(recipient)  # an attempt went out under its own key: only that key may repeat it
            else:  # held by a live owner
                run.count("returning", recipient.recipient_id, error="delivery held by another consumer")
                if record and record.lease_until_ms:
                    with run.lock:
                        run.report.return_at_ms = max(run.report.return_at_ms or 0, record.lease_until_ms)
        for group_key in sorted(foreign):
            # Another batch's group may have carried these recipients (its message was
            # acknowledged while the campaign was paused, say): only a replay of that
            # request, same members and key, may send them. Replay it here.
            other = self._campaigns.get_group(batch.campaign_id, group_key.rsplit(":group:", 1)[-1])
            if other is None:
                continue
            other_hashes = {r.recipient_id: self._guard.payload_hash(r.email, r.variables) for r in other.recipients}
            self._run_group(run, other, other_hashes)
        if members:
            # A batch holds at most 100 recipients, Resend's batch limit: one group suffices.
            group = self._campaigns.record_group(SendGroup(campaign_id=batch.campaign_id, group_id=group_id, recipients=members))
            self._run_group(run, group, hashes)
        return singles

    @staticmethod
    def _replayable(group: SendGroup, records: Mapping[str, DeliveryRecord], hashes: dict[str, str], now_ms: int) -> bool:
        """Whether a recorded group's request may have gone out (a member carries its key and
        a maybe-sent mark) and can still be repeated (not older than the key window)."""
        marked = [records[r.recipient_id] for r in group.recipients if r.recipient_id in records
                  and records[r.recipient_id].group_key == group.idempotency_key
                  and records[r.recipient_id].maybe_sent_at_ms is not None]
        return bool(marked) and not any(
            classify(record, payload_hash=hashes.get(record.recipient_id, ""), provider_idempotent=True, now_ms=now_ms,
                     group_key=group.idempotency_key) is Verdict.STALE
            for record in marked
        )

    def _renders(self, run: _BatchRun, recipient: Recipient) -> bool:
        try:
            run.content.render(recipient.variables)
            return True
        except RenderError:
            return False

    def _run_group(self, run: _BatchRun, group: SendGroup, hashes: dict[str, str]) -> None:
        size = len(group.recipients)
        if run.halt.is_set():
            return
        member_ids = [r.recipient_id for r in group.recipients]
        if run.remaining_ms() < self._safety_margin_ms:
            with run.lock:
                run.report.returning += size
                run.returning_ids.extend(member_ids)
                run.report.last_error = "time budget exhausted before the group request"
            return
        emails = [self._email(run, recipient, group.idempotency_key) for recipient in group.recipients]
        owner = f"{self._instance_id}-{uuid.uuid4().hex[:12]}"

        def send() -> list[Receipt | str]:
            return self._call_with_backoff(
                run, lambda: run.provider.send_batch(emails, idempotency_key=group.idempotency_key)
            )

        try:
            result = self._group_guard.send_group_once(
                group, owner=owner, provider=run.provider.name,
                payload_hashes={r.recipient_id: hashes.get(r.recipient_id) or self._guard.payload_hash(r.email, r.variables)
                                for r in group.recipients},
                send=send,
            )
        except PermanentProviderError as exc:
            self._count_many(run, "failed", member_ids, exc)
            return
        except HaltProviderError as exc:
            with run.lock:
                run.report.halted_reason = f"{run.provider.name}: {exc.reason}"
                run.report.errors_by_class[exc.error_class] += 1
            run.halt.set()
            return
        except AmbiguousProviderError as exc:
            self._count_many(run, "returning" if exc.repeatable else "unknown", member_ids, exc)
            return
        except RetryableProviderError as exc:
            self._count_many(run, "returning", member_ids, exc)
            return
        except Exception as exc:  # noqa: BLE001 - e.g. the completing transaction failed after the send
            logger.exception("group send interrupted", extra={"group_id": group.group_id})
            with run.lock:
                run.report.returning += size
                run.returning_ids.extend(member_ids)
                run.report.last_error = f"{type(exc).__name__}: {exc}"[:300]
            return
        if result.kind == "sent":
            for outcome in result.outcomes.values():
                run.count("sent" if "id" in outcome else "failed", error=outcome.get("failed"),
                          error_class=None if "id" in outcome else "permanent")
        elif result.kind == "replayed":
            with run.lock:
                run.report.duplicates_prevented += size
        else:
            with run.lock:
                run.report.returning += size
                run.returning_ids.extend(member_ids)
                run.report.last_error = f"send group {result.kind.replace('_', ' ')}"

    @staticmethod
    def _count_many(run: _BatchRun, attr: str, member_ids: list[str], exc: ProviderError) -> None:
        with run.lock:
            setattr(run.report, attr, getattr(run.report, attr) + len(member_ids))
            if attr == "returning":
                run.returning_ids.extend(member_ids)
            run.report.errors_by_class[exc.error_class] += 1
            run.report.last_error = exc.reason
