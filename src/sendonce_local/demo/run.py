"""`sendonce demo`: the incident replayed on this machine, twice, with the same faults.

The incident: a campaign of 12,480 recipients; the consumer outlived its visibility
timeout after the provider had accepted part of a batch, SQS delivered the batch again,
and 1,284 recipients got the email twice in 11 minutes (docs/incident.md).

The demo deploys the real stack into moto, runs the deployed consumer configuration
behind local event-source pollers (one process per concurrent invocation), and sends
one campaign twice: through the generic "send, then ack" consumer the incident ran
(`sendonce_local.demo.baseline`) and through sendonce. Both runs get the same fault schedule:

1. a consumer process is SIGKILLed after the provider accepted (part of) its batch and
   before it acknowledged it; the batch comes back to another consumer;
2. the operator pauses the campaign and resumes it (CampaignService);
3. one provider request every ~1,000 recipients is accepted and then answered only
   after the visibility timeout has passed, so the batch is delivered to a second
   consumer while the first still waits.

Deliveries are counted at the provider. Exit status 0 when sendonce sent no duplicate
and missed no recipient.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3
import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.models import Campaign, CampaignState, Content, DeliveryState, Recipient
from sendonce.settings import ApiSettings
from sendonce.wiring import campaign_service
from sendonce_local.demo.consumer import COUNTS_ENV, HANDLER_ENV, read_counts
from sendonce_local.demo.proxy import RESEND_SEND_PATHS, SES_SEND_PATHS, FaultProxy
from sendonce_local.demo.stack import (
    RESEND_DEMO_KEY,
    ConsumerProcess,
    DeployedConsumer,
    ResendServerProcess,
    TimeScale,
    consumer_environment,
    deploy_stack,
    wait_for,
)
from sendonce_local.moto_server import DemoMotoServer, aws_env, ses_deliveries
from sendonce_ops.sqs_tools import queue_depths

DEFAULT_RECIPIENTS = 12_480
DEFAULT_SEED = 7
# Resend: function timeout 180 s -> 4 s, visibility timeout 1080 s -> 24 s. SES sends one
# request per recipient with 3 ledger writes each: a batch needs a longer budget.
DEFAULT_TIME_SCALES = {"resend": 45, "ses": 18}
SENDER_DOMAIN = "example.com"  # the stack's default sender_domain
RECIPIENT_DOMAIN = "example.net"
# Send rates for the demo, instead of the stack's 10 Resend requests/s and 14 SES emails/s
# (a new account's quota), which would stretch a local run to minutes of waiting.
DEMO_RATES = {"resend": ("SENDONCE_RESEND_REQUESTS_PER_SECOND", "50"), "ses": ("SENDONCE_SES_SEND_RATE", "500")}
BASELINE_HANDLER = "sendonce_local.demo.baseline:lambda_handler"
FAULTS_HANDLER = "sendonce_local.faults:lambda_handler"
COUNTING_HANDLER = "sendonce_local.demo.consumer:lambda_handler"
# The fault schedule, in campaign progress (emails accepted by the provider).
KILL_AFTER_ACCEPTED = 30  # baseline: emails of its batch the provider accepts before the kill
PAUSE_AT = 0.1
PAUSE_HOLD_S = (2.0, 8.0)  # at least, at most; in between, until the queue is drained
RECIPIENTS_PER_STALL = 960  # 13 stalled requests for 12,480 recipients
STALLS_END_AT = 0.5  # the last stall is armed by this share of the campaign
STALL_BEYOND_VISIBILITY_S = 3
RUN_LIMIT_S = 20 * 60
PROGRESS_EVERY_S = 10.0  # progress lines when the output is not a terminal

FIRST_NAMES = (
    "Ada", "Ben", "Chloe", "Dev", "Elif", "Femi", "Grace", "Hugo", "Ines", "Jon", "Kai", "Lena", "Mateo", "Nia",
    "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Xena", "Yusuf", "Zoe",
)  # fmt: skip
LAST_NAMES = (
    "Abara", "Berg", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Haddad", "Ito", "Jensen", "Kowalski",
    "Lopez", "Murphy", "Nakamura", "Okafor", "Petrov", "Quispe", "Rossi", "Silva", "Tanaka", "Uddin", "Varga",
    "Walsh", "Xu", "Yilmaz", "Zhang",
)  # fmt: skip


def demo_recipients(n: int, seed: int) -> list[Recipient]:
    """`n` distinct recipients, the same ones for the same seed."""
    rng = random.Random(seed)
    numbers = rng.sample(range(10_000_000), n)
    people = []
    for number in numbers:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        people.append(
            Recipient(
                recipient_id=f"cust-{number:07d}",
                email=f"{first}.{last}.{number:07d}@{RECIPIENT_DOMAIN}".lower(),
                variables={"first_name": first},
            )
        )
    return people


def demo_campaign(campaign_id: str, provider: str, delivery_mode: str) -> Campaign:
    return Campaign(
        campaign_id=campaign_id,
        name="Spring launch (incident replay)",
        provider=provider,
        delivery_mode=delivery_mode,
        sender=f"news@{SENDER_DOMAIN}",
        content=Content(
            subject="{{ first_name }}, the spring collection is here",
            html="<p>Hi {{ first_name }},</p><p>The spring collection is here.</p>",
            text="Hi {{ first_name }},\n\nThe spring collection is here.",
        ),
    )


# --- results ------------------------------------------------------------------------


@dataclass
class RunResult:
    consumer: str
    campaign_id: str
    delivery_mode: str
    recipients: int
    accepted: int = 0
    reached: int = 0
    duplicates: int = 0
    never_sent: int = 0  # recipients the provider accepted no email for
    missing: int = 0  # of those, the ones nothing flags: neither unknown nor dead-lettered (silent loss)
    unknown: int | None = None  # the baseline keeps no record, so it cannot know
    dead_lettered: int | None = None
    dlq_depth: int = 0
    seconds: float = 0.0
    dynamodb_requests: int = 0
    dynamodb_requests_per_recipient: float = 0.0
    dynamodb_requests_measured: bool = True
    moto_cpu_seconds: float = 0.0
    requests_by_operation: dict[str, int] = field(default_factory=dict)
    ledger_states: dict[str, int] = field(default_factory=dict)
    consumers_killed: int = 0
    stalled_requests: int = 0
    republished_on_resume: int | None = None
    completed: bool = False

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 1)
        data["dynamodb_requests_per_recipient"] = round(self.dynamodb_requests_per_recipient, 3)
        return data


# --- the local system ---------------------------------------------------------------


class DemoSystem:
    """moto with the deployed stack, the local Resend server, the consumers' settings."""

    def __init__(self, *, provider: str, time_scale: TimeScale, log_dir: Path, say: Callable[[str], None]) -> None:
        self.provider = provider
        self.time_scale = time_scale
        self.log_dir = log_dir
        self.say = say
        self.moto = DemoMotoServer()
        self.resend = ResendServerProcess(log_dir)
        self.kill_proxy: FaultProxy | None = None  # in front of the provider, for one doomed consumer
        self.ses_proxy: FaultProxy | None = None  # in front of moto's SES, for every consumer
        self.deploy_seconds = 0.0
        self.consumer: DeployedConsumer | None = None
        self.overrides: dict[str, str] = {}
        self.env: dict[str, str] = {}
        self.processes: list[ConsumerProcess] = []
        self._session: boto3.session.Session | None = None
        self.operator: CampaignService | None = None

    def start(self) -> DemoSystem:
        self.moto.start()
        self.resend.start()
        # This process's own clients (publishing, pause/resume, status) talk to moto too.
        os.environ.update(aws_env(self.moto.endpoint))
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            os.environ.pop(name, None)
        self._session = boto3.session.Session()
        self.say(f"moto on {self.moto.endpoint}; local Resend server on {self.resend.url}")
        self.say("deploying the CDK app into moto (synthesis in process + CloudFormation CreateStack)")
        started = time.monotonic()
        outputs = deploy_stack(self.moto.endpoint, context={"provider": self.provider, "sender_domain": SENDER_DOMAIN})
        self.deploy_seconds = time.monotonic() - started
        consumer = self.consumer = DeployedConsumer.read(self._session, outputs)
        secret_name = consumer.environment.get("SENDONCE_RESEND_API_KEY_SECRET")
        if secret_name:
            self._session.client("secretsmanager").create_secret(Name=secret_name, SecretString=RESEND_DEMO_KEY)
        self._session.client("sesv2").create_email_identity(EmailIdentity=SENDER_DOMAIN)
        self._session.client("sqs").set_queue_attributes(
            QueueUrl=consumer.queue_url,
            Attributes={"VisibilityTimeout": str(self.time_scale.visibility_timeout_s(consumer))},
        )
        rate_variable, rate = DEMO_RATES[self.provider]
        self.overrides = {**self.time_scale.overrides(consumer), rate_variable: rate}
        self.env = consumer_environment(
            consumer, endpoint=self.moto.endpoint, resend_url=self.resend.url, overrides=self.overrides
        )
        if self.provider == "ses":
            # moto's SES has no fault knobs: every consumer reaches it through a proxy that can stall.
            self.ses_proxy = FaultProxy(self.moto.endpoint, send_paths=SES_SEND_PATHS).start()
            self.env["AWS_ENDPOINT_URL_SESV2"] = self.ses_proxy.url
            self.kill_proxy = FaultProxy(self.ses_proxy.url, send_paths=SES_SEND_PATHS).start()
        else:
            self.kill_proxy = FaultProxy(self.resend.url, send_paths=RESEND_SEND_PATHS).start()
        self.operator = campaign_service(
            ApiSettings(
                ledger_table=consumer.ledger_table,
                campaigns_table=consumer.campaigns_table,
                queue_url=consumer.queue_url,
                dead_letter_queue_url=consumer.dead_letter_queue_url,
            ),
            operator="sendonce demo",
        )
        self.say(f"stack deployed in {self.deploy_seconds:.1f} s")
        return self

    def client(self, service: str) -> Any:
        assert self._session is not None
        return self._session.client(service)

    def campaign_store(self) -> DynamoDBCampaignStore:
        assert self.consumer is not None
        return DynamoDBCampaignStore(client=self.client("dynamodb"), table_name=self.consumer.campaigns_table)

    def start_consumer(self, name: str, handler: str, extra_env: dict[str, str] | None = None) -> ConsumerProcess:
        assert self.consumer is not None
        process = ConsumerProcess(
            name,
            consumer=self.consumer,
            handler=handler,
            function_timeout_s=self.time_scale.function_timeout_s(self.consumer),
            env={**self.env, **(extra_env or {})},
            log_dir=self.log_dir,
        )
        self.processes.append(process)
        return process

    @property
    def staller(self) -> ResendServerProcess | FaultProxy:
        """Where a provider answer can be held back: the Resend server itself, or the SES proxy."""
        return self.ses_proxy if self.ses_proxy is not None else self.resend

    def provider_endpoint_env(self, url: str) -> dict[str, str]:
        """Environment that sends a consumer's provider calls to `url` instead."""
        return {"AWS_ENDPOINT_URL_SESV2": url} if self.provider == "ses" else {"RESEND_API_URL": url}

    def deliveries(self) -> dict[str, int]:
        """Emails accepted per recipient address, at the provider, since it started."""
        if self.provider == "ses":
            return ses_deliveries(self.moto.endpoint)
        return self.resend.deliveries()

    def accepted_total(self) -> int:
        if self.provider == "ses":
            # moto counts every recipient its SES (v1 and v2) accepted: SentLast24Hours.
            return int(self.client("ses").get_send_quota()["SentLast24Hours"])
        return self.resend.stats()["emails_accepted"]

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
        self.processes.clear()
        for proxy in (self.kill_proxy, self.ses_proxy):
            if proxy is not None:
                proxy.stop()
        self.resend.stop()
        self.moto.stop()


