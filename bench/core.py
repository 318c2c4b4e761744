"""The benchmark's core: campaigns through the local stack, measured side by side.

The stack is moto's server (its own process), the local Resend server (its own process,
with the incident's latency model: 50-200 ms per call, uniform) and the real consumer
handler behind the local event-source poller, one poller per simulated Lambda execution
environment, each with its own runtime. The no-ledger baseline
(`sendonce_local.demo.baseline`) runs through the same poller, queue, campaign store, provider
and send concurrency.

Nothing here asserts a time: every figure is a ratio of two things measured in the same
run on the same machine, or a count. `run_benchmark(config)` returns one JSON-ready dict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import boto3

from bench.capacity import (
    CAMPAIGN_READ,
    LEDGER,
    LEDGER_SHARE,
    LIMITER,
    SEND_GROUP,
    SUPPRESSIONS,
    DynamoDBRequestLog,
    item_size,
)
from sendonce_local.moto_server import MotoServer

ROOT = Path(__file__).resolve().parents[1]
RECIPIENTS_PER_MESSAGE = 100
LOCAL_RESEND_KEY = "re_local_test_key"


class BenchError(RuntimeError):
    """A phase did not finish, or finished with wrong deliveries: its figures mean nothing."""


@dataclass(frozen=True)
class BenchConfig:
    name: str = "quick"
    recipients: int = 200  # unthrottled, duplicate and batch-mode phases
    rate_per_second: float = 25.0  # emails/s, single mode: the most the shared limiter is set to
    send_concurrency: int = 8
    pollers: int = 2  # concurrent invocations (the event source's MaximumConcurrency)
    latency_ms: tuple[float, float] = (50.0, 200.0)
    message_samples: int = 1  # isolated messages timed per path
    message_size: int = RECIPIENTS_PER_MESSAGE  # recipients per SQS message (a batch)
    ses_recipients: int = 30
    pairs: int = 1  # baseline/sendonce pairs at the rate; 2 runs them A B B A
    rate_limited_seconds: float = 10.0  # recipients per run at the rate: about this long
    rate_headroom: float = 0.6  # the rate: this part of sendonce's unthrottled throughput ...
    min_rate_per_second: float = 5.0  # ... but no less than this
    limiter_unthrottled: bool = False  # also unthrottled with the limiter on at a rate that never binds
    provider_enforced_rate: bool = False  # also at the rate with the provider enforcing it (429s)
    default_team_recipients: int = 40  # at Resend's default team limit (5/s) with default settings
    cold_start_runs: int = 1
    cold_start_detail: bool = False  # also -X importtime, overall and by package without bytecode
    function_timeout_s: float = 60.0
    phase_timeout_s: float = 300.0

    @property
    def mean_latency_s(self) -> float:
        return (self.latency_ms[0] + self.latency_ms[1]) / 2 / 1000


QUICK = BenchConfig()
FULL = BenchConfig(
    name="full",
    recipients=2000,
    rate_per_second=30.0,
    rate_limited_seconds=60.0,
    message_samples=5,
    ses_recipients=200,
    pairs=2,
    limiter_unthrottled=True,
    provider_enforced_rate=True,
    cold_start_runs=3,
    cold_start_detail=True,
    phase_timeout_s=900.0,
)


# --- environment ----------------------------------------------------------------------


@contextlib.contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def removed_from_environ(*names: str) -> Iterator[None]:
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _pythonpath() -> str:
    return os.pathsep.join([str(ROOT / "lambdas"), str(ROOT / "src"), str(ROOT)])


class ResendProcess:
    """The local Resend server in its own interpreter, so its work does not share the
    consumer's GIL; steered and read over its /_local endpoints."""

    def __init__(self, latency_ms: tuple[float, float]):
        self._latency_ms = latency_ms
        self._process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> ResendProcess:
        low, high = self._latency_ms
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sendonce_local.resend_server",
                "--port",
                "0",
                "--latency-ms",
                f"{low}:{high}",
                "--rate-limit",
                "0",
            ],  # off; phases that need a team limit set one
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": _pythonpath()},
        )
        assert self._process.stdout is not None
        self.url = self._process.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.stop()
            raise BenchError(f"local Resend server did not start (printed {self.url!r})")
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def accepted(self) -> list[dict]:
        return self._call("GET", "/_local/accepted")["accepted"]

    def stats(self) -> dict:
        return self._call("GET", "/_local/stats")

    def reset(self) -> None:
        """Forget accepted emails and keys (the latency model stays)."""
        self._call("POST", "/_local/reset")

    def set_rate_limit(self, requests_per_second: int | None) -> None:
        self._call("POST", "/_local/faults", {"rate_limit": requests_per_second})


@dataclass
class PublishedCampaign:
    campaign_id: str
    domain: str
    provider: str
    mode: str
    recipients: int
    messages: int
    bodies: list[str]
    resources: Any  # the queue and tables it was published to (fresh for every phase)


