"""`make bench-scale`: one campaign per size, in the deployed configuration, every DynamoDB
write accounted per partition-key value.

    python -m bench.scale [--sizes 1000,10000,100000] [--streams 4] [--out bench-scale.json]

The CDK stack is deployed into moto's server (`sendonce_local.demo.stack.deploy_stack`);
every function runs with the environment it was deployed with: the operator API (behind a
local HTTP API) takes the publisher client's requests, `--streams` of them in flight; the
consumer runs in batch mode against the local Resend server with the suppression list and
the shared limiter on, one runtime per concurrent execution (the event source mapping's
MaximumConcurrency); Resend's webhooks reach the events function; the counters' aggregator
consumes both tables' streams. They run in this process (moto and the Resend server in
processes of their own) so that one `WriteUnitAccountant` sees every DynamoDB client of
the run.

First (unless `--no-per-message`), one batch-mode message against the one-by-one path at
Resend's default team limit, one consumer each (bench/scale_messages.py). Then per campaign:
published (consumers stopped), then sent and completed; per phase the
recipients per second, DynamoDB requests and write units per recipient, and per table the
hottest partition-key value's write units per recipient (with the ceiling it sets at 1,000
write units/s) and the most write units it took in one second; then one status read from
the counters and one full read (requests, bytes, seconds); duplicates and missing counted
at the provider (emails accepted per recipient address; every campaign has addresses of
its own). A size is run only while the previous one took under `--next-under-minutes`
(default 10); the ones left out are extrapolated from the last measured rates, with the
reason. Progress goes to stderr; stdout holds the JSON, also written to `--out`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.core import machine
from bench.run import stdout_to_devnull
from bench.scale_figures import extrapolate, status_ratio
from bench.scale_messages import run_message_times
from bench.scale_stack import (
    DEFAULT_SIZES,
    WEBHOOKS_PER_EMAIL,
    ScaleConfig,
    ScaleStack,
    bench_campaign,
    recipients_of,
)
from bench.scale_writers import campaign_writers, fit
from sendonce.domain.models import CampaignState
from sendonce_client.streams import DEFAULT_STREAMS


def run_campaign(stack: ScaleStack, size: int, say: Callable[[str], None]) -> dict[str, Any]:
    campaign_id = f"scale{size}"
    # The campaign's creation is counted with its publish (a fixed write of the operator API).
    stack.reset_phase()
    stack.operator.create(bench_campaign(campaign_id, f"bench-scale {size:,}", tracking=stack.config.tracking))
    accepted_before = stack.resend.stats()["emails_accepted"]
    webhooks_before = stack.webhook_count()
    with_events = stack.config.events_up_to is None or size <= stack.config.events_up_to
    stack.events_on(with_events)
    expected_webhooks = stack.webhooks_per_email * size if with_events else 0
    result: dict[str, Any] = {"recipients": size, "campaign_id": campaign_id, "provider_events": with_events}
    if not with_events:
        result["provider_events_off_because"] = (
            f"over --events-up-to {stack.config.events_up_to:,}: the events function takes ~25 webhooks/s here, "
            f"{WEBHOOKS_PER_EMAIL * size:,} webhooks would take "
            f"{WEBHOOKS_PER_EMAIL * size / 25 / 3600:.1f} h"
        )

    # Published, with no consumer running: the publish's own writes.
    say(f"{size:,}: publishing in {stack.config.streams} streams")
    started = time.monotonic()
    summary = stack.client.publish(campaign_id, recipients_of(campaign_id, size), streams=stack.config.streams)
    result["publish"] = {
        **stack.phase_figures(size, time.monotonic() - started, campaign_id),
        "requests": summary.requests,
        "batches": summary.batches_new,
    }
    say(f"{size:,}: published in {result['publish']['seconds']} s; sending")

    # Sent and completed: consumers, provider events and the aggregator.
    stack.reset_phase()
    started = time.monotonic()
    stack.start_consumers()
    deadline = started + stack.config.phase_timeout_s
    sent_at = completed_at = None
    last_note = webhooks_changed = started
    webhooks = 0
    while time.monotonic() < deadline:
        time.sleep(2)
        now = time.monotonic()
        accepted = stack.resend.stats()["emails_accepted"] - accepted_before
        if sent_at is None and accepted >= size:
            sent_at = now
        if completed_at is None and stack.operator.get(campaign_id).state is CampaignState.COMPLETED:
            completed_at = now
        if stack.webhook_count() - webhooks_before != webhooks:
            webhooks, webhooks_changed = stack.webhook_count() - webhooks_before, now
        # Done once every email is accepted, the campaign completed and its webhooks are in
        # (or none came for a minute, or the wait for them ran out: the count is reported).
        if sent_at and completed_at:
            done_at = max(sent_at, completed_at)
            if (
                webhooks >= expected_webhooks
                or now - webhooks_changed > 60
                or now - done_at > stack.config.webhook_wait_s
            ):
                break
        if time.monotonic() - last_note > 60:
            last_note = time.monotonic()
            say(f"{size:,}: {accepted:,} accepted, {webhooks:,} webhooks, {time.monotonic() - started:.0f} s")
    stack.stop_consumers()
    stack.drain_aggregator(say, f"{size:,}")
    ended = time.monotonic()
    send_s = (sent_at or ended) - started
    result["send"] = {
        **stack.phase_figures(size, send_s, campaign_id),
        "completed": completed_at is not None,
        "completed_after_s": round(completed_at - started, 1) if completed_at else None,
        "with_events_and_aggregator_s": round(ended - started, 1),
        "webhooks": stack.webhook_count() - webhooks_before,
        "webhooks_expected": expected_webhooks,
    }
    result["writers"] = campaign_writers(result["publish"], result["send"], size, result["send"]["webhooks"])
    result["duplicates"], result["missing"] = stack.duplicates_and_missing(campaign_id, size)
    result["state"] = stack.operator.get(campaign_id).state.value
    result["status"] = stack.status_figures(campaign_id)
    result["elapsed_s"] = round(result["publish"]["seconds"] + (ended - started), 1)
    say(
        f"{size:,}: sent in {send_s:.0f} s ({result['send']['recipients_per_s']}/s), "
        f"{result['state']}, duplicates {result['duplicates']}, missing {result['missing']}"
    )
    return result


def run_scale(
    config: ScaleConfig,
    say: Callable[[str], None],
    on_campaign: Callable[[list[dict[str, Any]]], None] | None = None,
) -> dict[str, Any]:
    """`on_campaign` gets the campaigns measured so far after each one (a long run's
    figures survive an interrupted one)."""
    started = time.monotonic()
    started_at = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    stack = ScaleStack(config, say).start()
    measured: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    per_message: dict[str, Any] | None = None
    try:
        if config.per_message:
            per_message = run_message_times(stack, say)
        for size in config.sizes:
            if measured and measured[-1]["elapsed_s"] > config.next_under_minutes * 60:
                previous = measured[-1]
                skipped.append(
                    {
                        **extrapolate(measured, size),
                        "reason": f"{previous['recipients']:,} recipients took {previous['elapsed_s'] / 60:.1f} min "
                        f"(the next size runs only under {config.next_under_minutes:g} min)",
                    }
                )
                continue
            measured.append(run_campaign(stack, size, say))
            if on_campaign:
                on_campaign(measured)
    finally:
        stack.stop()
    extrapolated = [
        extrapolate(measured, size) for size in (100_000, 1_000_000) if measured and size > max(config.sizes)
    ]
    return {
        "campaigns": measured,
        "skipped": skipped,
        "extrapolated": extrapolated,
        "status_bytes_ratio": status_ratio(measured),
        # Per writer: fixed per campaign and per recipient, from the smallest and the largest size.
        "writers_fit": fit([c["writers"] for c in measured]),
        "per_message": per_message,
        "config": {
            "sizes": list(config.sizes),
            "provider": bench_campaign("scale", "bench-scale").provider,
            "delivery_mode": bench_campaign("scale", "bench-scale").delivery_mode,
            "streams": config.streams,
            "consumers": stack.consumer_count,
            "consumer_batch_size": stack.deployed.batch_size,
            "resend_requests_per_second": stack.deployed.environment.get("SENDONCE_RESEND_REQUESTS_PER_SECOND"),
            "deploy_s": round(stack.deploy_s, 1),
        },
        "machine": machine(),
        "started_at": started_at,
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES), help="recipients per campaign")
    parser.add_argument("--streams", type=int, default=DEFAULT_STREAMS, help="publish requests in flight")
    parser.add_argument("--consumers", type=int, default=None, help="default: the mapping's MaximumConcurrency")
    parser.add_argument("--next-under-minutes", type=float, default=10.0)
    parser.add_argument(
        "--webhook-wait", type=float, default=600.0, help="seconds to wait for the rest of a campaign's webhooks"
    )
    parser.add_argument(
        "--events-up-to",
        type=int,
        default=None,
        help="campaigns larger than this run without provider events (default: all with events)",
    )
    parser.add_argument(
        "--capture-stream", type=Path, default=None, help="write the aggregator's stream records here (JSON lines)"
    )
    parser.add_argument(
        "--no-per-message",
        dest="per_message",
        action="store_false",
        help="leave out the batch-mode message against the one-by-one path (bench/scale_messages.py)",
    )
    parser.add_argument(
        "--tracking",
        action="store_true",
        help="campaigns track opens and clicks, and the local Resend server opens and clicks every email",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-scale.json"))
    args = parser.parse_args(argv)
    try:
        sizes = tuple(int(s.replace("_", "")) for s in args.sizes.split(","))
    except ValueError:
        parser.error(f"--sizes: comma-separated recipient counts, not {args.sizes!r}")
    if any(s < 1 for s in sizes):
        parser.error("--sizes: each size must be at least 1")
    config = ScaleConfig(
        sizes=sizes,
        streams=args.streams,
        consumers=args.consumers,
        next_under_minutes=args.next_under_minutes,
        webhook_wait_s=args.webhook_wait,
        events_up_to=args.events_up_to,
        capture_stream=args.capture_stream,
        per_message=args.per_message,
        tracking=args.tracking,
    )

    def say(message: str) -> None:
        print(f"[bench-scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def partial(measured: list[dict[str, Any]]) -> None:
        args.out.write_text(json.dumps({"partial": True, "campaigns": measured}, indent=2) + "\n")

    with stdout_to_devnull():  # the functions' log lines and metrics, which Lambda sends to CloudWatch
        result = run_scale(config, say, partial)
    result["command"] = " ".join(["python -m bench.scale", *(sys.argv[1:] if argv is None else argv)])
    text = json.dumps(result, indent=2)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
