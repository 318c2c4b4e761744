"""Does the model have teeth? Each mutant reverts one fix of issue 10; the model check must
find a counterexample for it. Run by `make verify`: `python -m tests.model.mutants`.

A mutant is applied by replacing one named piece of our own code for the duration of a run
(mutation testing, not a test double). Prints, per mutant, the machine that caught it, the
invariant's message, how many steps were generated until the first failure and how long
the failing example was.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import sys
import time
from collections.abc import Iterator

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import InMemoryExampleDatabase
from hypothesis.stateful import run_state_machine_as_test
from moto import mock_aws

from sendonce.adapters import idempotency as idempotency_module
from sendonce.adapters.dynamodb import ledger as dynamodb_ledger
from sendonce.domain.campaigns import service as campaigns_module
from sendonce.domain.models import Campaign, CampaignState, DeliveryState
from sendonce.domain.sending import delivery as delivery_module
from sendonce.domain.sending import groups as groups_module
from sendonce.domain.sending import protocol
from sendonce.domain.sending.protocol import Event
from tests.model import test_delivery_model as model


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


def _old_open_publish(self, campaign_id):
    # Before: publish looked at the state once (draft -> sending) and held no lease.
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
    rules = list(protocol.CLAIM_RULES)
    grouped = next(r for r in rules if r.verdict is protocol.Verdict.GROUPED)
    rules.remove(grouped)
    stale = next(i for i, r in enumerate(rules) if r.verdict is protocol.Verdict.STALE)
    rules.insert(stale, protocol.ClaimRule(grouped.states, grouped.verdict, grouped.why, group=protocol.Group.OTHER))
    return tuple(rules)


def _released_to_pending(original):
    # Before: on the last receive a released delivery went back to pending like any other.
    def settlement_for(error, *, provider_idempotent, last_receive=False):
        return original(error, provider_idempotent=provider_idempotent)

    return settlement_for


R1, RB, SES = model.ResendSingle, model.ResendBatch, model.SesSingle
# Which machines may catch a mutant, most likely first.
MACHINES = {
    "1": (R1, RB),
    "2": (R1, RB),
    "3a": (RB,),
    "3b": (RB,),
    "3b'": (RB,),
    "3c": (RB,),
    "4": (SES, R1, RB),
    "5": (R1, SES, RB),
    "6": (SES, R1, RB),
    "6b": (R1, SES, RB),
}

MUTANTS = {
    "1 refused takeover forgets the first attempt": lambda: replaced(dynamodb_ledger, "_LIFT_GUARD", ""),
    "2 window counted from the last claim": lambda: replaced(dynamodb_ledger, "_FIRST_MARK", ":now"),
    "3a refused group keeps its mark": lambda: replaced(
        dynamodb_ledger.DynamoDBLedger,
        "release_group",
        _old_release_group(dynamodb_ledger.DynamoDBLedger.release_group),
    ),
    "3b group past the window stays claimed": lambda: replaced(protocol, "CLAIM_RULES", _grouped_at_any_age()),
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
        idempotency_module, "settlement_for", _released_to_pending(idempotency_module.settlement_for)
    ),
}


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


def run(max_examples: int) -> list[dict]:
    """Per mutant: the first counterexample the model finds with the mutant applied, then the
    same example replayed on the real code, which must pass (else the finding is not the
    mutant's)."""
    results = []
    for name, mutant in MUTANTS.items():
        found = None
        for machine in MACHINES[name.split()[0]]:
            model.FIGURES.clear()
            database = InMemoryExampleDatabase()
            started = time.monotonic()
            try:
                with mutant():
                    run_state_machine_as_test(machine, settings=_settings(database, [Phase.generate], max_examples))
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                found = {
                    "mutant": name,
                    "machine": machine.__name__,
                    "invariant": str(exc).strip().splitlines()[0][:200],
                    "steps_until_found": model.FIGURES["steps"],
                    "failing_example_steps": model.FIGURES["example_steps"],
                    "examples_until_found": model.FIGURES["examples"],
                    "seconds": round(time.monotonic() - started, 1),
                }
                try:
                    run_state_machine_as_test(machine, settings=_settings(database, [Phase.reuse], max_examples))
                    found["real_code_passes_that_example"] = True
                except Exception as again:  # noqa: BLE001
                    found["real_code_passes_that_example"] = False
                    found["real_code_failure"] = str(again).strip().splitlines()[0][:200]
                    # The steps and the reproduce_failure blob: a real defect, kept to be replayed.
                    found["real_code_example"] = getattr(again, "__notes__", [])
                break
        results.append(found or {"mutant": name, "found": False})
        print(json.dumps(results[-1]), flush=True)
    return results


def main() -> int:
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    max_examples = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with mock_aws():
        results = run(max_examples)
    missed = [r["mutant"] for r in results if r.get("found") is False]
    unattributed = [r["mutant"] for r in results if r.get("real_code_passes_that_example") is False]
    print(
        json.dumps(
            {
                "mutants": len(results),
                "caught": len(results) - len(missed),
                "missed": missed,
                "not_the_mutants_doing": unattributed,
            }
        )
    )
    return 1 if missed or unattributed else 0


if __name__ == "__main__":
    raise SystemExit(main())