class LocalStack:
    """moto + local Resend, the environment pointed at them; fresh queues and tables for
    every campaign, so no phase runs against another's items or queue depth."""

    def __init__(self, config: BenchConfig, *, moto_endpoint: str | None = None):
        self.config = config
        self._moto_endpoint = moto_endpoint
        self._exit = contextlib.ExitStack()

    def __enter__(self) -> LocalStack:
        from sendonce_local.moto_server import aws_env

        try:
            if self._moto_endpoint:
                self.moto_endpoint, self.moto_patched = self._moto_endpoint, False
            else:
                moto = MotoServer().start()  # its bootstrap carries the DynamoDB patch
                self._exit.callback(moto.stop)
                self.moto_endpoint, self.moto_patched = moto.endpoint, True
            self._exit.enter_context(patched_environ(aws_env(self.moto_endpoint)))
            # A profile would win over the fake keys; this flag would make boto3 ignore the endpoint.
            self._exit.enter_context(
                removed_from_environ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
            )
            self.resend = ResendProcess(self.config.latency_ms).start()
            self._exit.callback(self.resend.stop)
            self.sqs = boto3.client("sqs")
            self.dynamodb = boto3.client("dynamodb")
        except BaseException:
            self._exit.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._exit.close()

    @staticmethod
    def suppressions_table(resources: Any) -> str:
        """The phase's suppression list: checked before every send, as deployed."""
        return f"{resources.ledger_table}-suppressions"

    def consumer_env(self, resources: Any, *, rate: float | None, **overrides: Any) -> dict[str, str]:
        """The consumer's settings; rate None switches the shared limiter off. The limiter
        paces at exactly `rate` (no reserve) unless `overrides` say otherwise."""
        return resources.consumer_env(
            **{
                "SENDONCE_SUPPRESSIONS_TABLE": self.suppressions_table(resources),
                "SENDONCE_SEND_CONCURRENCY": self.config.send_concurrency,
                "SENDONCE_PROVIDER_TIMEOUT_SECONDS": 10,
                "SENDONCE_SAFETY_MARGIN_MS": 15_000,
                "SENDONCE_SHARED_RATE_LIMIT": "true" if rate else "false",
                "SENDONCE_RESEND_REQUESTS_PER_SECOND": rate or 10,
                "SENDONCE_RESEND_RATE_RESERVE": 0,
                "SENDONCE_SES_SEND_RATE": rate or 14,
                "RESEND_API_URL": self.resend.url,
                **overrides,
            }
        )

    def default_consumer_env(self, resources: Any, **overrides: Any) -> dict[str, str]:
        """The consumer's own defaults for the send rate (settings.py), nothing overridden."""
        return resources.consumer_env(
            **{
                "SENDONCE_SUPPRESSIONS_TABLE": self.suppressions_table(resources),
                "SENDONCE_SEND_CONCURRENCY": self.config.send_concurrency,
                "SENDONCE_PROVIDER_TIMEOUT_SECONDS": 10,
                "SENDONCE_SAFETY_MARGIN_MS": 15_000,
                "RESEND_API_URL": self.resend.url,
                **overrides,
            }
        )

    def fresh_resources(self) -> Any:
        from sendonce_local.resources import create_local_resources, create_suppressions_table

        # The visibility timeout outlasts any invocation: a message that comes back
        # means a failure, which the phase reports instead of waiting it out.
        resources = create_local_resources(
            visibility_timeout_s=int(self.config.function_timeout_s * 2), resend_api_key=LOCAL_RESEND_KEY
        )
        create_suppressions_table(self.dynamodb, self.suppressions_table(resources))
        return resources

    def publish(
        self, label: str, recipients: int, *, provider: str = "resend", mode: str = "single"
    ) -> PublishedCampaign:
        from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
        from sendonce.domain.models import Campaign, Content, Recipient
        from sendonce.settings import ApiSettings
        from sendonce.wiring import campaign_service
        from sendonce_local.resources import verify_ses_sender

        self.resend.reset()
        resources = self.fresh_resources()
        operator = campaign_service(
            ApiSettings(
                ledger_table=resources.ledger_table,
                campaigns_table=resources.campaigns_table,
                queue_url=resources.queue_url,
                dead_letter_queue_url=resources.dead_letter_queue_url,
            )
        )
        campaign_id = f"{label}-{uuid.uuid4().hex[:6]}"
        domain = f"{uuid.uuid4().hex[:10]}.example.com"
        if provider == "ses":
            verify_ses_sender(boto3.session.Session(), domain)
        operator.create(
            Campaign(
                campaign_id=campaign_id,
                name=f"bench {label}",
                provider=provider,
                delivery_mode=mode,
                sender=f"news@{domain}",
                content=Content(
                    subject="Spring launch, {{ name }}",
                    html="<p>Hi {{ name }},</p><p>Our spring collection is here.</p>",
                    text="Hi {{ name }}, our spring collection is here.",
                ),
            )
        )
        people = [
            Recipient(recipient_id=f"r{i}", email=f"user{i}@{domain}", variables={"name": f"User {i}"})
            for i in range(recipients)
        ]
        report = operator.publish(campaign_id, people, batch_size=self.config.message_size)
        store = DynamoDBCampaignStore(client=self.dynamodb, table_name=resources.campaigns_table)
        bodies = [batch.to_body() for batch, _ in store.batches(campaign_id)]
        return PublishedCampaign(
            campaign_id, domain, provider, mode, recipients, report.messages_sent, bodies, resources
        )

    def redeliver(self, campaign: PublishedCampaign) -> None:
        """Put the campaign's messages on the queue again (a redelivery, a redrive)."""
        for start in range(0, len(campaign.bodies), 10):
            chunk = campaign.bodies[start : start + 10]
            self.sqs.send_message_batch(
                QueueUrl=campaign.resources.queue_url,
                Entries=[{"Id": str(i), "MessageBody": body} for i, body in enumerate(chunk)],
            )

    def accepted_times(self, campaign: PublishedCampaign) -> tuple[list[float], Counter]:
        """Acceptance times at the provider and emails per address, for this campaign."""
        suffix = "@" + campaign.domain
        times: list[float] = []
        per_address: Counter = Counter()
        for email in self.resend.accepted():
            mine = [a.lower() for a in email["to"] if a.lower().endswith(suffix)]
            if mine:
                times.append(email["accepted_at"])
                per_address.update(mine)
        return sorted(times), per_address

    def item_sizes(self, campaign: PublishedCampaign) -> dict[tuple[str, tuple[str, str]], int]:
        """Final sizes of the campaign's ledger items and campaigns-table items."""
        ledger_table, campaigns_table = campaign.resources.ledger_table, campaign.resources.campaigns_table
        sizes: dict[tuple[str, tuple[str, str]], int] = {}
        from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
        from sendonce.adapters.dynamodb.ledger_keys import LedgerKeys

        store = DynamoDBCampaignStore(client=self.dynamodb, table_name=campaigns_table)
        keys = LedgerKeys(lambda c: store.get(c).ledger_shards)
        for item in keys.query_campaign(self.dynamodb, ledger_table, campaign.campaign_id):
            sizes[(ledger_table, (item["campaign_id"]["S"], item["recipient_id"]["S"]))] = item_size(item)
        paginator = self.dynamodb.get_paginator("query")
        for page in paginator.paginate(
            TableName=campaigns_table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": f"campaign#{campaign.campaign_id}"}},
        ):
            for item in page["Items"]:
                sizes[(campaigns_table, (item["pk"]["S"], item["sk"]["S"]))] = item_size(item)
        return sizes