# --- one run of the campaign --------------------------------------------------------


@dataclass
class LiveState:
    """What the display shows; written by the runs, read by the display thread."""

    recipients: int
    started: float = field(default_factory=time.monotonic)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self, run: str, message: str) -> str:
        line = f"{time.monotonic() - self.started:6.1f}s  {run:<8}  {message}"
        with self.lock:
            self.events.append(line)
        return line

    def update(self, run: str, **values: Any) -> None:
        with self.lock:
            self.rows.setdefault(run, {}).update(values)


class CampaignRun:
    """The campaign through one consumer ("baseline" or "sendonce"), with the fault schedule."""

    def __init__(
        self, system: DemoSystem, *, consumer: str, recipients: list[Recipient], seed: int, state: LiveState
    ) -> None:
        assert system.consumer is not None and system.operator is not None
        self.system = system
        self.kind = consumer
        self.recipients = recipients
        self.state = state
        self.deployed = system.consumer
        self.operator = system.operator
        self.campaign_id = f"incident-{seed}-{consumer}"
        # Batch mode: one Resend /emails/batch request per SQS message. SES has no batch send.
        self.delivery_mode = "batch" if consumer == "sendonce" and system.provider == "resend" else "single"
        self.visibility_s = system.time_scale.visibility_timeout_s(self.deployed)
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
        self._publish_error: BaseException | None = None
        self._sqs = system.client("sqs")
        self._accepted, self._accepted_at = 0, float("-inf")
        self._depths: dict[str, int] = {}
        self._depths_at = float("-inf")

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
        self.state.update(self.kind, accepted=accepted, seconds=seconds)
        if seconds - self._reported_at >= PROGRESS_EVERY_S:
            self._reported_at = seconds
            self.system.say(
                f"{time.monotonic() - self.state.started:6.1f}s  {self.kind:<8}  {accepted:,} emails accepted by the provider"
            )

    def _wait(self, predicate: Callable[[], Any], *, timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
        def check() -> Any:
            self._progress()
            return predicate()

        return wait_for(check, timeout_s=timeout_s, interval_s=interval_s, what=f"{self.kind}: {what}")

    def _queue_depths(self) -> dict[str, int]:
        # At most once a second: moto's SQS counts messages by walking the queue.
        now = time.monotonic()
        if now - self._depths_at >= 1.0:
            self._depths = queue_depths(self._sqs, self.deployed.queue_url)
            self._depths_at = now
        return self._depths

    def _queue_empty(self) -> bool:
        return not any(self._queue_depths().values())

    # the schedule ----------------------------------------------------------------------

    def run(self) -> RunResult:
        self._started = time.monotonic()
        self._reported_at = 0.0
        moto_cpu_before = self.system.moto.cpu_seconds()
        self._accepted_before = self.system.accepted_total()
        if self.system.provider == "ses":
            self._deliveries_before = self.system.deliveries()
        self.state.update(self.kind, accepted=0, seconds=0.0, mode=self.delivery_mode)
        dlq_before = queue_depths(self.system.client("sqs"), self.deployed.dead_letter_queue_url)["visible"]
        provider = self.system.provider
        self.operator.create(demo_campaign(self.campaign_id, provider, self.delivery_mode))
        self.event(
            f"campaign {self.campaign_id}: {len(self.recipients):,} recipients, {provider}, {self.delivery_mode} mode"
        )
        try:
            self._kill_a_consumer_after_accept()
            self._pause_and_resume()
            self._stall_requests_past_the_visibility_timeout()
            self._wait_until_done()
            self.result.completed = True
        finally:
            self.result.seconds = time.monotonic() - self._started
            self.result.moto_cpu_seconds = round(self.system.moto.cpu_seconds() - moto_cpu_before, 1)
            for process in self._consumers:
                process.stop()
            self._progress()
        self._collect(dlq_before)
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
        sqs = self.system.client("sqs")

        def taken() -> bool:
            depths = queue_depths(sqs, self.deployed.queue_url)
            return depths["visible"] == 0 and depths["in_flight"] >= 1

        self._wait(taken, timeout_s=60, what="the first batch received")
        received_at = time.monotonic()
        self._redelivery_at = received_at + self.visibility_s
        # The deployed consumers: MaximumConcurrency processes, one invocation at a time each.
        for n in range(self.deployed.max_concurrency):
            if self.kind == "sendonce":
                counts = self.system.log_dir / f"{self.kind}-{n}.counts"
                handler, extra = COUNTING_HANDLER, {HANDLER_ENV: self.deployed.handler, COUNTS_ENV: str(counts)}
            else:
                handler, extra = BASELINE_HANDLER, {}
            self._consumers.append(self.system.start_consumer(f"{self.kind}-{n}", handler, extra))
        publisher = threading.Thread(target=self._publish, args=(rest,), name="publisher", daemon=True)
        publisher.start()

        self._wait(lambda: doomed.returncode() is not None, timeout_s=60, what="the doomed consumer's death")
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
        self._publisher = publisher

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
            timeout_s=RUN_LIMIT_S,
            interval_s=0.1,
            what=f"{PAUSE_AT:.0%} of the campaign accepted",
        )
        self.operator.pause(self.campaign_id, reason="demo: operator pause")
        paused_at = time.monotonic()
        self.event(f"operator paused the campaign at {self.accepted():,} emails accepted")

        def hold_over() -> bool:
            held = time.monotonic() - paused_at
            if held >= high or time.monotonic() >= resume_by:
                return True
            return held >= low and self._queue_drained()

        self._wait(hold_over, timeout_s=high + 5, interval_s=0.2, what="the pause")
        if self.kind == "sendonce":
            _, republished = self.operator.resume(self.campaign_id, reason="demo: operator resume")
            self.result.republished_on_resume = republished
            self.event(
                f"operator resumed after {time.monotonic() - paused_at:.1f} s: {republished:,} recipients not yet "
                "sent were republished from the ledger"
            )
        else:
            # The generic consumer never reads campaign state and keeps no record of who
            # was sent, so there is nothing to republish: only the state goes back.
            self.system.campaign_store().transition(
                self.campaign_id, to=CampaignState.SENDING, allowed_from=[CampaignState.PAUSED],
                by="sendonce demo", reason="demo: operator resume",
            )  # fmt: skip
            self.event(
                f"operator resumed after {time.monotonic() - paused_at:.1f} s (the baseline never reads campaign "
                "state: it kept sending)"
            )

    def _queue_drained(self) -> bool:
        return self._queue_depths()["visible"] == 0

    def _stall_requests_past_the_visibility_timeout(self) -> None:
        total = len(self.recipients)
        stalls = max(1, total // RECIPIENTS_PER_STALL)
        start = self.accepted()
        # Far enough apart to land in different batches, and all before the campaign ends.
        end = min(total - 100, max(int(STALLS_END_AT * total), start + (stalls + 1) * 150))
        staller = self.system.staller
        for i in range(stalls):
            milestone = start + (end - start) * (i + 1) // (stalls + 1)
            self._wait(
                lambda milestone=milestone: self.accepted() >= milestone or self._queue_empty(),
                timeout_s=RUN_LIMIT_S, interval_s=0.05, what="a stall milestone",
            )  # fmt: skip
            staller.stall_next(1, self.stall_s)
            consumed = self._wait(
                lambda: not staller.armed_stalls() or self._queue_empty() and "ended",
                timeout_s=RUN_LIMIT_S, interval_s=0.05, what="a stalled request",
            )  # fmt: skip
            if consumed == "ended":
                break  # nothing left to send; the armed stall is cleared by the next reset
            self.result.stalled_requests += 1
        self.event(
            f"{self.result.stalled_requests} provider requests accepted, then answered only after {self.stall_s} s "
            f"(> the {self.visibility_s} s visibility timeout)"
        )

    def _wait_until_done(self) -> None:
        self._publisher.join()
        if self._publish_error is not None:
            raise self._publish_error
        empty_since: list[float | None] = [None]

        def done() -> bool:
            if not self._queue_empty():
                empty_since[0] = None
                return False
            empty_since[0] = empty_since[0] or time.monotonic()
            return time.monotonic() - empty_since[0] >= 1.0

        self._wait(done, timeout_s=RUN_LIMIT_S, interval_s=0.5, what="an empty queue")
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
        dlq = queue_depths(self.system.client("sqs"), self.deployed.dead_letter_queue_url)
        result.dlq_depth = dlq["visible"] + dlq["in_flight"] - dlq_before
        if self.kind == "sendonce":
            status = self.operator.status(self.campaign_id)
            result.unknown = status.unknown
            result.dead_lettered = status.dead_lettered
            result.ledger_states = {
                k: v for k, v in status.as_dict().items()
                if k in ("sent", "failed", "unknown", "dead_lettered", "pending", "in_progress") and v
            }  # fmt: skip
            # A recipient never sent but recorded as unknown or dead-lettered is visible to the
            # operator (sendonce never re-sends an unknown by itself); only the rest is lost.
            flagged = {
                r.recipient_id for r in self.operator.records(self.campaign_id)
                if r.state in (DeliveryState.UNKNOWN, DeliveryState.DEAD_LETTERED)
            }  # fmt: skip
            result.missing = sum(
                1 for r in self.recipients if per_address[r.email.lower()] == 0 and r.recipient_id not in flagged
            )
            calls: dict[str, int] = {}
            for path in self.system.log_dir.glob(f"{self.kind}-*.counts"):
                for key, n in read_counts(path).items():
                    calls[key] = calls.get(key, 0) + n
            result.dynamodb_requests = sum(n for k, n in calls.items() if k.startswith("dynamodb."))
            result.requests_by_operation = dict(sorted(calls.items(), key=lambda kv: -kv[1]))
        else:
            # Its one DynamoDB request is GetItem on the campaign, once per message received.
            received = sum(p.counters().get("messages_received", 0) for p in self._consumers) + result.consumers_killed
            result.dynamodb_requests = received
            result.dynamodb_requests_measured = False
        result.dynamodb_requests_per_recipient = result.dynamodb_requests / max(1, result.recipients)
        self.state.update(self.kind, **result.as_dict())


# --- display ------------------------------------------------------------------------


class LiveView:
    def __init__(self, state: LiveState) -> None:
        self.state = state

    def __rich__(self) -> Group:
        with self.state.lock:
            rows = {k: dict(v) for k, v in self.state.rows.items()}
            events = list(self.state.events[-10:])
        table = Table(box=None, pad_edge=False)
        for column in ("run", "mode", "emails accepted", "progress", "time"):
            table.add_column(column, justify="right" if column != "run" else "left")
        for run, row in rows.items():
            accepted = row.get("accepted", 0)
            share = min(1.0, accepted / max(1, self.state.recipients))
            bar = "█" * int(share * 30) + "·" * (30 - int(share * 30))
            table.add_row(run, row.get("mode", ""), f"{accepted:,}", bar, f"{row.get('seconds', 0):.0f} s")
        return Group(table, Text("\n".join(events), style="dim"))


def summary_table(baseline: RunResult, sendonce: RunResult, provider: str) -> Table:
    table = Table(title=f"the same campaign, the same faults ({provider})", title_justify="left")
    table.add_column("")
    table.add_column("baseline\n(send, then ack)", justify="right")
    table.add_column("sendonce", justify="right")

    def per_recipient(r: RunResult) -> str:
        value = f"{r.dynamodb_requests_per_recipient:.3f}"
        return value if r.dynamodb_requests_measured else f"{value} (campaign reads only)"

    rows = [
        ("delivery mode", baseline.delivery_mode, sendonce.delivery_mode),
        ("recipients", f"{baseline.recipients:,}", f"{sendonce.recipients:,}"),
        ("emails accepted by the provider", f"{baseline.accepted:,}", f"{sendonce.accepted:,}"),
        ("duplicates (accepted - recipients reached)", f"{baseline.duplicates:,}", f"{sendonce.duplicates:,}"),
        ("recipients never sent", f"{baseline.never_sent:,}", f"{sendonce.never_sent:,}"),
        ("unknown outcomes (flagged, never re-sent)", "not recorded", f"{sendonce.unknown or 0:,}"),
        ("missing: never sent and not flagged", f"{baseline.missing:,}", f"{sendonce.missing:,}"),
        ("DLQ depth", f"{baseline.dlq_depth:,}", f"{sendonce.dlq_depth:,}"),
        ("wall time", f"{baseline.seconds:.1f} s", f"{sendonce.seconds:.1f} s"),
        ("DynamoDB requests per recipient", per_recipient(baseline), per_recipient(sendonce)),
        ("consumers killed after accept", str(baseline.consumers_killed), str(sendonce.consumers_killed)),
        (
            "requests stalled past the visibility timeout",
            str(baseline.stalled_requests),
            str(sendonce.stalled_requests),
        ),
    ]
    for label, left, right in rows:
        style = "bold" if label.startswith(("duplicates", "missing")) else None
        table.add_row(label, left, right, style=style)
    return table


# --- the command --------------------------------------------------------------------


@dataclass(frozen=True)
class DemoOptions:
    recipients: int = DEFAULT_RECIPIENTS
    provider: str = "resend"
    seed: int = DEFAULT_SEED
    time_scale: int = DEFAULT_TIME_SCALES["resend"]
    keep_running: bool = False
    as_json: bool = False


def run_demo(options: DemoOptions, console: Console) -> tuple[dict[str, Any], bool]:
    """Run both campaigns; return the summary and whether sendonce sent each recipient once."""
    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="sendonce-demo-"))
    state = LiveState(recipients=options.recipients)
    interactive = console.is_terminal and not options.as_json

    def say(line: str) -> None:
        if not interactive and not options.as_json:
            console.print(line, highlight=False)

    time_scale = TimeScale(options.time_scale)
    system = DemoSystem(provider=options.provider, time_scale=time_scale, log_dir=log_dir, say=say)
    keep_logs = False
    try:
        if interactive:
            with console.status("starting moto and the local Resend server, deploying the stack into moto"):
                system.start()
        else:
            system.start()
        deployed = system.consumer
        assert deployed is not None
        if not options.as_json:
            console.print(configuration_table(system, options))
        people = demo_recipients(options.recipients, options.seed)
        results: dict[str, RunResult] = {}
        live = Live(LiveView(state), console=console, refresh_per_second=4, transient=False) if interactive else None
        if live:
            live.start()
        try:
            for kind in ("baseline", "sendonce"):
                if options.provider == "resend":
                    system.resend.reset()  # counts per run: the same addresses get both campaigns
                results[kind] = CampaignRun(
                    system, consumer=kind, recipients=people, seed=options.seed, state=state
                ).run()
        finally:
            if live:
                live.stop()
        baseline, sendonce = results["baseline"], results["sendonce"]
        ok = sendonce.completed and sendonce.duplicates == 0 and sendonce.missing == 0
        summary = {
            "recipients": options.recipients,
            "provider": options.provider,
            "seed": options.seed,
            "seconds": round(time.monotonic() - started, 1),
            "deploy_seconds": round(system.deploy_seconds, 1),
            "time_scale": options.time_scale,
            "consumer": consumer_summary(system),
            "baseline": baseline.as_dict(),
            "sendonce": sendonce.as_dict(),
            "ok": ok,
        }
        if not options.as_json:
            console.print(summary_table(baseline, sendonce, options.provider))
            console.print(verdict(baseline, sendonce, summary["seconds"]))
        if not ok:
            keep_logs = True
            console.print(f"consumer logs kept in {log_dir}", highlight=False)
        if options.keep_running:
            keep_running(system, options, console, example_recipient=people[0].recipient_id)
        return summary, ok
    except BaseException:
        keep_logs = True
        console.print(f"[red]demo failed[/red]; consumer logs kept in {log_dir}", highlight=False)
        if system.moto.pid:
            console.print(system.moto.log_tail(1500), highlight=False, markup=False)
        raise
    finally:
        system.stop()
        if not keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)


