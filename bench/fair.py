"""`make bench-fair`: campaigns sharing one queue and one provider rate (issue 31).

    python -m bench.fair [--large 2000] [--small 200] [--smalls 3] [--consumers default]
        [--noisy-large N] [--orders large-first,large-last] [--share-large 200] [--share-small 50]
        [--share-consumers 6] [--weighted 200] [--no-priority] [--groups 2000] [--google-cap 20]
        [--max-minutes 13] [--out bench-fair.json]

The stack as bench-scale deploys it (bench/scale_stack.py): the CDK app in moto's server,
whose campaign queue is a fair queue (each batch carries its campaign as MessageGroupId; the
moto patch `sqs_fairness` receives quiet tenants' messages first once one is noisy, by its
messages in flight or its share of the consumers' processing time); the shared
limiter, which divides the rate among the campaigns sending (weights, priority); the local
Resend server holding the team to Resend's default 5 requests/s; provider events off. A
round creates its campaigns, publishes them one after another with no consumer running, then
starts the consumers. A campaign's time runs from the start of its own publish to the last
of its emails the Resend server accepted (each record's `accepted_at`: the same machine's
clock).

- small behind large: a large campaign alone (T_alone), then a large one and right after it a
  small one: small_time / large_time (issue 31's goal: <= 1/3; queue order gives ~1). At each
  of `--consumers`, and with `--noisy-large` recipients at the most consumers.
- the rounds of shares run in single mode (one email a request: the rate binds, not the
  consumers) at `--share-consumers` (one consumer a message: every campaign holds one).
- equal shares: one `--share-large` and `--smalls` `--share-small` campaigns, published in
  each of `--orders`; while all of them had work queued (from the consumers' start to the
  first campaign's last email), each campaign's share of the emails accepted, its rate, and
  Jain's index of the rates (goal: >= 0.9).
- weights 2:1: two campaigns of `--weighted` recipients, weights 2 and 1, the heavier first:
  their shares while both sent (goal: 2:1 within 10 %).
- priority: two normal campaigns of `--share-large`, then a `priority: high` one of `--share-small`
  published last: which campaign's last email came first (goal: the high one's).

- caps per mailbox group (bench/fair_groups.py, first): the stack deployed with a Google cap,
  one batch-mode campaign of `--groups` recipients, 60 % Google: Google's busiest second at
  the Resend server against `--google-cap` (goal: within 10 %), the others meanwhile.

Every campaign's duplicates and missing (counted at the provider) and whether it completed.
A round starts only while the run is under `--max-minutes`, and every wait has a timeout.
Progress goes to stderr; stdout gets a table (bench/fair_table.py); the figures go to
`--out` (JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import fair_forecast, fair_groups
from bench.core import machine
from bench.fair_measure import Timeline, accepted_by_campaign, in_flight, limiter_units, shares
from bench.fair_measure import ratio as ratio_of
from bench.fair_table import behind_line, table
from bench.run import stdout_to_devnull
from bench.scale_stack import ScaleConfig, ScaleStack, bench_campaign, recipients_of
from sendonce.domain.models import CampaignState
from sendonce.settings import ConsumerSettings
from sendonce.wiring.clients import Clients
from sendonce.wiring.operator import build_sending_now
from sendonce.wiring.providers import configured_paces
from sendonce_client.streams import DEFAULT_STREAMS
from sendonce_local.resend_server import DEFAULT_TEAM_RATE_LIMIT

BATCH_RECIPIENTS = 100  # the publisher's batch: one queue message
GOAL = 1 / 3  # issue 31: a small campaign behind a large one done in <= 1/3 of the large one's time
NOISY_IN_FLIGHT = 30  # sendonce_local.moto_patches.sqs_fairness, after AWS's description
ORDERS = ("large-first", "large-second", "large-last")
WEIGHTED_GOAL, WEIGHTED_TOLERANCE = 2.0, 0.10  # issue 31: weights 2:1 give shares within 10 % of 2:1
JAIN_GOAL = 0.9  # issue 31: equal weights, Jain's index of the shares while all were sending

Say = Callable[[str], None]


@dataclass(frozen=True)
class FairConfig:
    large: int = 2_000
    small: int = 200
    smalls: int = 3
    consumers: tuple[int | None, ...] = (None,)  # None: the mapping's MaximumConcurrency
    noisy_large: int | None = None
    orders: tuple[str, ...] = ("large-first", "large-last")
    # The rounds of shares (equal, 2:1, priority) measure the limiter's division: one email a
    # request (single mode), so that the rate binds, not the consumers (batch mode sends 100 a
    # request, and here 2,000 took 18 s at 5 requests/s: the consumers' own pace); and one
    # consumer per message, so that every campaign holds one (a fair queue does not hand a
    # consumer to each tenant: with fewer consumers than campaigns, see the rounds above).
    share_large: int = 200
    share_small: int = 50
    share_consumers: int = 6
    weighted: int = 200  # each campaign of the weights 2:1 round: two full messages each (0: none)
    priority: bool = True  # the round of a high-priority campaign published last
    # The round of caps per mailbox group (bench/fair_groups.py): its recipients (0: none).
    groups: int = 2_000
    google_cap: float = 20.0
    streams: int = DEFAULT_STREAMS
    team_limit: int = DEFAULT_TEAM_RATE_LIMIT
    send_timeout_s: float = 300.0  # from the consumers' start to the round's last email
    complete_timeout_s: float = 180.0  # then until every campaign of the round completed
    max_minutes: float = 13.0


class FairBench:
    """Rounds on one ScaleStack; campaign ids are numbered across the run."""

    def __init__(self, stack: ScaleStack, config: FairConfig, say: Say):
        self.stack = stack
        self.config = config
        self.say = say
        self.started = time.monotonic()
        self.rounds = 0
        # The operator's view of the shared limiter: the rate it paces at (the learned limit).
        self.sending_now = build_sending_now(
            stack.deployed.campaigns_table,
            Clients(stack.session),
            campaigns=stack.operator,
            paces=configured_paces(ConsumerSettings.from_env(stack.deployed.environment)),
        )

    def over_budget(self) -> str | None:
        minutes = (time.monotonic() - self.started) / 60
        if minutes < self.config.max_minutes:
            return None
        return (
            f"the run had taken {minutes:.1f} min (rounds start only under --max-minutes {self.config.max_minutes:g})"
        )

    def run_round(
        self,
        label: str,
        sizes: Sequence[tuple[str, int]],
        consumers: int | None,
        specs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> tuple[dict[str, Any], Timeline]:
        """Publish `sizes` ((role, recipients), in that order), then send them with
        `consumers` runtimes; per campaign its times, counts and state, and when each of
        its emails was accepted. `specs`: a role's share fields (weight, priority, max_rate)."""
        stack, config = self.stack, self.config
        self.rounds += 1
        campaigns = [(f"f{self.rounds}-{role}", role, size) for role, size in sizes]
        count = consumers or stack.consumer_count
        for campaign_id, role, _ in campaigns:
            campaign = bench_campaign(campaign_id, f"bench-fair {label} ({role})")
            stack.operator.create(campaign.model_copy(update=dict((specs or {}).get(role, {}))))
        # The consumers' runtimes, built before the publish so that all start at once: built one
        # by one beside the first ones' sends, forty took 15-40 s here (Lambda builds in parallel).
        built_at = time.time()
        runtimes = [stack.consumer_runtime() for _ in range(count)]
        build_s = time.time() - built_at
        accepted_before = stack.resend.stats()["emails_accepted"]
        published: dict[str, tuple[float, float]] = {}
        for campaign_id, _, size in campaigns:
            started = time.time()
            summary = stack.client.publish(campaign_id, recipients_of(campaign_id, size), streams=config.streams)
            published[campaign_id] = (started, time.time())
            if summary.batches_new != math.ceil(size / BATCH_RECIPIENTS):
                raise RuntimeError(f"{campaign_id}: {summary.batches_new} batches published for {size} recipients")
        total = sum(size for _, _, size in campaigns)
        self.say(f"{label}: {len(campaigns)} campaigns published ({total:,} recipients); {count} consumers")

        # The forecast of each campaign, the others of the round sharing (rounds of shares only).
        forecasts: dict[str, float | None] = {}
        if specs and all(spec.get("delivery_mode") == "single" for spec in specs.values()):
            forecasts = fair_forecast.forecast_s(
                [stack.operator.get(c) for c, _, _ in campaigns],
                {c: size for c, _, size in campaigns},
                rate=self.sending_now.rate_in_force("resend") or float(config.team_limit),
                batch_size=self.sending_now.batch_size("resend"),
            )
        stack.accountant.reset()  # from here: the sends' writes (the limiter's among them)
        consumers_at = time.time()
        stack.start_consumers(runtimes=runtimes)
        sqs = stack.session.client("sqs")
        peak_in_flight = accepted = 0
        try:
            deadline = time.monotonic() + config.send_timeout_s
            while accepted < total and time.monotonic() < deadline:
                time.sleep(0.5)
                peak_in_flight = max(peak_in_flight, in_flight(sqs, stack.deployed.queue_url))
                accepted = stack.resend.stats()["emails_accepted"] - accepted_before
            sent_s = time.time() - consumers_at
            waiting = {c for c, _, _ in campaigns}
            deadline = time.monotonic() + config.complete_timeout_s
            while waiting and time.monotonic() < deadline:
                waiting = {c for c in waiting if stack.operator.get(c).state is not CampaignState.COMPLETED}
                if waiting:
                    time.sleep(1)
            completed_s = time.time() - consumers_at
        finally:
            stack.stop_consumers()
        self.say(
            f"{label}: {accepted:,} of {total:,} accepted in {sent_s:.0f} s, "
            + ("all completed" if not waiting else f"not completed: {sorted(waiting)}")
            + f" after {completed_s:.0f} s"
        )

        limiter = limiter_units(stack)
        emails = accepted_by_campaign(stack.resend.url)
        figures: dict[str, Any] = {}
        for campaign_id, role, size in campaigns:
            spec = (specs or {}).get(role, {})
            publish_at, published_at = published[campaign_id]
            times = sorted(emails.get(campaign_id, []))
            duplicates, missing = stack.duplicates_and_missing(campaign_id, size)
            figures[role] = {
                "campaign_id": campaign_id,
                "recipients": size,
                "batches": math.ceil(size / BATCH_RECIPIENTS),
                "publish_s": round(published_at - publish_at, 2),
                # From the start of its own publish to its last email accepted: the time asked about.
                "time_s": round(times[-1] - publish_at, 2) if times else None,
                # From the consumers' start (every campaign of the round queued by then): its first
                # email (how long it waited behind the others) and its last.
                "first_email_s": round(times[0] - consumers_at, 2) if times else None,
                "last_email_s": round(times[-1] - consumers_at, 2) if times else None,
                "emails_accepted": len(times),
                "duplicates": duplicates,
                "missing": missing,
                "completed": campaign_id not in waiting,
                "weight": spec.get("weight", 1),
                "priority": spec.get("priority", "normal"),
                # `campaign forecast`'s ETA from the consumers' start, against last_email_s.
                "forecast_s": None if forecasts.get(campaign_id) is None else round(forecasts[campaign_id] or 0, 1),
                "forecast_error": fair_forecast.error(
                    forecasts.get(campaign_id), round(times[-1] - consumers_at, 2) if times else None
                ),
            }
        stack.drain_aggregator(self.say, label)
        # A clean provider for the next round: its records read, its team limit set again.
        stack.resend.reset()
        stack.set_team_limit(config.team_limit)
        stack.events_on(False)
        round_ = {
            "label": label,
            "consumers": count,
            "publish_order": [role for _, role, _ in campaigns],
            # Sampled every 0.5 s (ApproximateNumberOfMessagesNotVisible): all campaigns together.
            "peak_in_flight": peak_in_flight,
            # The shared limiter's key (its slot items): write units (refused writes too) per
            # recipient of the round, against the scale rule's 0.1.
            "limiter_key": limiter[0],
            "limiter_write_units_per_recipient": round(limiter[1] / total, 4),
            "limiter_writes": limiter[2],
            "consumers_built_s": round(build_s, 1),
            "sent_s": round(sent_s, 1),
            "completed_s": round(completed_s, 1),
            "campaigns": figures,
        }
        return round_, Timeline(consumers_at, {role: emails.get(c, []) for c, role, _ in campaigns})

    # --- scenarios -----------------------------------------------------------------------

    def small_behind_large(self, consumers: int | None, large: int) -> dict[str, Any]:
        small = self.config.small
        count = consumers or self.stack.consumer_count
        alone, _ = self.run_round(f"{large:,} alone, {count} consumers", [("large", large)], consumers)
        together, _ = self.run_round(
            f"{large:,} then {small:,}, {count} consumers", [("large", large), ("small", small)], consumers
        )
        t_alone = alone["campaigns"]["large"]["time_s"]
        large_fig, small_fig = together["campaigns"]["large"], together["campaigns"]["small"]
        ratio = ratio_of(small_fig["time_s"], large_fig["time_s"])
        return {
            "consumers": count,
            "large": large,
            "small": small,
            # A tenant is noisy with >= 30 of its own messages in flight: never when a campaign has
            # fewer batches, or fewer consumers run.
            "noisy_reachable": min(count, math.ceil(large / BATCH_RECIPIENTS)) >= NOISY_IN_FLIGHT,
            "t_alone_s": t_alone,
            "large_time_s": large_fig["time_s"],
            "small_time_s": small_fig["time_s"],
            "small_over_large": ratio,
            "small_over_t_alone": ratio_of(small_fig["time_s"], t_alone),
            "goal": round(GOAL, 3),
            "met": ratio is not None and ratio <= GOAL,
            # How much of the small campaign's time was spent before its first email: queued
            # behind the large campaign's batches (and its own publish: small beside them).
            "small_waited_s": small_fig["first_email_s"],
            "small_waited_share": ratio_of(small_fig["first_email_s"], small_fig["time_s"]),
            "rounds": {"alone": alone, "together": together},
        }

    def equal_shares(self, order: str, consumers: int | None) -> dict[str, Any]:
        config = self.config
        roles = [(f"small{n + 1}", config.share_small) for n in range(config.smalls)]
        position = {"large-first": 0, "large-second": 1, "large-last": len(roles)}[order]
        roles.insert(position, ("large", config.share_large))
        count = consumers or self.stack.consumer_count
        round_, timeline = self.run_round(
            f"equal shares, {order}, {count} consumers", roles, consumers, specs=_single(r for r, _ in roles)
        )
        return {"order": order, **shares(timeline), "round": round_}

    def weighted(self, consumers: int | None) -> dict[str, Any]:
        """Two campaigns of `--weighted` recipients, weights 2 and 1, the heavier published
        first: their shares while both sent (goal: 2:1 within 10 %)."""
        size = self.config.weighted
        count = consumers or self.stack.consumer_count
        round_, timeline = self.run_round(
            f"weights 2:1, {count} consumers",
            [("heavy", size), ("light", size)],
            consumers,
            specs=_single(("heavy", "light"), heavy={"weight": 2}),
        )
        figures = shares(timeline)
        heavy, light = figures["shares"].get("heavy"), figures["shares"].get("light")
        ratio = round(heavy / light, 2) if heavy and light else None
        met = ratio is not None and abs(ratio - WEIGHTED_GOAL) <= WEIGHTED_GOAL * WEIGHTED_TOLERANCE
        return {"ratio": ratio, "goal": WEIGHTED_GOAL, "met": met, **figures, "round": round_}

    def priority(self, consumers: int | None) -> dict[str, Any]:
        """Two normal campaigns of `--large` recipients, then one `priority: high` of
        `--small` published last: it must be sent first (its last email before theirs)."""
        config = self.config
        count = consumers or self.stack.consumer_count
        round_, timeline = self.run_round(
            f"priority high last, {count} consumers",
            [("normal1", config.share_large), ("normal2", config.share_large), ("urgent", config.share_small)],
            consumers,
            specs=_single(("normal1", "normal2", "urgent"), urgent={"priority": "high"}),
        )
        last = {role: max(times) for role, times in timeline.emails.items() if times}
        first_done = min(last, key=last.__getitem__) if last else None
        return {"first_done": first_done, "met": first_done == "urgent", **shares(timeline), "round": round_}