# --- consumers ----------------------------------------------------------------------


class TimedHandler:
    """A handler that records how long each invocation took."""

    def __init__(self, handler: Callable[[dict, Any], Any]):
        self._handler = handler
        self._lock = threading.Lock()
        self.seconds: list[float] = []

    def __call__(self, event: dict, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._handler(event, context)
        finally:
            with self._lock:
                self.seconds.append(time.perf_counter() - started)


class PacedHttpClient:
    """The baseline's rate limiter: the same schedule as sendonce's shared limiter (one-
    second slots of floor(rate) places, place i used at slot + i / rate, a full slot
    spilling into the next, a past place used no sooner than 1/rate after the last), kept in process so that it costs no DynamoDB request. Put in
    front of the Resend SDK's HTTP client through the SDK's `default_http_client` hook."""

    def __init__(self, inner: Any, rate: float):
        self._inner = inner
        self._rate = rate
        self._capacity = max(1, math.floor(rate))
        self._lock = threading.Lock()
        self._used: dict[int, int] = {}
        self._cursor = 0.0

    def _place(self) -> float:
        # As the limiter: a place whose time has passed is used no sooner than 1/rate after
        # the last one used.
        with self._lock:
            now = time.time()
            slot = int(now)
            while self._used.get(slot, 0) >= self._capacity:
                slot += 1
            used = self._used.get(slot, 0)
            self._used[slot] = used + 1
            at = max(slot + used / self._rate, now, self._cursor)
            self._cursor = at + 1 / self._rate
            return at

    def request(
        self, method: str, url: str, headers: Mapping[str, str], json: Any = None, files: Any = None, data: Any = None
    ) -> Any:
        delay = self._place() - time.time()
        if delay > 0:
            time.sleep(delay)
        return self._inner.request(method, url, headers, json=json, files=files, data=data)


def sendonce_handlers(
    stack: LocalStack,
    resources: Any,
    *,
    rate: float | None,
    count: int,
    session: Any,
    env: Mapping[str, str] | None = None,
) -> list[TimedHandler]:
    """One runtime per simulated execution environment, all built from `session`."""
    from sendonce.handlers import consumer
    from sendonce.settings import ConsumerSettings
    from sendonce.wiring import assemble_consumer, consumer_parts

    settings = ConsumerSettings.from_env(env or stack.consumer_env(resources, rate=rate))
    handlers = []
    for _ in range(count):
        runtime = assemble_consumer(settings, consumer_parts(settings, session))
        handlers.append(TimedHandler(functools.partial(consumer.lambda_handler, runtime=runtime)))
    return handlers


@contextlib.contextmanager
def baseline_environment(stack: LocalStack, resources: Any, *, rate: float | None) -> Iterator[None]:
    import resend

    env = {
        "SENDONCE_CAMPAIGNS_TABLE": resources.campaigns_table,
        "SENDONCE_SEND_CONCURRENCY": str(stack.config.send_concurrency),
        "SENDONCE_BASELINE_RESEND_KEY": LOCAL_RESEND_KEY,
        "RESEND_API_URL": stack.resend.url,
    }
    client = resend.RequestsClient(timeout=10)
    previous = resend.default_http_client
    resend.default_http_client = PacedHttpClient(client, rate) if rate else client
    try:
        with patched_environ(env):
            yield
    finally:
        resend.default_http_client = previous


def baseline_handlers(count: int) -> list[TimedHandler]:
    from sendonce_local.demo import baseline

    return [TimedHandler(baseline.lambda_handler) for _ in range(count)]


# --- one phase ----------------------------------------------------------------------


@dataclass
class Phase:
    label: str
    campaign: PublishedCampaign
    wall_s: float  # pollers started -> every message deleted
    accepted_times: list[float]
    per_address: Counter
    started_at: float
    handler_seconds: list[float]
    poller: dict[str, int]
    log: DynamoDBRequestLog | None = None
    sizes: dict = field(default_factory=dict)

    @property
    def sent(self) -> int:
        return sum(self.per_address.values())

    def check_each_once(self) -> None:
        missing = self.campaign.recipients - len(self.per_address)
        duplicates = sum(n - 1 for n in self.per_address.values())
        if missing or duplicates:
            raise BenchError(f"{self.label}: {missing} recipient(s) missing, {duplicates} duplicate(s) at the provider")

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "recipients": self.campaign.recipients,
            "messages": self.campaign.messages,
            "wall_s": round(self.wall_s, 3),
            "emails_per_s": round(self.sent / self.wall_s, 2) if self.sent else 0.0,
        }
        if self.accepted_times:
            out["first_accept_s"] = round(self.accepted_times[0] - self.started_at, 3)
            out["last_accept_s"] = round(self.accepted_times[-1] - self.started_at, 3)
        if any(self.poller.get(k) for k in ("failures_reported", "errors", "timeouts")):
            out["poller"] = self.poller
        if self.log is not None:
            out["ddb_requests"] = self.log.counts()
            mean = self.log.mean_seconds()
            if mean is not None:
                out["ddb_mean_request_ms"] = round(mean * 1000, 2)
        return out