def consumer_summary(system: DemoSystem) -> dict[str, Any]:
    deployed = system.consumer
    assert deployed is not None
    return {
        "handler": deployed.handler,
        "batch_size": deployed.batch_size,
        "max_concurrency": deployed.max_concurrency,
        "function_timeout_s": {"deployed": deployed.timeout_s, "demo": system.time_scale.function_timeout_s(deployed)},
        "visibility_timeout_s": {
            "deployed": deployed.visibility_timeout_s, "demo": system.time_scale.visibility_timeout_s(deployed),
        },
        "max_receive_count": deployed.max_receive_count,
        "overrides": {k: {"deployed": deployed.environment.get(k), "demo": v} for k, v in system.overrides.items()},
    }  # fmt: skip


def configuration_table(system: DemoSystem, options: DemoOptions) -> Table:
    deployed = system.consumer
    assert deployed is not None
    scale = system.time_scale
    table = Table(
        title=f"consumer configuration read back from the deployed stack (time scale 1/{options.time_scale})",
        title_justify="left",
    )
    table.add_column("setting")
    table.add_column("deployed", justify="right")
    table.add_column("in the demo", justify="right")
    table.add_row("handler", deployed.handler, deployed.handler)
    table.add_row("event source batch size", str(deployed.batch_size), str(deployed.batch_size))
    table.add_row("MaximumConcurrency", str(deployed.max_concurrency), f"{deployed.max_concurrency} consumer processes")
    table.add_row("function timeout", f"{deployed.timeout_s} s", f"{scale.function_timeout_s(deployed):g} s")
    table.add_row(
        "queue visibility timeout", f"{deployed.visibility_timeout_s} s", f"{scale.visibility_timeout_s(deployed)} s"
    )
    table.add_row("maxReceiveCount", str(deployed.max_receive_count), str(deployed.max_receive_count))
    for name, value in system.overrides.items():
        table.add_row(name, deployed.environment.get(name, "-"), value)
    table.caption = (
        "Everything else in the function's environment is used as deployed. Durations are divided by the time "
        "scale (provider timeout and safety margin not below 1 s); the send rate is raised for a short local run."
    )
    return table


