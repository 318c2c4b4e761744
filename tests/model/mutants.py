"""Does the model have teeth? Each mutant reverts one fix of the delivery protocol or the
campaign lifecycle; it must be caught, by the exhaustive explorer (tests/model/explore, when
present) or by the stateful model. Run by `make verify`:
`python -m tests.model.mutants [EXAMPLES] [--only 2,3b',6b]`.

A mutant is applied by replacing one named piece of our own code for the duration of a run
(mutation testing, not a test double). Prints one JSON line per mutant — who caught it, the
invariant's message, how many states (explorer) or steps and examples (model) until the first
failure, how long the failing example was — and a summary; every finding is then replayed
on the real code, which must pass (else it is not the mutant's doing). Exits 0 only if every
mutant is caught and every replay passes.

Every change to the protocol or the lifecycle adds the mutant that reverts it (docs/ledger.md).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import time
from collections.abc import Iterator

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import InMemoryExampleDatabase
from hypothesis.stateful import run_state_machine_as_test
from moto import mock_aws

from sendonce.adapters import sqs_queue as sqs_queue_module
from sendonce.adapters.dynamodb import campaigns as dynamodb_campaigns
from sendonce.adapters.dynamodb import ledger as dynamodb_ledger
from sendonce.domain.campaigns import counters as counters_module
from sendonce.domain.campaigns import scheduling as scheduling_module
from sendonce.domain.campaigns import service as campaigns_module
from sendonce.domain.campaigns import unknowns as unknowns_module
from sendonce.domain.campaigns import window_pauses as window_pauses_module
from sendonce.domain.models import Campaign, CampaignState, DeliveryState, SendGroup
from sendonce.domain.sending import batch_run as batch_run_module
from sendonce.domain.sending import delivery as delivery_module
from sendonce.domain.sending import delivery_tables
from sendonce.domain.sending import groups as groups_module
from sendonce.domain.sending import guards as guards_module
from sendonce.domain.sending.delivery_tables import Event
from tests.model import test_delivery_model as model
from tests.model.edges import focused

try:  # the exhaustive explorer (another branch may not have it yet)
    from tests.model.explore import explore
except ImportError:  # pragma: no cover - depends on the checkout
    explore = None


@contextlib.contextmanager
def replaced(owner, name: str, value) -> Iterator[None]:
    # As stored, not as looked up: a class's staticmethod read with getattr is a plain
    # function, and putting that back would break the real code for every later run.
    saved = inspect.getattr_static(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def _old_cancel_event(record, *, now_ms):
    # Before: cancel closed only deliveries nobody had ever held, all as cancelled.
    if record is None or record.state in (DeliveryState.PENDING, DeliveryState.DEAD_LETTERED):
        return Event.CLOSE_CANCELLED
    return None


def _old_release_group(original):
    def release(self, group, *, owner, state, reason, error_class, refused=False):
        return original(self, group, owner=owner, state=state, reason=reason, error_class=error_class, refused=False)

    return release


def _status_completes(original):
    def status(self, campaign_id):
        result = original(self, campaign_id)
        if result.state is CampaignState.SENDING and result.done:
            from sendonce.domain.campaigns import lifecycle

            lifecycle.apply(self._campaigns, campaign_id, lifecycle.CampaignEvent.COMPLETE, by="sendonce")
        return result

    return status


def _old_open_publish(self, campaign_id, *, holder=None, send_at_ms=None):
    # Before: publish looked at the state once (draft -> sending) and held no lease. (Schedules
    # came later: `send_at_ms` is taken and not used, so that the mutant runs instead of
    # raising a TypeError the harness would count as a catch.)
    from sendonce.domain.campaigns import lifecycle

    campaign = self._campaigns.get(campaign_id)
    if campaign.state is CampaignState.DRAFT:
        return lifecycle.apply(self._campaigns, campaign_id, lifecycle.CampaignEvent.PUBLISH, by=self._operator)
    return campaign


@contextlib.contextmanager
def defect_5() -> Iterator[None]:
    service = campaigns_module.CampaignService
    with (
        replaced(service, "status", _status_completes(service.status)),
        replaced(service, "_open_publish", _old_open_publish),
        replaced(Campaign, "accepts_sends", property(lambda c: c.state is CampaignState.SENDING)),
    ):
        yield


def _replayable_even_past_the_window(group, records, hashes, now_ms):
    return any(
        r.recipient_id in records
        and records[r.recipient_id].group_key == group.idempotency_key
        and records[r.recipient_id].maybe_sent_at_ms is not None
        for r in group.recipients
    )


def _grouped_at_any_age():
    # Before: a delivery another group may have carried was held for that group at any age.
    rules = list(delivery_tables.CLAIM_RULES)
    grouped = next(r for r in rules if r.verdict is delivery_tables.Verdict.GROUPED)
    rules.remove(grouped)
    stale = next(i for i, r in enumerate(rules) if r.verdict is delivery_tables.Verdict.STALE)
    rules.insert(
        stale,
        delivery_tables.ClaimRule(grouped.states, grouped.verdict, grouped.why, group=delivery_tables.Group.OTHER),
    )
    return tuple(rules)


def _released_to_pending(original):
    # Before: on the last receive a released delivery went back to pending like any other.
    def settlement_for(error, *, provider_idempotent, last_receive=False):
        return original(error, provider_idempotent=provider_idempotent)

    return settlement_for


def _closed_without_dead_lettering(original):
    # Before: the cancelled branch closed the batch's deliveries without marking them
    # dead-lettered first on the message's last receive.
    def close(self, batch, report, *, last_receive):
        return original(self, batch, report, last_receive=False)

    return close


def _reopens_without_proof(original):
    # Before: `resume --include-unknown` reopened every unknown past the window, proven not
    # sent or not (the operator accepting a possible second email was the only choice).
    def reopen(self, campaign_id, **kwargs):
        self._accept_possible_duplicates = True
        return original(self, campaign_id, **kwargs)

    return reopen


def _every_record_unapplied(changes, applied_through):
    # Without the counters' sequence-number rule: a replayed record counts again.
    return sorted(changes, key=lambda c: c.position.sequence)


def _start_at_any_instant(self, campaign_id, send_at_ms, holder):
    # Before: a firing took `start` on any scheduled campaign, whatever instant it carried.
    from sendonce.domain.campaigns import lifecycle

    return lifecycle.apply(
        self._campaigns,
        campaign_id,
        lifecycle.CampaignEvent.START,
        by=lifecycle.AUTOMATIC,
        publishing_until_ms=self._clock_ms() + scheduling_module.PUBLISH_LEASE_MS,
        holder=holder,
    )


def _open_whatever_paused_it(self, campaign_id, *, opened, waiting_for):
    # Before: a window's opening took `window_open` on any paused campaign (an operator's pause too).
    from sendonce.domain.campaigns import lifecycle

    return lifecycle.apply(
        self._campaigns, campaign_id, lifecycle.CampaignEvent.WINDOW_OPEN, by=lifecycle.AUTOMATIC, reason=opened
    )


def _end_whoever_else_holds(self, campaign_id, holder, *, now_ms):
    # Before: a publisher that ended removed the shared publish lease, whoever else held one.
    self._update_campaign(
        Key=self._key(campaign_id),
        UpdateExpression="REMOVE publishing_until_ms",
        ConditionExpression="attribute_exists(pk)",
    )


def _entries_without_groups(campaign_id, bodies):  # before: no MessageGroupId, queue order
    return [{"Id": i, "MessageBody": body} for i, body in bodies.items()]


def _variant_from_the_campaigns_state(self, recipient_id):
    # The defect the A/B design rules out: the variant read from what the campaign says now
    # (its winner, once recorded) rather than from the recipient, so a test recipient sent
    # after the pick, or replayed after it, gets the winner instead of its own variant.
    from sendonce.domain.campaigns.variants import HELD, assign

    test = self.campaign.ab_test
    if test is None:
        return None
    if self.campaign.decision is not None:
        return self.campaign.decision.variant
    return assign(self.campaign.campaign_id, recipient_id, test) or HELD


R1, RB, SES = model.ResendSingle, model.ResendBatch, model.SesSingle
# Which machines may catch a mutant, most likely first, and each mutant's share of the example
# budget (a multiple of EXAMPLES per machine: the rare ones get more).
MACHINES = {
    "1": (R1, RB),
    "2": (R1, RB),
    "3a": (RB,),
    "3b": (RB,),
    "3b'": (RB,),
    "3c": (RB,),
    "4": (SES, R1, RB),
    "5": (R1, SES, RB),
    "6": (R1, SES, RB),
    "6b": (R1, SES, RB),
    "7": (R1, SES, RB),
    "8": (SES, R1, RB),
    "9": (R1, RB),
    "10": (R1, SES),
    "11": (R1, SES),
    "12": (R1, SES),
    "13": (R1, RB),
    "14": (R1, RB, SES),
    "15": (R1, SES, RB),
    "16": (RB,),
}
# 8: at 100 examples a machine its catch hung on the seed's luck (caught at example 8 before
# the A/B rules and 3a's rule joined the model, then missed); at 300, found at example 20.
BUDGET = {"3c": 2.0, "2": 1.5, "8": 3.0}
# Directed swarm: the rule families a mutant's escape is made of, fixed for every example (rules
# in no family stay on). Without it the merged model's families dilute the rare ones: at 40
# examples per machine the model missed 8, 9 and 10 once schedules and audits joined (issue 18).
FOCUS = {
    "1": frozenset({"time"}),  # a takeover refused, then the message back past the first key's life
    "2": frozenset({"time"}),  # a takeover, then a return past 23 h from the first claim, not the last
    "3a": frozenset({"provider", "time"}),  # a group request refused, then time past the window
    "8": frozenset({"operator", "time"}),  # an unknown left by an incident, then resume --include-unknown
    "9": frozenset({"publish", "consume_more"}),  # records to count, the aggregator replaying a batch
    "10": frozenset({"schedule"}),  # a schedule moved while its old firing is in flight
    "11": frozenset({"window"}),  # an operator's pause inside a window, then the opening's firing
    "12": frozenset({"publish"}),  # a second publisher ends while the first streams
    "13": frozenset({"sharing"}),  # a small campaign published behind a large one, then the drain
    "14": frozenset({"warmup"}),  # u1 published past its day's cap, consumed
    "15": frozenset({"variants"}),  # v1 published, its winner picked, its test recipients then consumed
    "16": frozenset({"suppress"}),  # a group recorded, its consumer dead, a member unsubscribed, the message back
}
# The explorer's depth per mutant (default: its own); 7 needs a halt, a cancel and the last
# receive's crash: three actions. 10 and 11 are the lifecycle's (a schedule's firing, a window's
# opening) and 13 needs two campaigns in one queue, which the explorer's world of one delivery
# does not hold; 12 is the DynamoDB adapter's, which its fakes restate; 14 needs a warm-up
# campaign and a day's opening: depth 0, the model decides.
EXPLORER_DEPTH = {"7": 3, "10": 0, "11": 0, "12": 0, "13": 0, "14": 0, "15": 0, "16": 0}

MUTANTS = {
    "1 refused takeover forgets the first attempt": lambda: replaced(dynamodb_ledger.items, "_LIFT_GUARD", ""),
    "2 window counted from the last claim": lambda: replaced(dynamodb_ledger.items, "_FIRST_MARK", ":now"),
    "3a refused group keeps its mark": lambda: replaced(
        dynamodb_ledger.DynamoDBLedger,
        "release_group",
        _old_release_group(dynamodb_ledger.DynamoDBLedger.release_group),
    ),
    "3b group past the window stays claimed": lambda: replaced(delivery_tables, "CLAIM_RULES", _grouped_at_any_age()),
    "3b' a group past the window is replayed": lambda: replaced(
        groups_module.GroupDelivery, "_replayable", staticmethod(_replayable_even_past_the_window)
    ),
    "3c a never-requested group is replayed as recorded": lambda: replaced(
        groups_module.GroupDelivery, "_replayable", staticmethod(lambda group, records, hashes, now_ms: True)
    ),
    "4 cancel leaves held deliveries, closes maybe-sent as cancelled": lambda: replaced(
        delivery_module, "cancel_event", _old_cancel_event
    ),
    "5 a status read completes the campaign": defect_5,
    "6 last receive dead-letters only after sending": lambda: replaced(
        delivery_module.DeliveryService, "_dead_letter_first", lambda self, batch: None
    ),
    "6b last receive releases to pending": lambda: replaced(
        guards_module, "settlement_for", _released_to_pending(guards_module.settlement_for)
    ),
    "7 a cancelled campaign's last receive closes without dead-lettering first": lambda: replaced(
        delivery_module.DeliveryService,
        "_close_cancelled",
        _closed_without_dead_lettering(delivery_module.DeliveryService._close_cancelled),
    ),
    "8 resume --include-unknown sends an unknown not proven absent": lambda: replaced(
        unknowns_module.UnknownOutcomes, "reopen", _reopens_without_proof(unknowns_module.UnknownOutcomes.reopen)
    ),
    "9 a replayed stream record counts again": lambda: replaced(counters_module, "unapplied", _every_record_unapplied),
    "10 a schedule's firing starts the campaign whatever instant it carries": lambda: replaced(
        scheduling_module.ScheduledSends, "_take_start", _start_at_any_instant
    ),
    "11 a window's opening resumes an operator's pause": lambda: replaced(
        window_pauses_module.WindowOpenings, "_take_window_open", _open_whatever_paused_it
    ),
    "12 a publisher that ends drops the lease another still holds": lambda: replaced(
        dynamodb_campaigns.DynamoDBCampaignStore, "end_publish", _end_whoever_else_holds
    ),
    "13 batches published without their campaign's message group (fairness reverted)": lambda: replaced(
        sqs_queue_module, "batch_entries", _entries_without_groups
    ),
    "14 a warm-up day's cap stops the batch but does not pause the campaign": lambda: replaced(
        delivery_module.DeliveryService, "_pause_for_day_cap", lambda self, campaign, reached: None
    ),
    "15 an A/B recipient's variant chosen from the campaign's state at send time": lambda: replaced(
        batch_run_module.BatchRun, "variant_of", _variant_from_the_campaigns_state
    ),
    "16 a group number met without reading the batch's groups is adopted": lambda: replaced(
        groups_module.GroupDelivery, "_record", _adopt_a_taken_number
    ),
}


def _adopt_a_taken_number(self, run, those, number, *, groups_read):
    # Before: whatever group held the number was taken as this receive's.
    batch = run.batch
    group = SendGroup(campaign_id=batch.campaign_id, group_id=f"{batch.batch_id}-g{number}", recipients=those)
    return self._campaigns.record_group(group), number


def _settings(database, phases, max_examples):
    return settings(
        max_examples=max_examples,
        stateful_step_count=25,
        deadline=None,
        database=database,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


@contextlib.contextmanager
def _seeded(machine, random_seed: int) -> Iterator[None]:
    """Hypothesis's @seed on the machine: each run of `make verify` explores the same examples."""
    machine._hypothesis_internal_use_seed = random_seed
    try:
        yield
    finally:
        del machine._hypothesis_internal_use_seed


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


