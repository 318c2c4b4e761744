"""An exhaustive small-scope check of the delivery protocol (issue 18): breadth-first, every
interleaving of a small world's actions to a stated depth, each distinct state once.

Why the real services and not a re-statement of the tables: a model written beside the
code that agrees with itself proves nothing. Here every action runs the real
`DeliveryService` (with `GroupDelivery`, the Powertools guards and persistence layers) and
`CampaignService` over the in-memory fakes (`world.py`), so every decision is taken where
the shipped code takes it, from `delivery_tables.classify`/`CLAIM_RULES`, `settle_event`,
`cancel_event`, `settlement_for`, `GroupDelivery._replayable` and the lifecycle rows, looked
up at call time; a mutant of `tests/model/mutants.py` is what the explorer runs. What only
the DynamoDB adapter decides (its condition expressions) the fakes state again, and the
row-by-row equivalence test (`tests/integration/test_ledger_protocol.py`) holds the adapter
to every row the explorer visits (`test_explore.py` checks that).

The world: 2 recipients published in one message (one send group in batch mode), a queue
whose second receive is a message's last (then the DLQ), leases of 60 s, a visibility
timeout of 30 s (a message returns while its consumer may live), and three worlds: Resend
one by one, Resend batch mode, SES. An action is one of:

- a consumer's attempt on a visible message — as received, or as its last receive (the
  earlier ones died before writing) — run to the end, or dying before any of its steps (a
  ledger or campaigns write, a provider call) or after the last, or with the provider
  answering one call refused (rate limit; 409 concurrent; permanent; quota, a halt), or
  ambiguously (a timeout before, or after, accepting) and dying at any later step, or with
  another actor acting in full before one of its steps (pause, resume, cancel, or a second
  consumer given the same message: SQS delivers at least once);
- SQS moving a message past its last receive to the DLQ;
- time passing: the visibility timeout, a lease's end, 23 h, 25 h;
- an operator pausing, resuming, cancelling, redriving the DLQ; a recipient unsubscribing.

Consumers are symmetric (an attempt is the same whichever runs it, owners are fresh ids), so
the two consumers are one attempt action plus the "second consumer" interleaving. States are
hashed in a canonical form (`world.canonical`): owners reduced to what any rule can read,
times relative to now and capped past the last threshold (the 23 h window, the 24 h key).

In every state: at most one email accepted per delivery; the ledger never contradicts the
provider; exactly one visible state per recipient and the counts add up; a completed
campaign has nothing left; nobody pending on a running campaign without a message to bring
them (a message past its last receive brings nobody: SQS moves it to the DLQ). From every
state, a fault-free drain (time past every lease, every message processed, the DLQ
redriven): unless the campaign is paused, every recipient ended (or dead-lettered with its
message in the DLQ), unknown only where an attempt may have been accepted unseen, and a
campaign whose recipients all ended completed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.errors import IllegalTransitionError, InvalidCampaignError
from sendonce.domain.models import DeliveryState
from sendonce.domain.sending import delivery as delivery_module
from sendonce.domain.sending import delivery_tables
from tests.model.explore.invariants import InvariantError, check, drain_and_check
from tests.model.explore.world import (
    HOUR,
    LEASE_MS,
    MAX_RECEIVES,
    VISIBILITY_MS,
    VISITS,
    Snapshot,
    World,
    canonical,
)
from tests.model.world import Message

S = DeliveryState
# What the provider may answer one call: refused (each class), or accepted and then the
# answer lost (a timeout after acceptance); "concurrent" is Resend's 409 for a request
# with the same key under way, which proves nothing.
ANSWERS = ("rate_limited", "concurrent", "permanent", "quota", "timeout_before", "timeout_after")
JUMPS = {"visibility timeout": VISIBILITY_MS + 1, "lease end": LEASE_MS + 1, "23 h": 23 * HOUR, "25 h": 25 * HOUR}
VERBS = ("pause", "resume", "cancel")
WORLDS = (("resend", "single"), ("resend", "batch"), ("ses", "single"))


@dataclass
class Counterexample:
    world: str
    steps: list[str]
    invariant: str

    def __str__(self) -> str:
        lines = [f"{self.world}: {self.invariant}", "after:"]
        lines += [f"  {i}. {step}" for i, step in enumerate(self.steps, 1)]
        return "\n".join(lines)


@dataclass
class Exploration:
    states: int = 0
    depth: int = 0
    transitions: int = 0
    seconds: float = 0.0
    violation: Counterexample | None = None
    by_world: dict[str, dict[str, int]] = field(default_factory=dict)
    transitions_visited: set[tuple[str, str]] = field(default_factory=set)
    rules_visited: set[tuple[str, str]] = field(default_factory=set)

    def summary(self) -> dict:
        return {
            "states": self.states,
            "depth": self.depth,
            "transitions": self.transitions,
            "seconds": round(self.seconds, 1),
            "by_world": self.by_world,
            "violation": None if self.violation is None else str(self.violation),
        }


# --- actions -------------------------------------------------------------------------------

Action = tuple[str, Callable[[World], None]]


def _operator(verb: str) -> Callable[[World], None]:
    def act(world: World) -> None:
        try:
            getattr(world.operator, verb)("c1")
        except (IllegalTransitionError, InvalidCampaignError):
            pass

    return act


def _second_consumer(name: str) -> Callable[[World], None]:
    """SQS delivers at least once: another consumer gets the same message, fault-free."""

    def act(world: World) -> None:
        message = next((m for m in world.queue.messages if f"message {_label(m.body)} " in name), None)
        if message is not None and message.receive_count < MAX_RECEIVES:
            message.receive_count += 1
            world.process(message, consumer=1)

    return act


def _attempt(
    index: int,
    *,
    last: bool = False,
    crash_at: int | None = None,
    after: bool = False,
    answer: tuple[int, str] | None = None,
    interrupt_at: int | None = None,
    interrupt: Callable[[World], None] | None = None,
) -> Callable[[World], None]:
    """A consumer receives the index-th visible message and runs it, dying before or after
    step `crash_at`, the provider answering its `answer[0]`-th call with `answer[1]`, or
    another actor acting before step `interrupt_at`. `last`: the earlier receives died
    before writing anything, so this one is the message's last."""

    def run(world: World) -> None:
        message = _visible(world)[index]
        message.receive_count = MAX_RECEIVES if last else message.receive_count + 1
        message.visible_at_ms = world.clock() + VISIBILITY_MS
        if answer is not None:
            call, kind = answer
            world.provider.script = [None] * (call - 1) + [kind]
        world.faults.crash_at, world.faults.after = crash_at, after
        world.faults.interrupt_at = interrupt_at
        world.faults.interrupt = None if interrupt is None else (lambda: interrupt(world))
        world.process(message)
        world.faults.crash_at = world.faults.interrupt_at = None
        world.provider.script = []

    return run