def verdict(baseline: RunResult, sendonce: RunResult, seconds: float) -> Text:
    good = sendonce.completed and sendonce.duplicates == 0 and sendonce.missing == 0
    text = Text()
    text.append(
        f"baseline: {baseline.duplicates:,} duplicates, {baseline.missing:,} missing. "
        f"sendonce: {sendonce.duplicates:,} duplicates, {sendonce.missing:,} missing, "
        f"{sendonce.unknown or 0:,} unknown. Total {seconds:.0f} s.\n",
    )
    text.append("PASS" if good else "FAIL", style="bold green" if good else "bold red")
    text.append(
        ": sendonce sent every recipient exactly once." if good else ": sendonce did not send each recipient once."
    )
    return text


def keep_running(system: DemoSystem, options: DemoOptions, console: Console, *, example_recipient: str) -> None:
    deployed = system.consumer
    assert deployed is not None
    for n in range(deployed.max_concurrency):
        system.start_consumer(
            f"kept-{n}",
            COUNTING_HANDLER,
            {HANDLER_ENV: deployed.handler, COUNTS_ENV: str(system.log_dir / f"kept-{n}.counts")},
        )
    endpoint = system.moto.endpoint
    campaign = f"incident-{options.seed}-sendonce"
    console.print(
        f"""
Still running (Ctrl-C stops everything):
  moto with the stack       {endpoint}
  local Resend server       {system.resend.url}    (curl {system.resend.url}/_local/deliveries)
  consumers                 {deployed.max_concurrency} x {deployed.handler}, visibility timeout still scaled

Point the CLI at it:
  export AWS_ENDPOINT_URL={endpoint} AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \\
         AWS_SESSION_TOKEN=testing AWS_DEFAULT_REGION=us-east-1 SENDONCE_STACK=Sendonce
  sendonce campaign status {campaign}
  sendonce ledger show {campaign} {example_recipient}
  sendonce dlq list
  sendonce local api --port 8080 &
  curl -s http://127.0.0.1:8080/campaigns/{campaign}/delivery-status
""",
        highlight=False,
        markup=False,
        soft_wrap=True,  # commands to copy: no line breaks inside them
    )
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command("demo")
@click.option(
    "--recipients",
    type=click.IntRange(200, 100_000),
    default=DEFAULT_RECIPIENTS,
    show_default=True,
    help="Recipients in the campaign (generated from --seed).",
)
@click.option(
    "--provider",
    type=click.Choice(["resend", "ses"]),
    default="resend",
    show_default=True,
    help="resend: the local Resend server, sendonce in batch mode (about 4 min for 12,480 "
    "recipients on 2 cores). ses: moto's SES behind a stalling proxy, single mode, 3 ledger "
    "writes per recipient: --recipients 2000 takes about 3.5 min, 12,480 about 10.",
)
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Seed for the recipients.")
@click.option(
    "--time-scale",
    type=click.IntRange(10, 600),
    default=None,
    help="Divide the deployed function timeout and visibility timeout (and provider timeout and "
    "safety margin, not below 1 s) by this. Default: 45 with resend (180 s -> 4 s, "
    "1080 s -> 24 s), 18 with ses (10 s, 60 s).",
)
@click.option(
    "--keep-running",
    is_flag=True,
    help="Leave moto, the Resend server and consumers up; print how "
    "to use the CLI and the HTTP API against them. Ctrl-C stops.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def demo(recipients: int, provider: str, seed: int, time_scale: int | None, keep_running: bool, as_json: bool) -> None:
    """Replay the incident locally: the same campaign and faults through the generic consumer and
    through sendonce, counted at the provider.

    Deploys the CDK stack into moto, runs the deployed consumer behind local pollers (time scaled
    down), kills a consumer after the provider accepted, pauses and resumes, and stalls provider
    answers past the visibility timeout. Exit status 0 when sendonce sent no duplicate and lost
    no recipient silently (never sent and not flagged unknown or dead-lettered), 1 otherwise.
    """
    time_scale = time_scale or DEFAULT_TIME_SCALES[provider]
    options = DemoOptions(recipients=recipients, provider=provider, seed=seed, time_scale=time_scale,
                          keep_running=keep_running, as_json=as_json)  # fmt: skip
    console = Console(stderr=as_json, highlight=False)
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        summary, ok = run_demo(options, console)
    except KeyboardInterrupt:
        console.print("interrupted; everything the demo started is stopped")
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if as_json:
        click.echo(json.dumps(summary))
    sys.exit(0 if ok else 1)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> None:
    demo.main(args=list(argv) if argv is not None else None, prog_name="python -m sendonce_local.demo.run")


if __name__ == "__main__":
    main()
