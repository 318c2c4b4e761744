"""The poller as a process (``python -m sendonce_local.poller``), so chaos tests can kill a real
consumer: its command line, signals (SIGTERM/SIGINT finish the invocations in progress),
exit codes and the counters it prints last."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from sendonce_local.poller.event_source import EventSourcePoller
from sendonce_local.poller.lambda_event import Handler

logger = logging.getLogger(__name__)


def import_handler(path: str) -> Handler:
    """``package.module:function`` -> the function."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"handler must look like module:function, got {path!r}")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{path} is not callable")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sendonce_local.poller",
        description="Poll an SQS queue and invoke a handler like Lambda's event source mapping.",
        epilog="Exit codes: 0 idle, stopped by SIGTERM/SIGINT or --max-seconds reached without --idle-seconds; "
        "3 --max-seconds reached before the queue went idle.",
    )
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--handler", required=True, help="module:function, called as handler(event, context)")
    parser.add_argument(
        "--init", default=None, help="module:function, called once before polling (Lambda's init phase)"
    )
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=60.0, help="function timeout in seconds")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--function-name", default="sendonce-consumer")
    parser.add_argument("--visibility-timeout", type=int, default=None)
    parser.add_argument("--idle-seconds", type=float, default=None, help="exit once the queue is idle this long")
    parser.add_argument("--max-seconds", type=float, default=None, help="exit after this long at most")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(threadName)s %(message)s")
    import boto3  # imported here so the module stays importable in handler-only test environments

    if args.init:
        import_handler(args.init)()
    poller = EventSourcePoller(
        sqs_client=boto3.client("sqs"),
        queue_url=args.queue_url,
        handler=import_handler(args.handler),
        function_name=args.function_name,
        batch_size=args.batch_size,
        function_timeout_s=args.timeout,
        max_concurrency=args.concurrency,
        visibility_timeout_s=args.visibility_timeout,
    )
    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: finishing invocations in progress", signum)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    deadline = time.monotonic() + args.max_seconds if args.max_seconds is not None else float("inf")
    exit_code = 0
    poller.start()
    try:
        if args.idle_seconds is not None:
            idle = poller._wait_until_idle(args.idle_seconds, deadline, interrupted=stop_requested)
            if not idle and not stop_requested.is_set():
                exit_code = 3
        else:
            while not stop_requested.is_set() and time.monotonic() < deadline:
                stop_requested.wait(min(1.0, max(0.0, deadline - time.monotonic())))
    finally:
        counters = poller.stop()
        print(json.dumps({**counters.as_dict(), "exit_code": exit_code}), flush=True)
    return exit_code