def _visible(world: World) -> list[Message]:
    return sorted(
        (m for m in world.queue.messages if m.visible_at_ms <= world.clock()),
        key=lambda m: (m.body, m.receive_count),
    )


def _probe(world: World, snap: Snapshot, attempt: Callable[[World], None]) -> tuple[int, list[int]]:
    """The steps of an attempt (then undone): how many, and which were provider calls."""
    calls: list[int] = []
    counted = world.provider._before

    def before(what, recipients):
        calls.append(world.faults.steps + 1)
        return counted(what, recipients)

    world.provider._before = before
    try:
        attempt(world)
    finally:
        del world.provider._before
    steps = world.faults.steps
    world.restore(snap)
    return steps, calls


def _consumer_actions(world: World, snap: Snapshot, index: int, name: str, *, last: bool, interleave: bool):
    """Every way one attempt on the message can go. A crash after step k leaves what a crash
    before step k + 1 leaves (nothing but steps has an effect), so only the last step gets
    its "after". On a last receive the consumer is not made to die before its first write:
    no write can come before the first one (see docs/ledger.md, the explorer)."""
    steps, calls = _probe(world, snap, _attempt(index, last=last))
    yield f"consume {name}", _attempt(index, last=last)
    for k in range(2 if last else 1, steps + 1):
        yield f"consume {name}: crash before step {k}", _attempt(index, last=last, crash_at=k)
    if steps:
        yield f"consume {name}: crash after step {steps}", _attempt(index, last=last, crash_at=steps, after=True)
    for call, at in enumerate(calls, 1):
        for kind in ANSWERS:
            answered = _attempt(index, last=last, answer=(call, kind))
            yield f"consume {name}: provider call {call} answers {kind}", answered
            # ... and the consumer dies at any later step (writing what the answer means).
            later, _ = _probe(world, snap, answered)
            for k in range(at + 1, later + 1):
                yield (
                    f"consume {name}: provider call {call} answers {kind}, crash before step {k}",
                    _attempt(index, last=last, answer=(call, kind), crash_at=k),
                )
            if later > at:
                yield (
                    f"consume {name}: provider call {call} answers {kind}, crash after step {later}",
                    _attempt(index, last=last, answer=(call, kind), crash_at=later, after=True),
                )
    if interleave:
        others: list[tuple[str, Callable[[World], None]]] = [(f"operator {v}s", _operator(v)) for v in VERBS]
        if not last:
            others.append(("a second consumer gets the same message", _second_consumer(name)))
        for k in range(1, steps + 1):
            for what, other in others:
                yield (
                    f"consume {name}: before step {k}, {what}",
                    _attempt(index, last=last, interrupt_at=k, interrupt=other),
                )