_EXPLORED: dict[int | None, object] = {}


def _by_explorer(name: str, mutant) -> dict | None:
    """The explorer's verdict on the mutant, if it has one; the real code must pass it."""
    if explore is None:
        return None
    started = time.monotonic()
    depth = EXPLORER_DEPTH.get(name.split()[0])
    try:
        with mutant():
            found = explore(depth=depth)
    except Exception:  # noqa: BLE001 - the explorer could not run this mutant: the model decides
        return None
    if found.violation is None:
        return None
    if depth not in _EXPLORED:  # the real code's exploration is the same for every mutant
        _EXPLORED[depth] = explore(depth=depth)
    clean = _EXPLORED[depth]
    return {
        "mutant": name,
        "caught_by": "explorer",
        "invariant": str(found.violation).strip().splitlines()[0][:200],
        "states_until_found": found.states,
        "depth": found.depth,
        "seconds": round(time.monotonic() - started, 1),
        "real_code_passes_that_example": clean.violation is None,
        **({} if clean.violation is None else {"real_code_failure": str(clean.violation)[:200]}),
    }


def _by_model(name: str, mutant, max_examples: int, random_seed: int) -> dict | None:
    """The model's first counterexample with the mutant applied (no shrinking), then the same
    example replayed on the real code, which must pass."""
    budget = int(max_examples * BUDGET.get(name.split()[0], 1.0))
    steps = 0
    for machine in MACHINES[name.split()[0]]:
        model.FIGURES.clear()
        database = InMemoryExampleDatabase()
        started = time.monotonic()
        try:
            with mutant(), _seeded(machine, random_seed), focused(FOCUS.get(name.split()[0])):
                run_state_machine_as_test(machine, settings=_settings(database, [Phase.generate, Phase.target], budget))
        except Exception as exc:  # noqa: BLE001 - any failure is the finding
            found = {
                "mutant": name,
                "caught_by": "model",
                "machine": machine.__name__,
                "families": sorted(FOCUS.get(name.split()[0], ())) or "swarm",
                "invariant": _first_line(exc),
                "steps_until_found": steps + model.FIGURES["steps"],
                "steps_on_this_machine": model.FIGURES["steps"],
                "failing_example_steps": model.FIGURES["example_steps"],
                "examples_until_found": model.FIGURES["examples"],
                "failing_example_rules": list(model.EXAMPLE_RULES),
                "seconds": round(time.monotonic() - started, 1),
            }
            try:
                with focused(FOCUS.get(name.split()[0])):  # the same example: the same families
                    run_state_machine_as_test(machine, settings=_settings(database, [Phase.reuse], budget))
                found["real_code_passes_that_example"] = True
            except Exception as again:  # noqa: BLE001
                found["real_code_passes_that_example"] = False
                found["real_code_failure"] = _first_line(again)
                # The steps and the reproduce_failure blob: a real defect, kept to be replayed.
                found["real_code_example"] = getattr(again, "__notes__", [])
            return found
        steps += model.FIGURES["steps"]
    return None


