"""`python -m sendonce_local.resend_server`: the local Resend API as a process."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from sendonce_local.resend_server.engagement import EngagementRule, parse_engagement
from sendonce_local.resend_server.server import LocalResendServer
from sendonce_local.resend_server.wire import (
    DEFAULT_TEAM_RATE_LIMIT,
)


def _latency_arg(value: str) -> tuple[float, float]:
    low, _, high = value.partition(":")
    try:
        bounds = (float(low), float(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError("expected MIN:MAX or N milliseconds") from None
    if bounds[0] < 0 or bounds[1] < bounds[0]:
        raise argparse.ArgumentTypeError("need 0 <= MIN <= MAX")
    return bounds


def _engagement_arg(value: str) -> tuple[EngagementRule, ...]:
    try:
        return parse_engagement(json.loads(value))
    except ValueError as error:  # json.JSONDecodeError is one
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sendonce_local.resend_server",
        description="Run the local Resend API on loopback; prints its URL once listening.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--rate-limit",
        type=int,
        default=DEFAULT_TEAM_RATE_LIMIT,
        metavar="RPS",
        help=f"the team's limit, requests per sliding second (default {DEFAULT_TEAM_RATE_LIMIT},"
        " Resend's default; 0: off)",
    )
    parser.add_argument("--latency-ms", type=_latency_arg, default=None, metavar="MIN:MAX")
    parser.add_argument("--daily-quota", type=int, default=None, metavar="EMAILS")
    parser.add_argument("--api-key", default=None, help="the only accepted key (default: any key starting re_)")
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    parser.add_argument("--webhook-url", default=None, help="send Svix-signed webhooks for accepted emails here")
    parser.add_argument("--webhook-secret", default=None, help="whsec_... signing secret (default: a new one, printed)")
    parser.add_argument(
        "--webhook-out-of-order", action="store_true", help="deliver each email's webhooks newest first"
    )
    parser.add_argument("--webhook-copies", type=int, default=1, metavar="N", help="deliver every webhook N times")
    parser.add_argument(
        "--engagement",
        type=_engagement_arg,
        default=None,
        metavar="JSON",
        help='opens and clicks per subject: [{"subject_contains": "*", "opens": 0.3, "clicks": 0.1, "reopens": 0}]',
    )
    args = parser.parse_args(argv)

    server = LocalResendServer(
        args.host,
        args.port,
        api_key=args.api_key,
        rate_limit=args.rate_limit or None,
        latency_ms=args.latency_ms,
        daily_quota=args.daily_quota,
        verbose=args.verbose,
        webhook_url=args.webhook_url,
        webhook_secret=args.webhook_secret,
        webhook_out_of_order=args.webhook_out_of_order,
        webhook_copies=args.webhook_copies,
        engagement=args.engagement,
    ).start()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(server.url, flush=True)
    if args.webhook_url and not args.webhook_secret:
        print(f"webhook signing secret: {server.webhook_secret}", file=sys.stderr, flush=True)
    while not stop.wait(0.2):
        pass
    server.stop()
    return 0