def actions(world: World, snap: Snapshot, *, interleave: bool) -> Iterator[Action]:
    # As read now: a probe below runs an attempt and restores the world (new message objects).
    visible = [(m.body, m.receive_count) for m in _visible(world)]
    for index, (body, count) in enumerate(visible):
        if (body, count) in visible[:index]:
            continue  # the same message twice (a resume's copy): one is enough
        if count >= MAX_RECEIVES:

            def to_dlq(world: World, index: int = index) -> None:
                message = _visible(world)[index]
                world.queue.messages.remove(message)
                world.queue.dlq.append(message)

            yield f"SQS moves message {_label(body)} to the DLQ", to_dlq
            continue
        last = count + 1 >= MAX_RECEIVES
        name = f"message {_label(body)} (receive {count + 1}{', its last' if last else ''})"
        yield from _consumer_actions(world, snap, index, name, last=last, interleave=interleave)
        if count + 1 < MAX_RECEIVES:
            name = f"message {_label(body)} (its last receive: earlier ones died before any write)"
            yield from _consumer_actions(world, snap, index, name, last=True, interleave=interleave)
    for label, ms in JUMPS.items():
        yield f"time passes: {label}", lambda world, ms=ms: world.clock.advance(ms)
    for verb in VERBS:
        yield f"operator {verb}s", _operator(verb)
    if world.queue.dlq:
        yield "operator redrives the DLQ", lambda world: world.queue.redrive()
    for person in world.people:
        if not world.suppressions.is_suppressed(person.email):
            yield (
                f"{person.recipient_id} unsubscribes",
                lambda world, email=person.email: world.suppressions.add(
                    email, SuppressionReason.UNSUBSCRIBED, "explorer"
                ),
            )


def _label(body: str) -> str:
    """A message by what it carries: the batch id (published, r... resumed, x... cancelled)."""
    return json.loads(body)["batch_id"][:9]


# --- the search ----------------------------------------------------------------------------


