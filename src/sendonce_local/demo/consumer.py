"""The deployed consumer handler for `sendonce demo`, counting the AWS requests it makes.

The local poller calls `lambda_handler`; it runs the handler the stack's function names
(SENDONCE_DEMO_HANDLER, e.g. `sendonce.handlers.consumer.lambda_handler`) with a runtime
built by `sendonce.wiring.consumer` from the function's environment — the same adapters as in
Lambda — whose boto3 session carries a RequestCounter. After each invocation the counts
go to the file named by SENDONCE_DEMO_COUNTS, which the demo sums over its consumers, and
the invocation's duration is appended to SENDONCE_DEMO_TIMINGS (one JSON line each; the
runtime build by `init`, the poller's init phase, as a line of its own): the demo's
calibration reads them to size its time scale.

SENDONCE_DEMO_AWS_LATENCY_MS (inherited from the demo's environment) adds that much to
each AWS request of these consumers: moto as slow as on a loaded machine, on demand.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import boto3

from sendonce.settings import ConsumerSettings
from sendonce.wiring.clients import Clients
from sendonce.wiring.consumer import ConsumerRuntime, build_consumer_parts, build_consumer_runtime
from sendonce_local.request_counter import RequestCounter

HANDLER_ENV = "SENDONCE_DEMO_HANDLER"
COUNTS_ENV = "SENDONCE_DEMO_COUNTS"
TIMINGS_ENV = "SENDONCE_DEMO_TIMINGS"
LATENCY_ENV = "SENDONCE_DEMO_AWS_LATENCY_MS"


@lru_cache(maxsize=1)
def _consumer() -> tuple[Any, ConsumerRuntime, RequestCounter]:
    """One per process, as one Lambda execution environment builds its runtime once."""
    module_name, _, function_name = os.environ[HANDLER_ENV].rpartition(".")
    handler = getattr(importlib.import_module(module_name), function_name)
    session = boto3.session.Session()
    counter = RequestCounter(session)  # before any client exists: they inherit it
    latency_s = float(os.environ.get(LATENCY_ENV) or 0) / 1000
    if latency_s > 0:
        session.events.register("before-call", lambda **_: time.sleep(latency_s))
    settings = ConsumerSettings.from_env(os.environ)
    return handler, build_consumer_runtime(settings, build_consumer_parts(settings, Clients(session))), counter


def init() -> None:
    """The runtime built before the first invocation, as Lambda's init phase does, outside
    the function timeout (`python -m sendonce_local.poller --init`)."""
    started = time.monotonic()
    _consumer()
    _append_timing({"init_s": time.monotonic() - started})


def lambda_handler(event: dict[str, Any], context: Any) -> dict:
    handler, runtime, counter = _consumer()
    started = time.monotonic()
    try:
        return handler(event, context, runtime=runtime)
    finally:
        _append_timing({"handler_s": time.monotonic() - started, "messages": len(event.get("Records", []))})
        _write_counts(counter)


def _append_timing(timing: dict[str, float]) -> None:
    path = os.environ.get(TIMINGS_ENV)
    if path:
        with open(path, "a") as timings:
            timings.write(json.dumps(timing) + "\n")


def _write_counts(counter: RequestCounter) -> None:
    path = os.environ.get(COUNTS_ENV)
    if not path:
        return
    target = Path(path)
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(dict(counter.calls)))
    os.replace(partial, target)  # the demo never reads a half-written file


def read_counts(path: Path) -> dict[str, int]:
    """What one consumer process last wrote ({} if it never finished an invocation)."""
    try:
        return {k: int(v) for k, v in json.loads(path.read_text()).items()}
    except (FileNotFoundError, ValueError):
        return {}


def read_timings(path: Path) -> list[dict[str, float]]:
    """What one consumer process appended (a line cut short by a SIGKILL is skipped)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    timings = []
    for line in lines:
        try:
            timings.append({k: float(v) for k, v in json.loads(line).items()})
        except (ValueError, AttributeError):
            continue
    return timings