def run(max_examples: int, only: set[str] | None = None, random_seed: int = 0, out=None) -> list[dict]:
    """Per mutant (stopping at the first finding): the explorer, then the model's machines."""
    results = []
    for name in _chosen(only):
        results.append(_one(name, max_examples, random_seed))
        _emit(results[-1], out)
    return results


def _chosen(only: set[str] | None) -> list[str]:
    return [name for name in MUTANTS if not only or name.split()[0] in only]


def _one(name: str, max_examples: int, random_seed: int) -> dict:
    started = time.monotonic()
    mutant = MUTANTS[name]
    found = _by_explorer(name, mutant) or _by_model(name, mutant, max_examples, random_seed)
    return found or {"mutant": name, "found": False, "seconds": round(time.monotonic() - started, 1)}


# The mutants the model takes longest to catch (2026-12-02), started first in parallel runs.
SLOW_FIRST = ("3a", "2", "8", "11", "1", "7")


def _worker_start() -> None:
    _aws_environment()
    mock_aws().start()  # for this worker's life: every mutant it runs shares one in-process moto


def run_parallel(
    max_examples: int, jobs: int, only: set[str] | None = None, random_seed: int = 0, out=None
) -> list[dict]:
    """The same as `run`, the mutants shared out over `jobs` worker processes (each with its own
    in-process moto); one JSON line per mutant as each is decided. Every mutant is decided by
    its own seeded run whichever worker takes it, so the findings are those of `run`."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    rank = {number: i for i, number in enumerate(SLOW_FIRST)}
    names = sorted(_chosen(only), key=lambda n: rank.get(n.split()[0], len(rank)))
    results = []
    context = multiprocessing.get_context("spawn")  # no moto or boto3 state inherited
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_start) as pool:
        futures = [pool.submit(_one, name, max_examples, random_seed) for name in names]
        for future in as_completed(futures):
            results.append(future.result())
            _emit(results[-1], out)
    order = list(MUTANTS)
    return sorted(results, key=lambda r: order.index(r["mutant"]))


def _aws_environment() -> None:
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    os.environ.pop("AWS_ENDPOINT_URL", None)


def _emit(line: dict, out) -> None:
    print(json.dumps(line), flush=True)
    if out is not None:
        out.write(json.dumps(line) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="?", type=int, default=200, help="examples per machine and mutant")
    parser.add_argument("--only", default="", help="comma-separated mutant numbers, e.g. 2,3b',6b")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SENDONCE_MUTANTS_SEED", "0")))
    parser.add_argument("--out", help="also write the JSON lines to this file")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (each mutant on one); 1: in this process")
    args = parser.parse_args(argv)
    only = {n.strip() for n in args.only.split(",") if n.strip()} or None
    unknown = (only or set()) - {name.split()[0] for name in MUTANTS}
    if unknown:
        parser.error(f"no such mutant: {', '.join(sorted(unknown))}")
    if args.jobs < 1:
        parser.error("--jobs: at least 1")
    _aws_environment()
    started = time.monotonic()
    out = open(args.out, "w") if args.out else None
    if args.jobs > 1:
        from tests.model import mutants as importable  # the workers unpickle by this name, not __main__

        results = importable.run_parallel(args.examples, args.jobs, only, args.seed, out)
    else:
        with mock_aws():
            results = run(args.examples, only, args.seed, out)
    missed = [r["mutant"] for r in results if r.get("found") is False]
    unattributed = [r["mutant"] for r in results if r.get("real_code_passes_that_example") is False]
    _emit(
        {
            "mutants": len(results),
            "caught": len(results) - len(missed),
            "by_explorer": sum(r.get("caught_by") == "explorer" for r in results),
            "by_model": sum(r.get("caught_by") == "model" for r in results),
            "missed": missed,
            "not_the_mutants_doing": unattributed,
            "seconds": round(time.monotonic() - started, 1),
            "jobs": args.jobs,
        },
        out,
    )
    if out is not None:
        out.close()
    return 1 if missed or unattributed else 0


if __name__ == "__main__":
    raise SystemExit(main())