def _single(roles: Iterable[str], **fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The rounds of shares' specs: single mode (the rate binds), and a role's own fields."""
    return {role: {"delivery_mode": "single", **fields.get(role, {})} for role in roles}


def run_fair(config: FairConfig, say: Say) -> dict[str, Any]:
    started = time.monotonic()
    groups = fair_groups.GroupsConfig(recipients=config.groups, google_cap=config.google_cap)
    stack_config = ScaleConfig(
        sizes=(),
        streams=config.streams,
        events_up_to=0,
        webhook_wait_s=config.complete_timeout_s,
        per_message=False,
        context=groups.context if config.groups else (),
    )
    stack = ScaleStack(stack_config, say).start()
    bench = FairBench(stack, config, say)
    stack.set_team_limit(config.team_limit)
    stack.events_on(False)
    say(f"team limit {config.team_limit} requests/s at the Resend server; provider events off")
    behind: list[dict[str, Any]] = []
    equal: list[dict[str, Any]] = []
    weighted: list[dict[str, Any]] = []
    urgent: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    settings = [(c, config.large) for c in config.consumers]
    if config.noisy_large is not None:
        most = max(config.consumers, key=lambda c: c or stack.consumer_count)
        settings.append((most, config.noisy_large))
    caps: dict[str, Any] | None = None
    try:
        if config.groups:
            # Its Google cap binds no other round: their recipients are all of other domains.
            caps = fair_groups.run_groups(stack, groups, say)
            say(f"caps per mailbox group: {fair_groups.line(caps)}")
        for consumers, large in settings:
            if reason := bench.over_budget():
                skipped.append(
                    {"scenario": "small behind large", "consumers": consumers, "large": large, "reason": reason}
                )
                continue
            behind.append(bench.small_behind_large(consumers, large))
            say(f"small behind large: {behind_line(behind[-1])}")
        for consumers in (config.share_consumers,):
            for order in config.orders:
                if reason := bench.over_budget():
                    skipped.append(
                        {"scenario": "equal shares", "consumers": consumers, "order": order, "reason": reason}
                    )
                    continue
                equal.append(bench.equal_shares(order, consumers))
                say(f"equal shares, {order}: shares {equal[-1]['shares']}, Jain {equal[-1]['jain']}")
            if config.weighted and not (reason := bench.over_budget()):
                weighted.append(bench.weighted(consumers))
                say(f"weights 2:1: shares {weighted[-1]['shares']}, ratio {weighted[-1]['ratio']}")
            elif config.weighted:
                skipped.append({"scenario": "weights 2:1", "consumers": consumers, "reason": reason})
            if config.priority and not (reason := bench.over_budget()):
                urgent.append(bench.priority(consumers))
                say(f"priority: first done {urgent[-1]['first_done']}, shares {urgent[-1]['shares']}")
            elif config.priority:
                skipped.append({"scenario": "priority", "consumers": consumers, "reason": reason})
    finally:
        stack.stop()
    shares_rounds = [r["round"] for r in (*equal, *weighted, *urgent)]
    return {
        "small_behind_large": behind,
        "forecast": fair_forecast.summary(shares_rounds),
        "equal_shares": equal,
        "weighted": weighted,
        "priority": urgent,
        "mailbox_groups": caps,
        "skipped": skipped,
        "config": {
            **asdict(config),
            "default_consumers": stack.consumer_count,
            "consumer_batch_size": stack.deployed.batch_size,
            "resend_requests_per_second": stack.deployed.environment.get("SENDONCE_RESEND_REQUESTS_PER_SECOND"),
            "provider_events": False,
            "deploy_s": round(stack.deploy_s, 1),
        },
        "machine": machine(),
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fair", description=__doc__.split("\n\n")[0])
    parser.add_argument("--large", type=int, default=2_000, help="recipients of the large campaign")
    parser.add_argument("--small", type=int, default=200, help="recipients of each small campaign")
    parser.add_argument("--smalls", type=int, default=3, help="small campaigns in the equal-shares rounds")
    parser.add_argument("--consumers", default="default", help="consumer counts ('default': the mapping's)")
    parser.add_argument(
        "--noisy-large", type=int, default=None, help="a small-behind-large round at the most consumers with this large"
    )
    parser.add_argument("--share-large", type=int, default=200, help="the large campaign in the rounds of shares")
    parser.add_argument("--share-small", type=int, default=50, help="each small one in the rounds of shares")
    parser.add_argument("--share-consumers", type=int, default=6, help="consumers in the rounds of shares")
    parser.add_argument("--weighted", type=int, default=200, help="each campaign of the 2:1 round (0: none)")
    parser.add_argument("--no-priority", dest="priority", action="store_false", help="no high-priority round")
    parser.add_argument("--groups", type=int, default=2_000, help="the round of caps per mailbox group (0: none)")
    parser.add_argument("--google-cap", type=float, default=20.0, help="its Google cap, emails per second")
    parser.add_argument("--no-noisy", dest="noisy_large", action="store_const", const=None)
    parser.add_argument("--orders", default="large-first,large-last", help=f"equal-shares orders, of {ORDERS}")
    parser.add_argument("--streams", type=int, default=DEFAULT_STREAMS, help="publish requests in flight")
    parser.add_argument("--send-timeout", type=float, default=300.0, help="seconds a round may take to send")
    parser.add_argument("--complete-timeout", type=float, default=180.0, help="then seconds until completed")
    parser.add_argument("--max-minutes", type=float, default=13.0, help="no round starts after this")
    parser.add_argument("--out", type=Path, default=Path("bench-fair.json"))
    args = parser.parse_args(argv)
    try:
        consumers = tuple(None if c.strip() == "default" else int(c) for c in args.consumers.split(","))
    except ValueError:
        parser.error(f"--consumers: comma-separated counts or 'default', not {args.consumers!r}")
    orders = tuple(o.strip() for o in args.orders.split(",") if o.strip())
    if any(o not in ORDERS for o in orders):
        parser.error(f"--orders: each of {ORDERS}")
    if min(args.large, args.small, args.smalls, args.share_large, args.share_small, args.share_consumers) < 1 or any(
        c is not None and c < 1 for c in consumers
    ):
        parser.error("sizes, --smalls and --consumers must be at least 1")
    config = FairConfig(
        large=args.large,
        small=args.small,
        smalls=args.smalls,
        consumers=consumers,
        noisy_large=args.noisy_large,
        orders=orders,
        share_large=args.share_large,
        share_small=args.share_small,
        share_consumers=args.share_consumers,
        weighted=args.weighted,
        priority=args.priority,
        groups=args.groups,
        google_cap=args.google_cap,
        streams=args.streams,
        send_timeout_s=args.send_timeout,
        complete_timeout_s=args.complete_timeout,
        max_minutes=args.max_minutes,
    )

    def say(message: str) -> None:
        print(f"[bench-fair {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    with stdout_to_devnull():  # the functions' log lines and metrics, which Lambda sends to CloudWatch
        result = run_fair(config, say)
    result["command"] = shlex.join([sys.executable, "-m", "bench.fair", *(sys.argv[1:] if argv is None else argv)])
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