def drain(
    stack: LocalStack,
    label: str,
    campaign: PublishedCampaign,
    handlers: list[TimedHandler],
    *,
    log: DynamoDBRequestLog | None = None,
) -> Phase:
    """Poll the campaign's queue until every one of its messages is deleted."""
    from sendonce_local.poller import EventSourcePoller

    expected = campaign.messages
    before_times, before_counts = stack.accepted_times(campaign)
    pollers = [
        EventSourcePoller(
            sqs_client=boto3.client("sqs"),
            queue_url=campaign.resources.queue_url,
            handler=handler,
            function_name=f"bench-{label}-{n}",
            batch_size=1,
            function_timeout_s=stack.config.function_timeout_s,
            max_concurrency=1,
        )
        for n, handler in enumerate(handlers)
    ]
    if log is not None:
        log.reset()
    deadline = time.monotonic() + stack.config.phase_timeout_s
    started = time.time()
    for poller in pollers:
        poller.start()
    try:
        while sum(p.counters.messages_deleted for p in pollers) < expected:
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{label}: not done after {stack.config.phase_timeout_s} s "
                    f"({[p.counters.as_dict() for p in pollers]})"
                )
            time.sleep(0.02)
        finished = time.time()
    finally:
        counters = [p.stop().as_dict() for p in pollers]
    poller_totals = {k: sum(c[k] for c in counters) for k in counters[0]}
    times, per_address = stack.accepted_times(campaign)
    new_times = times[len(before_times) :] if before_times else times
    new_counts = per_address - before_counts
    return Phase(
        label=label,
        campaign=campaign,
        wall_s=finished - started,
        accepted_times=new_times,
        per_address=new_counts,
        started_at=started,
        handler_seconds=[s for h in handlers for s in h.seconds],
        poller=poller_totals,
        log=log,
        sizes=stack.item_sizes(campaign) if log is not None else {},
    )


