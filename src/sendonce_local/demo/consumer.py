"""The deployed consumer handler for `sendonce demo`, counting the AWS requests it makes.

The local poller calls `lambda_handler`; it runs the handler the stack's function names
(SENDONCE_DEMO_HANDLER, e.g. `sendonce.handlers.consumer.lambda_handler`) with a runtime
assembled by `sendonce.wiring` from the function's environment — the same adapters as in
Lambda — whose boto3 session carries a RequestCounter. After each invocation the counts
go to the file named by SENDONCE_DEMO_COUNTS, which the demo sums over its consumers.
"""

from __future__ import annotations

import importlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import boto3

from sendonce.settings import ConsumerSettings
from sendonce.wiring import ConsumerRuntime, assemble_consumer, consumer_parts
from sendonce_local.request_counter import RequestCounter

HANDLER_ENV = "SENDONCE_DEMO_HANDLER"
COUNTS_ENV = "SENDONCE_DEMO_COUNTS"


@lru_cache(maxsize=1)
def _consumer() -> tuple[Any, ConsumerRuntime, RequestCounter]:
    """One per process, as one Lambda execution environment builds its runtime once."""
    module_name, _, function_name = os.environ[HANDLER_ENV].rpartition(".")
    handler = getattr(importlib.import_module(module_name), function_name)
    session = boto3.session.Session()
    counter = RequestCounter(session)  # before any client exists: they inherit it
    settings = ConsumerSettings.from_env(os.environ)
    return handler, assemble_consumer(settings, consumer_parts(settings, session)), counter


def lambda_handler(event: dict[str, Any], context: Any) -> dict:
    handler, runtime, counter = _consumer()
    try:
        return handler(event, context, runtime=runtime)
    finally:
        _write_counts(counter)


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
