"""Run a campaign through the local stack and print sendonce's figures side by side.

    python -m bench.run --quick [--json]     # about a minute; `make bench`
    python -m bench.run [--json]             # the full run, several minutes

(from the checkout's root, with sendonce installed: `make venv`).

Every figure is a ratio of two things measured in this one run on this machine, or a
count (docs/benchmarks.md explains each and what it is compared with). Progress goes to
stderr; the consumer's own output is discarded, so stdout holds only the report.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Iterator

from bench.core import FULL, QUICK, BenchConfig, run_benchmark


@contextlib.contextmanager
def stdout_to_devnull() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null meanwhile: the consumer's log lines and
    Powertools' metrics, which Lambda would send to CloudWatch."""
    sys.stdout.flush()
    real = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(real, 1)
        os.close(real)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def text_report(result: dict) -> str:
    goals = result["goals"]
    mark = lambda name: "met" if goals[name]["met"] else "MISSED"  # noqa: E731
    cold = result["cold_start"]
    msg = result["message_seconds"]
    config = result["config"]
    projection = result["ledger_overhead_projection"]
    lines = [
        f"sendonce benchmark ({result['mode']}): {result['machine']['nproc']} cores, Python {result['machine']['python']},"
        f" moto {result['machine']['versions'].get('moto')}"
        f"{' with the demo speed patches' if result.get('moto_speed_patches') else ''}; provider latency {config['latency_ms'][0]:g}-"
        f"{config['latency_ms'][1]:g} ms; send concurrency {config['send_concurrency']}, {config['pollers']} pollers",
        "",
        f"send rate, shared limiter at {_fmt(result['rate_configured_per_s'])}/s"
        f" (calibrated: {result['rate_calibration']['unthrottled_emails_per_s']}/s unthrottled x {config['rate_headroom']})",
        f"  achieved / configured          {_fmt(result['rate_ratio']):>6}   goal >= 0.95: {mark('rate_ratio')}"
        f"   ({_fmt(result['rate_achieved_per_s'])}/s; busiest sliding second {result['rate_busiest_second']})",
    ]
    if result.get("provider_enforced_rate_ratio") is not None:
        lines.append(f"  ... with the provider enforcing it {_fmt(result['provider_enforced_rate_ratio'])}")
    if result.get("default_team_429s") is not None:
        lines += [
            f"Resend's default team (5 requests per sliding second), {config['default_team_recipients']} recipients",
            f"  default settings: 429s         {result['default_team_429s']:>6}   goal 0:"
            f" {'met' if result['default_team_429s'] == 0 else 'MISSED'}   (achieved / team limit"
            f" {_fmt(result['default_team_rate_ratio'])}; limit learned from the headers, 1 request/s in reserve)",
            f"  old defaults (10/s, not learned): 429s {result['default_team_old_defaults_429s']:>3}"
            f"   (achieved / team limit {_fmt(result['default_team_old_defaults_rate_ratio'])})",
            f"  batch mode, one {config['message_size']}-recipient message / the one-by-one path's time for it"
            f" {_fmt(result.get('default_team_batch_vs_one_by_one_ratio')):>6}   goal <= 0.125:"
            f" {mark('default_team_batch_vs_one_by_one_ratio')}   ({_fmt(result.get('default_team_batch_message_s'))} s"
            f" against {_fmt(result.get('default_team_one_by_one_s_per_message'))} s)",
        ]
    lines += [
        "wall time, sendonce / no-ledger baseline (same campaign, latency, concurrency, pollers)",
        f"  at the provider's rate         {_fmt(result['ledger_overhead_ratio']):>6}   goal <= 1.05:"
        f" {mark('ledger_overhead_ratio')}   (pairs {result['ledger_overhead_ratio_pairs']}; first to last"
        f" acceptance {_fmt(result['ledger_overhead_ratio_accept_span'])})",
        f"  unthrottled, limiter off       {_fmt(result['ledger_overhead_ratio_unthrottled']):>6}   goal <= 1.05:"
        f" {mark('ledger_overhead_ratio_unthrottled')}   (moto: {_fmt(result['ddb_mean_request_ms_unthrottled'])} ms"
        " per DynamoDB request)",
        f"  unthrottled, limiter on        {_fmt(result['ledger_overhead_ratio_unthrottled_with_limiter']):>6}",
        f"  one message alone              {_fmt(result['ledger_overhead_ratio_one_message']):>6}"
        f"   (model at {projection['assumed_dynamodb_request_ms']:g} ms per request instead of moto's"
        f" {projection['moto_ledger_request_ms']:g}: {_fmt(projection['ratio'])})",
        f"  batch mode, unthrottled        {_fmt(result['batch_mode_vs_baseline_unthrottled_ratio']):>6}",
        "DynamoDB per recipient, ledger + send groups      requests   write units",
        f"  Resend single, fresh                       {_fmt(result['ddb_requests_per_recipient']):>9}"
        f"   {_fmt(result['write_units_per_recipient']):>11}",
        f"  SES single, fresh                          {_fmt(result['ddb_requests_per_recipient_ses']):>9}"
        f"   {_fmt(result['write_units_per_recipient_ses']):>11}",
        f"  duplicate hit (message redelivered)        {_fmt(result['ddb_requests_per_duplicate']):>9}"
        f"   {_fmt(result['write_units_per_duplicate']):>11}",
        f"  batch mode, fresh                          {_fmt(result['ddb_requests_per_recipient_batch_mode']):>9}"
        f"   {_fmt(result['write_units_per_recipient_batch_mode']):>11}",
        f"  batch mode, duplicate                      {_fmt(result['ddb_requests_per_duplicate_batch_mode']):>9}",
        f"  + limiter at the binding rate              "
        f"{_fmt(result['ddb_requests_per_recipient_by_purpose']['single_fresh_with_limiter_at_rate'].get('limiter')):>9}",
        f"  ledger item {result['ledger_item_bytes']} B, send-group item {result['send_group_item_bytes']} B",
        f"one {config['message_size']}-recipient message / ({config['message_size']} x {config['mean_latency_ms']:g} ms = {_fmt(result['sequential_message_seconds'])} s)",
        f"  single mode, concurrency {config['send_concurrency']}       {_fmt(result['batch_vs_sequential_ratio']):>6}"
        f"   ({_fmt(msg['single'])} s)",
        f"  batch mode                     {_fmt(result['batch_vs_sequential_ratio_batch_mode']):>6}   ({_fmt(msg['batch_mode'])} s)",
        f"  no-ledger baseline             {_fmt(result['batch_vs_sequential_ratio_baseline']):>6}   ({_fmt(msg['baseline'])} s)",
        f"cold start: import {_fmt(cold['import_ms_no_bytecode'])} ms without bytecode (as bundled),"
        f" {_fmt(cold['import_ms'])} ms with; runtime build {_fmt(cold['runtime_build_ms_no_bytecode'])} /"
        f" {_fmt(cold['runtime_build_ms'])} ms; interpreter {_fmt(cold['interpreter_startup_ms'])} ms",
        f"elapsed {result['elapsed_s']} s",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the small run (under 2 minutes); `make bench`")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--rate", type=float, default=None, help="emails/s for the shared limiter (default: per mode)")
    parser.add_argument("--recipients", type=int, default=None, help="recipients per unthrottled/batch phase")
    parser.add_argument(
        "--speed-patched-moto",
        action="store_true",
        help="moto with the demo's speed patches (stock moto spends ~40 ms of CPU per transaction item)",
    )
    args = parser.parse_args(argv)

    config: BenchConfig = QUICK if args.quick else FULL
    overrides = {}
    if args.rate:
        overrides["rate_per_second"] = args.rate
    if args.recipients:
        overrides["recipients"] = args.recipients
    if overrides:
        config = dataclasses.replace(config, **overrides)

    # Stopped with SIGTERM, unwind like Ctrl-C so moto and the Resend server are stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[bench {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    with stdout_to_devnull():
        result = run_benchmark(config, speed_patches=args.speed_patched_moto, progress=progress)
    output = json.dumps(result, indent=2) if args.json else text_report(result)
    os.write(1, (output + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
