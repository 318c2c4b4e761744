"""One run of the demo's campaign through one consumer ("baseline" or "sendonce"), with the
fault schedule (module docstring of `run.py`), every wait bounded (`timing.ProgressWatch`)."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from sendonce.domain.campaigns.ports import StateChange
from sendonce.domain.models import CampaignState, DeliveryState, Recipient
from sendonce_local.demo.campaign import demo_campaign
from sendonce_local.demo.consumer import read_counts, read_timings
from sendonce_local.demo.report import LiveState, RunResult
from sendonce_local.demo.stack import ConsumerProcess
from sendonce_local.demo.system import BASELINE_HANDLER, FAULTS_HANDLER, FAULTS_INIT, DemoSystem
from sendonce_local.demo.timing import ProgressWatch, RunStuckError, WaitBounds, wait_until
from sendonce_ops.sqs_tools import queue_depths

# The fault schedule, in campaign progress (emails accepted by the provider).
KILL_AFTER_ACCEPTED = 30  # baseline: emails of its batch the provider accepts before the kill
PAUSE_AT = 0.1
PAUSE_HOLD_S = (2.0, 8.0)  # at least, at most; in between, until the queue is drained
RECIPIENTS_PER_STALL = 960  # 13 stalled requests for 12,480 recipients
STALLS_END_AT = 0.5  # the last stall is armed by this share of the campaign
STALL_BEYOND_VISIBILITY_S = 3
PROGRESS_EVERY_S = 10.0  # progress lines when the output is not a terminal


def stall_count(recipients: int) -> int:
    return max(1, recipients // RECIPIENTS_PER_STALL)


class CampaignRun:
    """The campaign through one consumer, with the fault schedule."""

    def __init__(
        self,
        system: DemoSystem,
        *,
        consumer: str,
        recipients: list[Recipient],
        seed: int,
        state: LiveState,
        bounds: WaitBounds,
    ) -> None:
        assert system.consumer is not None and system.operator is not None
        self.system = system
        self.kind = consumer
        self.recipients = recipients
        self.state = state
        self.bounds = bounds
        self.deployed = system.consumer
        self.operator = system.operator
        self.campaign_id = f"incident-{seed}-{consumer}"
        # Batch mode: one Resend /emails/batch request per SQS message. SES has no batch send.
        self.delivery_mode = "batch" if consumer == "sendonce" and system.provider == "resend" else "single"
        self.visibility_s = system.visibility_timeout_s()
        self.stall_s = self.visibility_s + STALL_BEYOND_VISIBILITY_S
        self.addresses = {r.email.lower() for r in recipients}
        self.result = RunResult(
            consumer=consumer,
            campaign_id=self.campaign_id,
            delivery_mode=self.delivery_mode,
            recipients=len(recipients),
        )
        self._accepted_before = 0
        self._deliveries_before: dict[str, int] = {}
        self._consumers: list[ConsumerProcess] = []
        self._publisher: threading.Thread | None = None
        self._publish_error: BaseException | None = None
        self._sqs = system.client("sqs")
        self._accepted, self._accepted_at = 0, float("-inf")
        self._depths: dict[str, int] = {}
        self._depths_at = float("-inf")
        self._watch = ProgressWatch(bounds)
        self._started = time.monotonic()
        self._reported_at = 0.0

    def event(self, message: str) -> None:
        line = self.state.event(self.kind, message)
        self.system.say(line)

    # progress ------------------------------------------------------------------------

    def accepted(self) -> int:
        now = time.monotonic()
        if now - self._accepted_at >= 0.05:
            self._accepted = self.system.accepted_total() - self._accepted_before
            self._accepted_at = now
        return self._accepted

    def _progress(self) -> None:
        accepted, seconds = self.accepted(), time.monotonic() - self._started
        depths = self._queue_depths()
        self._watch.observe(accepted=accepted, queued=sum(depths.values()))
        self.state.update(self.kind, accepted=accepted, seconds=seconds)
        if seconds - self._reported_at >= PROGRESS_EVERY_S:
            self._reported_at = seconds
            self.system.say(
                f"{time.monotonic() - self.state.started:6.1f}s  {self.kind:<8}  {accepted:,} emails accepted by the "
                f"provider; queue {depths.get('visible', 0)} visible, {depths.get('in_flight', 0)} in flight"
            )

    def _wait(
        self, predicate: Callable[[], Any], *, what: str, interval_s: float = 0.1, timeout_s: float | None = None
    ) -> Any:
        def check() -> Any:
            self._progress()
            return predicate()

        return wait_until(check, watch=self._watch, what=what, interval_s=interval_s, timeout_s=timeout_s)

    def _queue_depths(self) -> dict[str, int]:
        # At most once a second: moto's SQS counts messages by walking the queue.
        now = time.monotonic()
        if now - self._depths_at >= 1.0:
            self._depths = queue_depths(self._sqs, self.deployed.queue_url)
            self._depths_at = now
        return self._depths

    def _queue_empty(self) -> bool:
        return not any(self._queue_depths().values())

    def _dlq_depth(self) -> int:
        dlq = queue_depths(self._sqs, self.deployed.dead_letter_queue_url)
        return dlq["visible"] + dlq["in_flight"]

    # the schedule ----------------------------------------------------------------------

    def run(self) -> RunResult:
        self._started = time.monotonic()
        self._watch = ProgressWatch(self.bounds)
        moto_cpu_before = self.system.moto.cpu_seconds()
        self._accepted_before = self.system.accepted_total()
        if self.system.provider == "ses":
            self._deliveries_before = self.system.deliveries()
        self.state.update(self.kind, accepted=0, seconds=0.0, mode=self.delivery_mode)
        dlq_before = self._dlq_depth()
        provider = self.system.provider
        self.operator.create(demo_campaign(self.campaign_id, provider, self.delivery_mode))
        self.event(
            f"campaign {self.campaign_id}: {len(self.recipients):,} recipients, {provider}, {self.delivery_mode} mode; "
            f"bounds: {self.bounds.run_s:.0f} s in all, {self.bounds.stuck_s:.0f} s without progress"
        )
        stuck: RunStuckError | None = None
        try:
            self._kill_a_consumer_after_accept()
            self._pause_and_resume()
            self._stall_requests_past_the_visibility_timeout()
            self._wait_until_done(dlq_before)
            self.result.completed = True
        except RunStuckError as exc:
            stuck = exc
            self.event(f"STUCK waiting for {exc.what}: {exc.reason}; stopping its consumers")
        finally:
            self.result.seconds = time.monotonic() - self._started
            self.result.moto_cpu_seconds = round(self.system.moto.cpu_seconds() - moto_cpu_before, 1)
            depths = queue_depths(self._sqs, self.deployed.queue_url)
            for process in self._consumers:
                process.stop()
            self._progress()
        self._collect(dlq_before)
        if stuck is not None:
            self.result.stuck = {
                "waiting_for": stuck.what,
                "reason": stuck.reason,
                "accepted": self.accepted(),
                "queue": depths,
                "dlq_depth": self.result.dlq_depth,
                "ledger": self.result.ledger_states,
                "invocations_timed_out": self.result.invocations_timed_out,
            }
        return self.result

    def _kill_a_consumer_after_accept(self) -> None:
        first, rest = self.recipients[:100], self.recipients[100:]
        if self.kind == "sendonce":
            # The real consumer with a fault point: it SIGKILLs itself once the provider
            # accepted this recipient's email, before the ledger hears of it.
            markers = self.system.log_dir / f"{self.kind}-fault-markers"
            markers.mkdir(exist_ok=True)
            doomed = self.system.start_consumer(
                f"{self.kind}-killed",
                FAULTS_HANDLER,
                {
                    "SENDONCE_FAULTS": json.dumps([{"at": "after_accept", "recipient_id": first[0].recipient_id}]),
                    "SENDONCE_FAULT_MARKERS": str(markers),
                },
                init=FAULTS_INIT,
            )
        else:
            # The generic consumer has no fault points: its provider calls go through a proxy
            # that SIGKILLs it once the provider accepted some of its batch.
            proxy = self.system.kill_proxy
            assert proxy is not None
            doomed = self.system.start_consumer(
                f"{self.kind}-killed", BASELINE_HANDLER, self.system.provider_endpoint_env(proxy.url)
            )
            proxy.kill_after(doomed.pid, KILL_AFTER_ACCEPTED)
        self._consumers.append(doomed)
        # The first batch alone, so the doomed consumer is the one that takes it.
        self.operator.publish(self.campaign_id, first)

        def taken() -> bool:
            depths = queue_depths(self._sqs, self.deployed.queue_url)
            return depths["visible"] == 0 and depths["in_flight"] >= 1

        self._wait(taken, what="the first batch received")
        received_at = time.monotonic()
        self._redelivery_at = received_at + self.visibility_s
        # The deployed consumers: MaximumConcurrency processes, one invocation at a time each.
        for n in range(self.deployed.max_concurrency):
            if self.kind == "sendonce":
                self._consumers.append(self.system.start_sendonce_consumer(f"{self.kind}-{n}"))
            else:
                self._consumers.append(self.system.start_consumer(f"{self.kind}-{n}", BASELINE_HANDLER))
        publisher = threading.Thread(target=self._publish, args=(rest,), name="publisher", daemon=True)
        publisher.start()
        self._publisher = publisher

        # It dies in its first invocation, or it never will: an attempt that ran out of time
        # before the provider accepted anything leaves the batch to the other consumers.
        function_timeout_s = self.system.function_timeout_s()
        self._wait(
            lambda: doomed.returncode() is not None,
            what="the doomed consumer's death",
            timeout_s=2 * function_timeout_s + 10,
        )
        accepted = self._first_batch_accepted(first)
        if doomed.returncode() != -signal.SIGKILL:
            raise RuntimeError(
                f"{doomed.name} exited with {doomed.returncode()}, not SIGKILL; see {doomed.stderr_path}"
            )
        self.result.consumers_killed += 1
        self.event(
            f"consumer pid {doomed.pid} killed (SIGKILL) after the provider accepted {accepted} of its batch's 100 "
            f"emails, before it acknowledged the batch; the batch returns after the {self.visibility_s} s "
            "visibility timeout, to another consumer"
        )

    def _publish(self, recipients: list[Recipient]) -> None:
        try:
            started = time.monotonic()
            report = self.operator.publish(self.campaign_id, recipients)
            self.event(
                f"published the other {report.accepted:,} recipients in {report.messages_sent} batches "
                f"({time.monotonic() - started:.1f} s)"
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self._publish_error = exc

    def _first_batch_accepted(self, first: list[Recipient]) -> int:
        counts = self.system.deliveries()
        return sum(
            max(0, counts.get(r.email.lower(), 0) - self._deliveries_before.get(r.email.lower(), 0)) for r in first
        )

    def _pause_and_resume(self) -> None:
        total = len(self.recipients)
        # Early, and resumed before the killed consumer's batch comes back: resume then
        # republishes that batch's recipients too, and whichever message reaches a consumer
        # first replays the dead consumer's request under its key.
        resume_by = self._redelivery_at - 3
        low, high = PAUSE_HOLD_S
        self._wait(
            lambda: self.accepted() >= PAUSE_AT * total or time.monotonic() >= resume_by - low - 1,
            what=f"{PAUSE_AT:.0%} of the campaign accepted",
        )
        self.operator.pause(self.campaign_id, reason="demo: operator pause")
        paused_at = time.monotonic()
        self.event(f"operator paused the campaign at {self.accepted():,} emails accepted")

        def hold_over() -> bool:
            held = time.monotonic() - paused_at
            if held >= high or time.monotonic() >= resume_by:
                return True
            return held >= low and self._queue_depths()["visible"] == 0

        self._wait(hold_over, what="the pause", interval_s=0.2, timeout_s=high + 5)
        if self.kind == "sendonce":
            _, job = self.operator.resume(self.campaign_id, reason="demo: operator resume")
            republished = job.progress.get("republished", 0)  # run in this process: done
            self.result.republished_on_resume = republished
            self.event(
                f"operator resumed after {time.monotonic() - paused_at:.1f} s: {republished:,} recipients not yet "
                "sent were republished from the ledger"
            )
        else:
            # The generic consumer never reads campaign state and keeps no record of who
            # was sent, so there is nothing to republish: only the state goes back.
            self.system.campaign_store().transition(
                self.campaign_id, StateChange(to=CampaignState.SENDING, allowed_from=(CampaignState.PAUSED,),
                by="sendonce demo", reason="demo: operator resume"),
            )  # fmt: skip
            self.event(
                f"operator resumed after {time.monotonic() - paused_at:.1f} s (the baseline never reads campaign "
                "state: it kept sending)"
            )

    def _stall_requests_past_the_visibility_timeout(self) -> None:
        total = len(self.recipients)
        stalls = stall_count(total)
        start = self.accepted()
        # Far enough apart to land in different batches, and all before the campaign ends.
        end = min(total - 100, max(int(STALLS_END_AT * total), start + (stalls + 1) * 150))
        staller = self.system.staller
        for i in range(stalls):
            milestone = start + (end - start) * (i + 1) // (stalls + 1)
            self._wait(
                lambda milestone=milestone: self.accepted() >= milestone or self._queue_empty(),
                what=f"a stall milestone ({milestone:,} emails accepted)", interval_s=0.05,
            )  # fmt: skip
            staller.stall_next(1, self.stall_s)
            consumed = self._wait(
                lambda: not staller.armed_stalls() or self._queue_empty() and "ended",
                what="a stalled request", interval_s=0.05,
            )  # fmt: skip
            if consumed == "ended":
                break  # nothing left to send; the armed stall is cleared by the next reset
            self.result.stalled_requests += 1
        self.event(
            f"{self.result.stalled_requests} provider requests accepted, then answered only after {self.stall_s} s "
            f"(> the {self.visibility_s} s visibility timeout)"
        )

    def _wait_until_done(self, dlq_before: int) -> None:
        publisher = self._publisher
        assert publisher is not None
        self._wait(lambda: not publisher.is_alive(), what="the publisher", interval_s=0.2)
        if self._publish_error is not None:
            raise self._publish_error
        self._wait_for_an_empty_queue()
        if self.kind != "sendonce":
            return
        # What an operator does with dead-lettered batches once the cause has passed
        # (`sendonce dlq redrive`): the ledger sends only their recipients that have not ended.
        moved = redrive_campaign(
            self._sqs, self.deployed.dead_letter_queue_url, self.deployed.queue_url, self.campaign_id
        )
        if moved:
            self.result.redriven = moved
            self.event(
                f"{moved} of the campaign's messages were in the dead-letter queue: redriven to the queue, as an "
                "operator would (`sendonce dlq redrive`)"
            )
            self._watch.restart_progress()
            self._depths_at = float("-inf")
            self._wait_for_an_empty_queue()

    def _wait_for_an_empty_queue(self) -> None:
        empty_since: list[float | None] = [None]

        def done() -> bool:
            if not self._queue_empty():
                empty_since[0] = None
                return False
            empty_since[0] = empty_since[0] or time.monotonic()
            return time.monotonic() - empty_since[0] >= 1.0

        self._wait(done, what="an empty queue", interval_s=0.5)
        self.event("queue empty, every consumer idle")

    # counting --------------------------------------------------------------------------

    def _collect(self, dlq_before: int) -> None:
        result = self.result
        counts = self.system.deliveries()
        per_address = {a: counts.get(a, 0) - self._deliveries_before.get(a, 0) for a in self.addresses}
        result.accepted = sum(per_address.values())
        result.reached = sum(1 for n in per_address.values() if n > 0)
        result.duplicates = result.accepted - result.reached
        result.never_sent = result.missing = len(self.addresses) - result.reached
        result.dlq_depth = self._dlq_depth() - dlq_before
        result.invocations_timed_out = sum(p.counters().get("timeouts", 0) for p in self._consumers)
        if self.kind == "sendonce":
            self.system.drain_counters()
            status = self.operator.status(self.campaign_id)
            result.unknown = status.unknown
            result.dead_lettered = status.dead_lettered
            result.ledger_states = {
                k: v for k, v in status.as_dict().items()
                if k in ("sent", "failed", "unknown", "dead_lettered", "pending", "in_progress") and v
            }  # fmt: skip
            # A recipient never sent but recorded as unknown or dead-lettered is visible to the
            # operator (sendonce never re-sends an unknown by itself); only the rest is lost.
            # (Read from the ledger only when the counters say there are some: a full read of
            # 12,480 items is seconds of moto's time.)
            flagged = {
                r.recipient_id for r in self.operator.records(self.campaign_id)
                if r.state in (DeliveryState.UNKNOWN, DeliveryState.DEAD_LETTERED)
            } if status.unknown or status.dead_lettered else set()  # fmt: skip
            result.missing = sum(
                1 for r in self.recipients if per_address[r.email.lower()] == 0 and r.recipient_id not in flagged
            )
            calls: dict[str, int] = {}
            for path in self.system.log_dir.glob(f"{self.kind}-*.counts"):
                for key, n in read_counts(path).items():
                    calls[key] = calls.get(key, 0) + n
            result.dynamodb_requests = sum(n for k, n in calls.items() if k.startswith("dynamodb."))
            result.requests_by_operation = dict(sorted(calls.items(), key=lambda kv: -kv[1]))
            durations = [
                t["handler_s"] for path in self.system.log_dir.glob(f"{self.kind}-*.timings")
                for t in read_timings(path) if "handler_s" in t
            ]  # fmt: skip
            result.slowest_invocation_s = round(max(durations, default=0.0), 2)
        else:
            # Its one DynamoDB request is GetItem on the campaign, once per message received.
            received = sum(p.counters().get("messages_received", 0) for p in self._consumers) + result.consumers_killed
            result.dynamodb_requests = received
            result.dynamodb_requests_measured = False
        result.dynamodb_requests_per_recipient = result.dynamodb_requests / max(1, result.recipients)
        self.state.update(self.kind, **result.as_dict())


def redrive_campaign(sqs: Any, dead_letter_queue_url: str, queue_url: str, campaign_id: str) -> int:
    """Move the campaign's messages from the dead-letter queue back to the queue (copy, then
    delete, as `sendonce dlq redrive` does where SQS has no move task); other campaigns'
    messages stay where they are. Each copy is in the campaign's message group, as the
    publisher sends it (the campaign queue is a fair queue)."""
    moved, others = 0, []
    while True:
        messages = sqs.receive_message(
            QueueUrl=dead_letter_queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60, WaitTimeSeconds=0
        ).get("Messages", [])
        if not messages:
            break
        for message in messages:
            try:
                ours = json.loads(message["Body"]).get("campaign_id") == campaign_id
            except (ValueError, AttributeError):
                ours = False
            if not ours:
                others.append(message)
                continue
            sqs.send_message(QueueUrl=queue_url, MessageBody=message["Body"], MessageGroupId=campaign_id)
            sqs.delete_message(QueueUrl=dead_letter_queue_url, ReceiptHandle=message["ReceiptHandle"])
            moved += 1
    for message in others:
        sqs.change_message_visibility(
            QueueUrl=dead_letter_queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    return moved
