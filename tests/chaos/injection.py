"""Client-side fault injection for the chaos tests: chosen calls of a boto3 session's clients
fail before they are sent, as if the service had answered with an error and botocore's
retries had run out."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable

import boto3
from botocore.exceptions import ClientError

from sendonce.handlers import consumer
from sendonce.settings import ConsumerSettings
from sendonce.wiring.clients import Clients
from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime

# Per operation, which of its calls fail: their numbers (1-based), or a predicate on the number.
ChosenCalls = dict[str, set[int] | Callable[[int], bool]]


class FailingCalls:
    """Fails calls number `calls[operation]` (1-based, counted per operation) of `service`
    with `code`, or those a predicate picks (called with the call's number, under a lock):
    a fault tied to what happened before it, not to how many calls a loaded machine made
    first. Register it before the session's clients exist: they inherit it."""

    def __init__(self, session: boto3.session.Session, service: str,
                 calls: ChosenCalls, *, code: str, message: str,
                 status: int = 400) -> None:  # fmt: skip
        self._calls = calls
        self._error = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
        self._seen: Counter = Counter()
        self._lock = threading.Lock()
        self.raised: Counter = Counter()
        for operation in calls:
            session.events.register(f"before-call.{service}.{operation}", self._maybe_fail)

    def _maybe_fail(self, model, **_):
        with self._lock:
            self._seen[model.name] += 1
            chosen = self._calls[model.name]
            number = self._seen[model.name]
            if not (chosen(number) if callable(chosen) else number in chosen):
                return None
            self.raised[model.name] += 1
        raise ClientError(self._error, model.name)


def ledger_throttle(session: boto3.session.Session, calls: ChosenCalls) -> FailingCalls:
    return FailingCalls(
        session, "dynamodb", calls, code="ProvisionedThroughputExceededException",
        message="The level of configured provisioned throughput for the table was exceeded.",
    )  # fmt: skip


def consumer_on(system, session: boto3.session.Session, **env: str):
    """The real handler with a runtime built on `session` (and `env` over the system's settings)."""
    settings = ConsumerSettings.from_env({**system.env, **env})
    runtime = build_consumer_runtime(settings, build_consumer_parts(settings, Clients(session)))
    return functools.partial(consumer.lambda_handler, runtime=runtime)
