"""One phase of a benchmark: a campaign drained by sendonce's consumer or by the no-ledger
baseline (`sendonce_local.demo.baseline`), through the same poller, queue, campaign store,
provider and send concurrency; what each invocation took and what the provider accepted."""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3

from bench.capacity import (
    DynamoDBRequestLog,
)
from bench.config import BenchError
from bench.stack import LOCAL_RESEND_KEY, LocalStack, PublishedCampaign, patched_environ


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
    from sendonce.wiring.clients import Clients
    from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime

    settings = ConsumerSettings.from_env(env or stack.consumer_env(resources, rate=rate))
    handlers = []
    for _ in range(count):
        # Clients of its own, as each execution environment builds them.
        runtime = build_consumer_runtime(settings, build_consumer_parts(settings, Clients(session)))
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
