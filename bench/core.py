"""The benchmark's run: campaigns through the local stack, measured side by side.

The stack is moto's server (its own process), the local Resend server (its own process,
with the incident's latency model: 50-200 ms per call, uniform) and the real consumer
handler behind the local event-source poller, one poller per simulated Lambda execution
environment, each with its own runtime. The no-ledger baseline
(`sendonce_local.demo.baseline`) runs through the same poller, queue, campaign store, provider
and send concurrency.

Nothing here asserts a time: every figure is a ratio of two things measured in the same
run on the same machine, or a count. `run_benchmark(config)` returns one JSON-ready dict.

The pieces live in modules of their own: config.py (`BenchConfig`, `QUICK`, `FULL`,
`BenchError`), stack.py (`LocalStack`, `ResendProcess`, `PublishedCampaign`, the
environment helpers), phases.py (the consumers, `Phase`, `drain`, `run_sendonce`,
`run_baseline`), figures.py (rates, requests and units per recipient, `goals`) and
cold_start.py (`cold_start`, `machine`). Every name this module held before the split is
still importable from `bench.core` (re-exported here, listed in `__all__`), so
`from bench.core import LocalStack, drain, ...` keeps working.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
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
from bench.cold_start import _COLD_START, cold_start, importtime_by_package, machine
from bench.config import FULL, QUICK, RECIPIENTS_PER_MESSAGE, BenchConfig, BenchError
from bench.figures import (
    _by_purpose,
    _ratio,
    _record_bytes,
    accept_span,
    busiest_second,
    goals,
    ledger_item_bytes,
    per_recipient,
    steady_rate,
    units_per_recipient,
)
from bench.phases import (
    PacedHttpClient,
    Phase,
    TimedHandler,
    baseline_environment,
    baseline_handlers,
    drain,
    run_baseline,
    run_sendonce,
    sendonce_handlers,
)
from bench.stack import (
    LOCAL_RESEND_KEY,
    ROOT,
    LocalStack,
    PublishedCampaign,
    ResendProcess,
    _pythonpath,
    patched_environ,
    removed_from_environ,
)
from sendonce_local.moto_server import MotoServer

__all__ = [
    # config.py
    "FULL",
    "QUICK",
    "RECIPIENTS_PER_MESSAGE",
    "BenchConfig",
    "BenchError",
    # stack.py
    "LOCAL_RESEND_KEY",
    "ROOT",
    "LocalStack",
    "PublishedCampaign",
    "ResendProcess",
    "patched_environ",
    "removed_from_environ",
    # phases.py
    "PacedHttpClient",
    "Phase",
    "TimedHandler",
    "baseline_environment",
    "baseline_handlers",
    "drain",
    "run_baseline",
    "run_sendonce",
    "sendonce_handlers",
    # figures.py
    "accept_span",
    "busiest_second",
    "goals",
    "ledger_item_bytes",
    "per_recipient",
    "steady_rate",
    "units_per_recipient",
    # cold_start.py
    "cold_start",
    "importtime_by_package",
    "machine",
    # bench.capacity and sendonce_local, importable from here before the split
    "CAMPAIGN_READ",
    "LEDGER",
    "LEDGER_SHARE",
    "LIMITER",
    "SEND_GROUP",
    "SUPPRESSIONS",
    "DynamoDBRequestLog",
    "MotoServer",
    "item_size",
    # this module
    "DEFAULT_TEAM_LIMIT",
    "baseline_client_setup_ms",
    "default_team_phases",
    "run_benchmark",
]
# The private helpers the bench reached here for before the split stay reachable too.
_REEXPORTED_PRIVATE = (_COLD_START, _pythonpath)


def run_benchmark(
    config: BenchConfig = QUICK,
    *,
    moto_endpoint: str | None = None,
    speed_patches: bool = False,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    began = time.monotonic()
    # The consumer's per-message INFO line is what Lambda would log; here it is noise.
    stack = LocalStack(config, moto_endpoint=moto_endpoint, speed_patches=speed_patches)
    with patched_environ({"POWERTOOLS_LOG_LEVEL": "WARNING"}), stack:
        result = _run(stack, config, progress)
    result["elapsed_s"] = round(time.monotonic() - began, 1)
    return result


def _all_but_the_last(phase: Phase) -> list[float]:
    """A one-poller phase's invocation times in the order handled, without the last message's
    (the one that checks the campaign's completion)."""
    return phase.handler_seconds[:-1] or phase.handler_seconds


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
    # One message more than the samples: a campaign's last message also checks completion (for
    # these uncounted campaigns a full read of the ledger, 256 shard Queries: seconds on moto,
    # once per campaign), which is not the unit of work measured; its time is left out.
    samples = (config.message_samples + 1) * size
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
            "median_message_s": round(statistics.median(_all_but_the_last(phase)), 3),
            "last_message_s": round(phase.handler_seconds[-1], 3),
        }
    message_s = {k: statistics.median(_all_but_the_last(p)) for k, p in message.items()}

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
        "moto_speed_patches": stack.moto_speed_patched,
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

    # The same team and default settings in batch mode, one message at a time: a message is
    # one provider request where the one-by-one path (above) makes one a recipient, so at the
    # team's limit it takes `size / steady` seconds for the same recipients.
    size = config.message_size
    progress(f"default_team_batch_mode: Resend team limit {DEFAULT_TEAM_LIMIT}/s, {2 * size} recipients")
    campaign = stack.publish("default-team-batch", 2 * size, mode="batch")
    stack.resend.set_rate_limit(DEFAULT_TEAM_LIMIT)
    try:
        phase = run_sendonce(
            stack,
            "default_team_batch_mode",
            campaign,
            rate=None,
            pollers=1,
            env=stack.default_consumer_env(campaign.resources),
        )
        phase.check_each_once()
        errors = stack.resend.stats()["errors"]
    finally:
        stack.resend.set_rate_limit(None)
    batch_message_s = statistics.median(_all_but_the_last(phase))
    steady = out["phases"]["default_team"]["steady_emails_per_s"]
    one_by_one_s = size / steady if steady else None
    out["phases"]["default_team_batch_mode"] = {
        **phase.summary(),
        "median_message_s": round(batch_message_s, 3),
        "provider_429s": errors.get("rate_limit_exceeded", 0),
    }
    out["default_team_batch_message_s"] = round(batch_message_s, 3)
    out["default_team_one_by_one_s_per_message"] = round(one_by_one_s, 3) if one_by_one_s else None
    # a batch-mode message / the one-by-one path's time for the same recipients, at the team's limit
    out["default_team_batch_vs_one_by_one_ratio"] = _ratio(batch_message_s, one_by_one_s or 0.0)
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