def search(
    provider: str,
    mode: str,
    *,
    depth: int,
    max_states: int | None = None,
    interleave: bool = True,
    deadline: float | None = None,
) -> tuple[int, int, int, Counterexample | None]:
    """Breadth-first to `depth` actions; returns (states, depth reached, transitions, violation)."""
    world = World(provider, mode)
    bodies: dict[str, int] = {}
    start = world.snapshot()
    key = canonical(start, bodies)
    parents: dict[tuple, tuple[tuple | None, str]] = {key: (None, "published 2 recipients in one message")}
    frontier = [(key, start)]
    transitions = 0
    reached = 0
    world_name = f"{provider} {mode}"

    def trace(key: tuple, last: str | None = None) -> list[str]:
        steps = []
        while key is not None:
            key, label = parents[key][0], parents[key][1]
            steps.append(label)
        steps.reverse()
        return steps + ([last] if last else [])

    def verify(key: tuple, snap: Snapshot) -> Counterexample | None:
        try:
            world.restore(snap)
            check(world)
            drain_and_check(world)
        except InvariantError as exc:
            return Counterexample(world_name, trace(key), str(exc))
        return None

    if found := verify(key, start):
        return 1, 0, 0, found
    for level in range(1, depth + 1):
        following = []
        for key, snap in frontier:
            world.restore(snap)
            for label, act in list(actions(world, snap, interleave=interleave)):
                world.restore(snap)
                act(world)
                transitions += 1
                after = world.snapshot()
                child = canonical(after, bodies)
                if child in parents:
                    continue
                parents[child] = (key, label)
                if found := verify(child, after):
                    return len(parents), level, transitions, found
                following.append((child, after))
                if max_states is not None and len(parents) >= max_states:
                    return len(parents), level, transitions, None
            if deadline is not None and time.monotonic() > deadline:
                return len(parents), level, transitions, None
        if not following:
            break
        reached = level
        frontier = following
    return len(parents), reached, transitions, None


def explore(
    *,
    depth: int | None = None,
    worlds: tuple[tuple[str, str], ...] = WORLDS,
    max_states: int | None = None,
    interleave: bool = True,
) -> Exploration:
    """Every interleaving of the small world's actions to `depth`, in each world (Resend one
    by one, Resend batch mode, SES), stopping at the first violation."""
    depth = DEFAULT_DEPTH if depth is None else depth
    result = Exploration()
    VISITS.transitions.clear()
    VISITS.rules.clear()
    started = time.monotonic()
    with _noting_rules(), _compiled_once():
        for provider, mode in worlds:
            states, reached, transitions, found = search(
                provider, mode, depth=depth, max_states=max_states, interleave=interleave
            )
            result.by_world[f"{provider} {mode}"] = {"states": states, "depth": reached, "transitions": transitions}
            result.states += states
            result.transitions += transitions
            result.depth = max(result.depth, reached)
            if found is not None:
                result.violation = found
                break
    result.seconds = time.monotonic() - started
    result.transitions_visited = set(VISITS.transitions)
    result.rules_visited = set(VISITS.rules)
    return result


DEFAULT_DEPTH = 2


@contextlib.contextmanager
def _compiled_once() -> Iterator[None]:
    """The campaign's templates compiled once, not once per attempt (Jinja's compile is most
    of an attempt's cost; what it compiles never changes here)."""
    original = delivery_module.CompiledContent
    cache: dict[str, object] = {}

    def compiled(content):
        key = content.model_dump_json()
        if key not in cache:
            cache[key] = original(content)
        return cache[key]

    delivery_module.CompiledContent = compiled
    try:
        yield
    finally:
        delivery_module.CompiledContent = original


@contextlib.contextmanager
def _noting_rules() -> Iterator[None]:
    """Notes each claim rule that decided, by wrapping `delivery_tables.rule_for` (which reads
    `delivery_tables.CLAIM_RULES` at call time, so a mutant's table is what decides)."""
    saved = delivery_tables.rule_for

    def rule_for(f: delivery_tables.Facts) -> delivery_tables.ClaimRule:
        rule = saved(f)
        VISITS.rules.add((rule.verdict.value, rule.why))
        return rule

    delivery_tables.rule_for = rule_for
    try:
        yield
    finally:
        delivery_tables.rule_for = saved