def run_sendonce(
    stack: LocalStack,
    label: str,
    campaign: PublishedCampaign,
    *,
    rate: float | None,
    pollers: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Phase:
    session = boto3.session.Session()
    log = DynamoDBRequestLog(
        session,
        ledger_table=campaign.resources.ledger_table,
        campaigns_table=campaign.resources.campaigns_table,
        suppressions_table=stack.suppressions_table(campaign.resources),
    )
    handlers = sendonce_handlers(
        stack, campaign.resources, rate=rate, count=pollers or stack.config.pollers, session=session, env=env
    )
    return drain(stack, label, campaign, handlers, log=log)


def run_baseline(
    stack: LocalStack, label: str, campaign: PublishedCampaign, *, rate: float | None, pollers: int | None = None
) -> Phase:
    with baseline_environment(stack, campaign.resources, rate=rate):
        return drain(stack, label, campaign, baseline_handlers(pollers or stack.config.pollers))


# --- figures ------------------------------------------------------------------------


def steady_rate(times: list[float], trim: float = 0.1) -> float | None:
    """Sends per second over the middle of the run: the first and last `trim` of the
    acceptances (ramp-up, the last messages' tail) are left out."""
    times = sorted(times)
    k = int(len(times) * trim)
    window = times[k : len(times) - k]
    if len(window) < 3 or window[-1] <= window[0]:
        return None
    return (len(window) - 1) / (window[-1] - window[0])


def accept_span(phase: Phase) -> float:
    """Seconds from the first email accepted to the last."""
    return phase.accepted_times[-1] - phase.accepted_times[0] if len(phase.accepted_times) > 1 else 0.0


def busiest_second(times: list[float]) -> int:
    """The most acceptances in any sliding one-second window."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= 1.0:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def per_recipient(phase: Phase, categories: tuple[str, ...] | None = None) -> float:
    assert phase.log is not None
    return round(phase.log.total(categories) / phase.campaign.recipients, 4)


def units_per_recipient(phase: Phase, categories: tuple[str, ...]) -> dict[str, float]:
    assert phase.log is not None
    units = phase.log.units(lambda table, key: phase.sizes.get((table, key)))
    write = sum(units.get(c, {}).get("write", 0.0) for c in categories)
    read = sum(units.get(c, {}).get("read", 0.0) for c in categories)
    n = phase.campaign.recipients
    return {"write": round(write / n, 4), "read": round(read / n, 4)}


def ledger_item_bytes(phase: Phase, ledger_table: str) -> dict[str, int]:
    sizes = sorted(s for (table, _), s in phase.sizes.items() if table == ledger_table)
    if not sizes:
        return {}
    return {"p50": int(statistics.median(sizes)), "max": sizes[-1]}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


# --- cold start ---------------------------------------------------------------------

_COLD_START = """
import json, os, time
t0 = time.perf_counter()
import sendonce.handlers.consumer
t1 = time.perf_counter()
from sendonce.settings import ConsumerSettings
from sendonce.wiring import consumer_runtime
consumer_runtime(ConsumerSettings.from_env(os.environ))
t2 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1000, "build_ms": (t2 - t1) * 1000}))
"""


def cold_start(stack: LocalStack, runs: int, *, detail: bool) -> dict[str, Any]:
    """A fresh interpreter importing the handler module (Lambda's init phase) and building
    the runtime (what the first invocation adds: clients, the Resend key from Secrets
    Manager, SES GetAccount for the limiter), against this run's moto.

    Twice: with no bytecode cache, as deployed (the bundle ships no .pyc and /var/task is
    read-only, so every cold start compiles every module it imports), and with a warm
    bytecode cache (a bundle compiled for the runtime's Python). Medians of `runs`."""
    import tempfile

    resources = stack.fresh_resources()
    base_env = {
        **os.environ,
        **stack.consumer_env(resources, rate=14),
        "PYTHONPATH": _pythonpath(),
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    base_env.pop("PYTHONPYCACHEPREFIX", None)

    def spawn(args: list[str], env: dict[str, str]) -> tuple[float, str, str]:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=180, check=True)
        return (time.perf_counter() - started) * 1000, done.stdout, done.stderr

    figures: dict[str, list[float]] = {
        k: []
        for k in (
            "interpreter_startup_ms",
            "import_ms_no_bytecode",
            "runtime_build_ms_no_bytecode",
            "import_ms",
            "runtime_build_ms",
            "importtime_cumulative_ms",
        )
    }
    by_package: dict[str, list[float]] = {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-pycache-") as cache:
            env = {**base_env, "PYTHONPYCACHEPREFIX": cache, "PYTHONDONTWRITEBYTECODE": ""}
            figures["interpreter_startup_ms"].append(spawn(["-c", "pass"], env)[0])
            cold = json.loads(spawn(["-c", _COLD_START], env)[1].strip().splitlines()[-1])  # compiles, fills the cache
            warm = json.loads(spawn(["-c", _COLD_START], env)[1].strip().splitlines()[-1])
            figures["import_ms_no_bytecode"].append(cold["import_ms"])
            figures["runtime_build_ms_no_bytecode"].append(cold["build_ms"])
            figures["import_ms"].append(warm["import_ms"])
            figures["runtime_build_ms"].append(warm["build_ms"])
            if detail:
                err = spawn(["-X", "importtime", "-c", "import sendonce.handlers.consumer"], env)[2]
                lines = [line for line in err.splitlines() if line.rstrip().endswith("| sendonce.handlers.consumer")]
                if lines:
                    figures["importtime_cumulative_ms"].append(int(lines[-1].split("|")[1]) / 1000)
        if detail:
            with tempfile.TemporaryDirectory(prefix="bench-pycache-") as cache:
                env = {**base_env, "PYTHONPYCACHEPREFIX": cache, "PYTHONDONTWRITEBYTECODE": ""}
                err = spawn(["-X", "importtime", "-c", "import sendonce.handlers.consumer"], env)[2]
                for package, ms in importtime_by_package(err).items():
                    by_package.setdefault(package, []).append(ms)
    out: dict[str, Any] = {k: round(statistics.median(v), 1) if v else None for k, v in figures.items()}
    ranked = sorted(by_package.items(), key=lambda kv: -statistics.median(kv[1]))
    if ranked:
        out["importtime_no_bytecode_by_package_ms"] = {k: round(statistics.median(v), 1) for k, v in ranked[:10]}
    out["runs"] = runs
    return out


def importtime_by_package(stderr: str) -> dict[str, float]:
    """Import time spent in each top-level package's own modules (-X importtime's "self"
    column summed by the first part of the module name; compiling counts as the module's)."""
    totals: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        self_us, _, name = (part.strip() for part in line.removeprefix("import time:").split("|", 2))
        top = name.split(".")[0]
        totals[top] = totals.get(top, 0.0) + int(self_us) / 1000
    return totals


# --- machine ------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    memory_gb = None
    with contextlib.suppress(OSError):
        text = Path("/proc/meminfo").read_text()
        match = re.search(r"MemTotal:\s+(\d+) kB", text)
        if match:
            memory_gb = round(int(match.group(1)) / 1024 / 1024, 1)
    versions = {}
    for package in ("moto", "boto3", "botocore", "aws-lambda-powertools", "resend", "pydantic"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[package] = metadata.version(package)
    return {
        "nproc": os.cpu_count(),
        "memory_gb": memory_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "versions": versions,
    }


# --- the whole run ------------------------------------------------------------------


def run_benchmark(
    config: BenchConfig = QUICK,
    *,
    moto_endpoint: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    began = time.monotonic()
    # The consumer's per-message INFO line is what Lambda would log; here it is noise.
    with patched_environ({"POWERTOOLS_LOG_LEVEL": "WARNING"}), LocalStack(config, moto_endpoint=moto_endpoint) as stack:
        result = _run(stack, config, progress)
    result["elapsed_s"] = round(time.monotonic() - began, 1)
    return result


def _run(stack: LocalStack, config: BenchConfig, progress: Callable[[str], None]) -> dict[str, Any]:
    n, latency = config.recipients, config.mean_latency_s
    phases: dict[str, Any] = {}

    progress("cold start")
    cold = cold_start(stack, config.cold_start_runs, detail=config.cold_start_detail)

    # One message at a time, one invocation: the incident's unit of work.
    progress("one message at a time")
    size = config.message_size
    sequential_s = size * latency
    message: dict[str, Phase] = {}
    samples = config.message_samples * size
    for label, mode in (("single", "single"), ("batch_mode", "batch"), ("baseline", "single")):
        campaign = stack.publish(f"msg-{label[:5]}", samples, mode=mode)
        if label == "baseline":
            phase = run_baseline(stack, f"message_{label}", campaign, rate=None, pollers=1)
        else:
            phase = run_sendonce(stack, f"message_{label}", campaign, rate=None, pollers=1)
        phase.check_each_once()
        message[label] = phase
        phases[f"message_{label}"] = {
            **phase.summary(),
            "median_message_s": round(statistics.median(phase.handler_seconds), 3),
        }
    message_s = {k: statistics.median(p.handler_seconds) for k, p in message.items()}

    # Unthrottled: the provider answers as fast as its latency allows.
    progress("unthrottled")
    base_free = run_baseline(stack, "baseline_unthrottled", stack.publish("base-free", n), rate=None)
    base_free.check_each_once()
    fresh = run_sendonce(stack, "sendonce_unthrottled", stack.publish("fresh", n), rate=None)
    fresh.check_each_once()
    phases["baseline_unthrottled"] = base_free.summary()
    phases["sendonce_unthrottled"] = fresh.summary()
    with_limiter = None
    if config.limiter_unthrottled:
        with_limiter = run_sendonce(stack, "sendonce_unthrottled_limiter", stack.publish("free-lim", n), rate=1000)
        with_limiter.check_each_once()
        phases["sendonce_unthrottled_limiter_1000"] = with_limiter.summary()

    progress("duplicates")
    stack.redeliver(fresh.campaign)
    duplicate = run_sendonce(stack, "duplicate", fresh.campaign, rate=None)
    if duplicate.sent:
        raise BenchError(f"duplicate phase: {duplicate.sent} email(s) sent again")
    phases["duplicate_redelivery"] = duplicate.summary()

    progress("batch mode")
    batch = run_sendonce(stack, "batch_mode", stack.publish("batch", n, mode="batch"), rate=None)
    batch.check_each_once()
    phases["batch_mode_unthrottled"] = batch.summary()
    stack.redeliver(batch.campaign)
    batch_duplicate = run_sendonce(stack, "batch_mode_duplicate", batch.campaign, rate=None)
    if batch_duplicate.sent:
        raise BenchError(f"batch-mode duplicate phase: {batch_duplicate.sent} email(s) sent again")
    phases["batch_mode_duplicate_redelivery"] = batch_duplicate.summary()

    progress("ses")
    ses = run_sendonce(stack, "ses", stack.publish("ses", config.ses_recipients, provider="ses"), rate=None)
    phases["ses_single"] = ses.summary()

    # A rate the local stack can sustain: part of what sendonce reached unthrottled in
    # this run (with the limiter on when measured), capped by the configured rate.
    reference = with_limiter or fresh
    sustainable = reference.sent / reference.wall_s
    rate = float(
        min(config.rate_per_second, max(config.min_rate_per_second, math.floor(sustainable * config.rate_headroom)))
    )
    per_run = max(config.pollers * size, round(rate * config.rate_limited_seconds / size) * size)

    # At the provider's limit: sendonce's shared limiter set to the rate; the baseline paced
    # on the same schedule by an in-process pacer that costs nothing.
    progress(f"at {rate:g}/s, {per_run} recipients per run")
    order = (["baseline", "sendonce", "sendonce", "baseline"] * config.pairs)[: 2 * config.pairs]
    limited: dict[str, list[Phase]] = {"baseline": [], "sendonce": []}
    for i, which in enumerate(order):
        campaign = stack.publish(f"lim-{which[:4]}-{i}", per_run)
        if which == "baseline":
            phase = run_baseline(stack, f"baseline_at_rate_{i}", campaign, rate=rate)
        else:
            phase = run_sendonce(stack, f"sendonce_at_rate_{i}", campaign, rate=rate)
        phase.check_each_once()
        limited[which].append(phase)
    phases["baseline_at_rate"] = [p.summary() for p in limited["baseline"]]
    phases["sendonce_at_rate"] = [
        {
            **p.summary(),
            "steady_emails_per_s": round(steady_rate(p.accepted_times) or 0, 2),
            "busiest_second": busiest_second(p.accepted_times),
        }
        for p in limited["sendonce"]
    ]
    achieved = statistics.median([steady_rate(p.accepted_times) or 0.0 for p in limited["sendonce"]])
    pair_ratios = [s.wall_s / b.wall_s for s, b in zip(limited["sendonce"], limited["baseline"], strict=True)]
    span_ratios = [
        accept_span(s) / accept_span(b) for s, b in zip(limited["sendonce"], limited["baseline"], strict=True)
    ]

    enforced = None
    if config.provider_enforced_rate:
        progress(f"at {rate:g}/s, provider enforcing it")
        campaign = stack.publish("enforced", per_run)
        stack.resend.set_rate_limit(int(rate))
        try:
            # The consumer's default reserve (one request/s of the limit unused) and header learning
            phase = run_sendonce(
                stack,
                "sendonce_provider_enforced",
                campaign,
                rate=rate,
                env=stack.consumer_env(campaign.resources, rate=rate, SENDONCE_RESEND_RATE_RESERVE=1),
            )
            phase.check_each_once()
            stats = stack.resend.stats()
        finally:
            stack.resend.set_rate_limit(None)
        steady = steady_rate(phase.accepted_times) or 0.0
        enforced = {
            **phase.summary(),
            "steady_emails_per_s": round(steady, 2),
            "rate_ratio": _ratio(steady, rate),
            "provider_429s": stats["errors"].get("rate_limit_exceeded", 0),
        }
        phases["sendonce_provider_enforced"] = enforced

    # Resend's default team (5 requests per sliding second, the local server's default) and
    # the consumer's default settings: no 429 expected. Then the same team against the old
    # defaults (10/s, the limit not learned from the headers): the 429s it draws.
    default_team = default_team_phases(stack, config, progress)
    phases.update(default_team.pop("phases"))

    # What the unthrottled ratio would be if each ledger request took `assumed` instead of
    # what moto took: each of the send_concurrency workers runs ceil(100 / concurrency)
    # recipients one after another, each with 2 ledger requests on its path (a model).
    assumed_ms = 5.0
    moto_ms = (message["single"].log.mean_seconds((LEDGER,)) or 0.0) * 1000 if message["single"].log else 0.0
    rounds = math.ceil(size / config.send_concurrency)
    projected_s = message_s["single"] - rounds * 2 * max(0.0, moto_ms - assumed_ms) / 1000

    ledger_table = fresh.campaign.resources.ledger_table
    setup_ms = baseline_client_setup_ms()
    result: dict[str, Any] = {
        "benchmark": "sendonce",
        "mode": config.name,
        # achieved / configured send rate over the steady part of the run (goal >= 0.95)
        "rate_ratio": _ratio(achieved, rate),
        "rate_configured_per_s": rate,
        "rate_achieved_per_s": round(achieved, 2),
        "rate_busiest_second": max(busiest_second(p.accepted_times) for p in limited["sendonce"]),
        "rate_calibration": {
            "unthrottled_emails_per_s": round(sustainable, 2),
            "headroom": config.rate_headroom,
            "cap_per_s": config.rate_per_second,
            "recipients_per_run": per_run,
        },
        # sendonce wall time / no-ledger baseline wall time, same campaign size, latency,
        # concurrency and pollers (goal <= 1.05): at the provider's rate, and unthrottled
        "ledger_overhead_ratio": round(statistics.median(pair_ratios), 3),
        "ledger_overhead_ratio_pairs": [round(r, 3) for r in pair_ratios],
        # the same from the first to the last email accepted: leaves out each side's start-up
        # (the baseline builds its boto3 clients in every invocation, sendonce once)
        "ledger_overhead_ratio_accept_span": round(statistics.median(span_ratios), 3),
        "ledger_overhead_ratio_unthrottled": _ratio(fresh.wall_s, base_free.wall_s),
        "ledger_overhead_ratio_unthrottled_accept_span": _ratio(accept_span(fresh), accept_span(base_free)),
        "ledger_overhead_ratio_unthrottled_with_limiter": _ratio(with_limiter.wall_s, base_free.wall_s)
        if with_limiter
        else None,
        "ledger_overhead_ratio_one_message": _ratio(message_s["single"], message_s["baseline"]),
        "ledger_overhead_projection": {
            "model": "one message, ledger requests at an assumed DynamoDB latency instead of moto's",
            "moto_ledger_request_ms": round(moto_ms, 2),
            "assumed_dynamodb_request_ms": assumed_ms,
            "ratio": _ratio(projected_s, message_s["baseline"]),
        },
        "batch_mode_vs_baseline_unthrottled_ratio": _ratio(batch.wall_s, base_free.wall_s),
        "baseline_client_setup_ms_per_invocation": setup_ms,
        # DynamoDB requests the ledger adds per recipient (ledger table + send groups)
        "ddb_requests_per_recipient": per_recipient(fresh, LEDGER_SHARE),
        "ddb_requests_per_recipient_ses": per_recipient(ses, LEDGER_SHARE),
        "ddb_requests_per_duplicate": per_recipient(duplicate, LEDGER_SHARE),
        "ddb_requests_per_recipient_batch_mode": per_recipient(batch, LEDGER_SHARE),
        "ddb_requests_per_duplicate_batch_mode": per_recipient(batch_duplicate, LEDGER_SHARE),
        # everything the consumer asked of DynamoDB, per recipient, by purpose
        "ddb_requests_per_recipient_by_purpose": {
            "single_fresh": _by_purpose(fresh),
            "single_fresh_with_limiter_at_rate": _by_purpose(limited["sendonce"][0]),
            "single_duplicate": _by_purpose(duplicate),
            "batch_mode_fresh": _by_purpose(batch),
            "batch_mode_duplicate": _by_purpose(batch_duplicate),
            "ses_fresh": _by_purpose(ses),
        },
        "write_units_per_recipient": units_per_recipient(fresh, LEDGER_SHARE)["write"],
        "write_units_per_recipient_ses": units_per_recipient(ses, LEDGER_SHARE)["write"],
        "write_units_per_duplicate": units_per_recipient(duplicate, LEDGER_SHARE)["write"],
        "write_units_per_recipient_batch_mode": units_per_recipient(batch, LEDGER_SHARE)["write"],
        "read_units_per_recipient_batch_mode": units_per_recipient(batch, LEDGER_SHARE)["read"],
        "capacity_units_per_recipient_all_purposes": {
            "single_fresh_at_rate": units_per_recipient(
                limited["sendonce"][0], (LEDGER, SEND_GROUP, CAMPAIGN_READ, LIMITER, SUPPRESSIONS)
            ),
            "batch_mode_fresh": units_per_recipient(batch, (LEDGER, SEND_GROUP, CAMPAIGN_READ, LIMITER, SUPPRESSIONS)),
            "ses_fresh": units_per_recipient(ses, (LEDGER, SEND_GROUP, CAMPAIGN_READ, LIMITER, SUPPRESSIONS)),
        },
        "ledger_item_bytes": ledger_item_bytes(fresh, ledger_table),
        "ledger_item_bytes_ses": ledger_item_bytes(ses, ses.campaign.resources.ledger_table),
        "ledger_item_bytes_batch_mode": ledger_item_bytes(batch, batch.campaign.resources.ledger_table),
        "send_group_item_bytes": _record_bytes(batch, batch.campaign.resources.campaigns_table, "group#"),
        "batch_record_item_bytes": _record_bytes(fresh, fresh.campaign.resources.campaigns_table, "batch#"),
        "limiter_requests_per_send_at_rate": round(
            statistics.median([p.log.total((LIMITER,)) / p.campaign.recipients for p in limited["sendonce"] if p.log]),
            3,
        ),
        "limiter_requests_per_send_unthrottled": round(with_limiter.log.total((LIMITER,)) / n, 3)
        if with_limiter and with_limiter.log
        else None,
        "ddb_mean_request_ms_unthrottled": round((fresh.log.mean_seconds() or 0) * 1000, 2) if fresh.log else None,
        # one message / (its recipients x mean provider latency): the incident's
        # sequential path against ours
        "batch_vs_sequential_ratio": _ratio(message_s["single"], sequential_s),
        "batch_vs_sequential_ratio_batch_mode": _ratio(message_s["batch_mode"], sequential_s),
        "batch_vs_sequential_ratio_baseline": _ratio(message_s["baseline"], sequential_s),
        "message_seconds": {k: round(v, 3) for k, v in message_s.items()},
        "sequential_message_seconds": round(sequential_s, 3),
        "cold_start_import_ms": cold["import_ms_no_bytecode"],
        "cold_start": cold,
        "provider_enforced_rate_ratio": enforced["rate_ratio"] if enforced else None,
        **default_team,
        "moto_dynamodb_patch": stack.moto_patched,
        "config": {
            **dataclasses.asdict(config),
            "latency_ms": list(config.latency_ms),
            "mean_latency_ms": round(latency * 1000, 1),
        },
        "machine": machine(),
        "phases": phases,
    }
    result["goals"] = goals(result)
    return result


DEFAULT_TEAM_LIMIT = 5  # Resend's documented default; the local server's default team limit


def default_team_phases(stack: LocalStack, config: BenchConfig, progress: Callable[[str], None]) -> dict[str, Any]:
    n = config.default_team_recipients
    out: dict[str, Any] = {"phases": {}}
    for label, overrides in (
        ("default_team", {}),
        (
            "default_team_old_defaults",
            {
                "SENDONCE_RESEND_REQUESTS_PER_SECOND": "10",
                "SENDONCE_RESEND_RATE_FROM_HEADERS": "false",
                "SENDONCE_RESEND_RATE_RESERVE": "0",
            },
        ),
    ):
        progress(f"{label}: Resend team limit {DEFAULT_TEAM_LIMIT}/s, {n} recipients")
        campaign = stack.publish(label.replace("_", "-")[:18], n)
        stack.resend.set_rate_limit(DEFAULT_TEAM_LIMIT)
        try:
            phase = run_sendonce(
                stack, label, campaign, rate=None, env=stack.default_consumer_env(campaign.resources, **overrides)
            )
            phase.check_each_once()
            errors = stack.resend.stats()["errors"]
        finally:
            stack.resend.set_rate_limit(None)
        steady = steady_rate(phase.accepted_times) or 0.0
        out["phases"][label] = {
            **phase.summary(),
            "steady_emails_per_s": round(steady, 2),
            "busiest_second": busiest_second(phase.accepted_times),
            "provider_429s": errors.get("rate_limit_exceeded", 0),
        }
        out[f"{label}_429s"] = errors.get("rate_limit_exceeded", 0)
        # achieved over the middle of the run / the team's limit
        out[f"{label}_rate_ratio"] = _ratio(steady, DEFAULT_TEAM_LIMIT)
    return out


def baseline_client_setup_ms(samples: int = 3) -> float:
    """What the baseline pays per invocation and sendonce once per environment: a boto3
    session and its DynamoDB and SES clients."""
    from sendonce.adapters.providers.ses.sender import SEND_CLIENT_CONFIG

    times = []
    for _ in range(samples):
        started = time.perf_counter()
        session = boto3.session.Session()
        session.client("dynamodb")
        session.client("sesv2", config=SEND_CLIENT_CONFIG)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1)


def _by_purpose(phase: Phase) -> dict[str, float]:
    assert phase.log is not None
    n = phase.campaign.recipients
    out = {category: round(count / n, 4) for category, count in phase.log.counts().items()}
    out["total"] = round(phase.log.total() / n, 4)
    return out


def _record_bytes(phase: Phase, campaigns_table: str, prefix: str) -> int | None:
    """The largest campaigns-table item of a kind: send groups and batch records hold a
    whole message's recipients."""
    sizes = [s for (table, (_, sk)), s in phase.sizes.items() if table == campaigns_table and sk.startswith(prefix)]
    return max(sizes) if sizes else None


def goals(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    def goal(value: float | None, target: str, met: Callable[[float], bool]) -> dict[str, Any]:
        return {"value": value, "goal": target, "met": bool(value is not None and met(value))}

    return {
        "rate_ratio": goal(result["rate_ratio"], ">= 0.95", lambda v: v >= 0.95),
        "ledger_overhead_ratio": goal(result["ledger_overhead_ratio"], "<= 1.05", lambda v: v <= 1.05),
        "ledger_overhead_ratio_unthrottled": goal(
            result["ledger_overhead_ratio_unthrottled"], "<= 1.05", lambda v: v <= 1.05
        ),
        "default_team_429s": goal(result.get("default_team_429s"), "== 0", lambda v: v == 0),
    }
