"""What the model check needs to reach the faults that meet time: swarm selection of rule
families, time jumps to exactly the instants the records make interesting (a lease's end,
the key window's end counted from the first possible acceptance or from the last claim, a
provider key's end, 25 h later; each ±1 ms), three bundled rules (a consumer that dies around
its provider call and whose message returns at those edges; a takeover the provider refuses,
then the message back past the first key's life; a last receive that meets a refusal and
dies just after the release), and the quantities `target()` pushes up.

Mixed into the machines of test_delivery_model.py (issue 18: every reverted fix caught).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from sendonce.domain.campaigns.batches import campaign_named_by
from sendonce.domain.models import CampaignState
from sendonce.domain.sending.delivery_tables import FINAL, HELD, IDEMPOTENCY_WINDOW_MS
from tests.model.world import KEY_LIFETIME_MS

HOUR = 3600 * 1000
LEASE_MS = 60_000
VISIBILITY_MS = 30_000  # shorter than a lease on purpose: a second consumer meets a live holder
WINDOW_MS = IDEMPOTENCY_WINDOW_MS
FIGURES = Counter()

# Swarm testing: each example enables a subset of these rule families (the `consume` rule is
# always on): all of them, a focus (time jumps and crashes; a message's last receives and
# refusals; operators the next day), or a random subset. Hypothesis itself also switches
# single rules off at random; this switches whole families together, so that the rare
# sequences the past escapes were made of are common in some examples.
FAMILIES = (
    "publish",
    "consume_more",
    "time",
    "operator",
    "provider",
    "receive_limit",
    "suppress",
    "schedule",
    "window",
    "sharing",
    "warmup",
    "variants",
)
FOCUSES = (
    frozenset(FAMILIES),
    frozenset({"time"}),
    frozenset({"receive_limit", "provider"}),
    frozenset({"time", "operator"}),
)
SWARM = st.sampled_from(FOCUSES) | st.frozensets(st.sampled_from(FAMILIES), min_size=1)
# Directed swarm: the mutants' harness may fix the families of every example to the ones its
# mutant's escape is made of (tests/model/mutants.py, FOCUS); None lets SWARM choose.
FOCUS: list[frozenset[str] | None] = [None]


@contextlib.contextmanager
def focused(families: frozenset[str] | None) -> Iterator[None]:
    """Every example of the block enables exactly these families (rules in no family stay on)."""
    unknown = (families or frozenset()) - set(FAMILIES)
    if unknown:
        raise ValueError(f"no such rule family: {sorted(unknown)}")
    FOCUS[0] = families
    try:
        yield
    finally:
        FOCUS[0] = None


def family(name: str):
    return precondition(lambda self: name in getattr(self, "families", FAMILIES))


# The instants a time jump may land on, from the world's records (ms after the anchor, a
# delivery's first possible acceptance; "lease" is its holder's lease end + 1 ms): a
# repeat just inside the key window, just past it, just past the key's life, 25 h later.
EDGES = {
    "lease": None,
    "window-": WINDOW_MS - 1,
    "window+": WINDOW_MS + 1,
    "key+": KEY_LIFETIME_MS + 1,
    "25h": 25 * HOUR,
}
# A crash in a consume rule: none, at the n-th step, or at the n-th step of a given name (a
# name the machine never takes is no crash).
STEP_NAMES = (
    "claim",
    "send",
    "mark_in_flight",
    "mark_sent",
    "settle",
    "close_unclaimed",
    "record_group",
    "claim_group",
    "send_batch",
    "complete_group",
    "release_group",
    "batch_settled",
)
CRASHES = st.none() | st.integers(1, 14) | st.tuples(st.sampled_from(STEP_NAMES), st.integers(1, 2))
INSTANTS = ("lease_end", "first_mark_window", "last_claim_window", "key_end", "first_mark_25h")


class EdgeRules:
    """The rules and helpers above, for a DeliveryModel (its clock, queue, provider, records)."""

    # Where a consumer dies in the bundled rules: around its claim and provider call
    # (step name, n-th time, after it?), and just after it released a delivery.
    claim_points = (("claim", 1, True), ("send", 1, False), ("send", 1, True))
    release_points = (("settle", 1, True), ("claim", 2, False), ("close_unclaimed", 2, False), ("send", 3, False))

    def _instants(self, kind: str, records) -> list[int]:
        """Where `kind` says time becomes interesting, from the current records."""
        open_ = [r for r in records.values() if r.state not in FINAL]
        if kind == "lease_end":
            return [r.lease_until_ms for r in open_ if r.state in HELD and r.lease_until_ms]
        if kind == "first_mark_window":
            return [r.maybe_sent_at_ms + WINDOW_MS for r in open_ if r.maybe_sent_at_ms]
        if kind == "last_claim_window":
            return [self.claimed_at[r.recipient_id] + WINDOW_MS for r in open_ if r.recipient_id in self.claimed_at]
        if kind == "first_mark_25h":
            return [r.maybe_sent_at_ms + 25 * HOUR for r in open_ if r.maybe_sent_at_ms]
        return [created + KEY_LIFETIME_MS for created, _, _ in self.provider.keys.values()]

    def _publish_the_rest(self, index: int):
        """Nothing to receive: the operator publishes whom it has not yet (if anyone), and a
        consumer receives the first message."""
        rest = [r for r in self.people if r.recipient_id not in self.published]
        if not rest or self.store.get("c1").state is not CampaignState.SENDING:
            return None
        self.operator.publish("c1", rest, batch_size=2)
        self.published.update(r.recipient_id for r in rest)
        return self.queue.receive(index)

    def _jump_to(self, at_ms: int) -> bool:
        if at_ms <= self.clock():
            return False
        self.clock.now_ms = at_ms
        FIGURES["edge_jumps"] += 1
        return True

    def _observe(self, records) -> None:
        """The quantities `target()` pushes up (kept as each example's peaks; reported once
        at its end): what the escapes of the past runs were made of."""
        now = self.clock()
        open_ = [r for r in records.values() if r.state not in FINAL]
        marks = [r for r in open_ if r.maybe_sent_at_ms]
        peaks = {
            "open deliveries marked longer ago than a lease": sum(now - r.maybe_sent_at_ms > LEASE_MS for r in marks),
            "open deliveries marked longer ago than the window": sum(
                now - r.maybe_sent_at_ms > WINDOW_MS for r in marks
            ),
            "takeovers of open deliveries": sum(max(r.attempts - 1, 0) for r in open_),
            "hours from a first mark to a later claim": max(
                ((self.claimed_at.get(r.recipient_id, 0) - r.maybe_sent_at_ms) // HOUR for r in marks), default=0
            ),
        }
        for label, value in peaks.items():
            self.peaks[label] = max(self.peaks[label], value)

    @family("time")
    @rule(kind=st.sampled_from(INSTANTS), pick=st.integers(0, 3), late=st.booleans())
    def jump_to_an_instant(self, kind, pick, late):
        """Time jumps to exactly an instant the records make interesting, 1 ms before or after
        it: a holder's lease end; the key window's end counted from a delivery's first
        possible acceptance, or from its last claim; a provider key's end; 25 h after a first
        possible acceptance."""
        self._step("jump_to_an_instant")
        edge = 1 if late else -1
        instants = sorted({i + edge for i in self._instants(kind, self._records()) if i + edge > self.clock()})
        if instants:
            self._jump_to(instants[pick % len(instants)])

    @family("time")
    @rule(
        index=st.integers(0, 5),
        edges=st.lists(st.sampled_from(list(EDGES)), min_size=2, max_size=3, unique=True),
        crashes=st.lists(st.integers(0, 2), min_size=3, max_size=3),
    )
    def die_and_return_at_the_edges(self, index, edges, crashes):
        """A consumer dies around its claim or provider call (after the claim, before or after
        the call); the message comes back exactly at the edges of its deliveries' time — the
        holder's lease end, just inside or just past the key window (23 h after the first
        possible acceptance), just past the key's life, 25 h later — each return but the last
        dying the same way. The edges count from the first possible acceptance as it was
        after the first attempt, whatever later claims wrote."""
        self._step("die_and_return")
        message = self.queue.receive(index) or self._publish_the_rest(index)
        if message is None:
            return
        ids = set(self._batch_ids(message))
        points = [self.claim_points[c] for c in crashes]
        self._process(message, crash_at=points[0])
        marks = [r.maybe_sent_at_ms for rid, r in self._records().items() if rid in ids and r.maybe_sent_at_ms]
        anchor = min(marks, default=self.clock())
        edges = sorted(edges, key=lambda e: EDGES[e] or 0)
        for i, edge in enumerate(edges):
            if EDGES[edge] is None:
                records = self._records()
                leases = [records[rid].lease_until_ms or 0 for rid in ids if rid in records]
                at = max(leases, default=0) + 1
            else:
                at = anchor + EDGES[edge]
            self._jump_to(max(at, self.clock() + VISIBILITY_MS + 1))  # and the message is visible again
            message = self.queue.receive_this(message)
            if message is None:
                return
            FIGURES["returns_at_an_edge"] += 1
            self._process(message, crash_at=points[i + 1] if i + 1 < len(edges) else None)

    @family("time")
    @precondition(lambda self: bool(self.queue.visible()) or len(self.published) < len(self.people))
    @rule(
        index=st.integers(0, 5),
        kind=st.sampled_from(["rate_limited", "busy"]),
        late=st.sampled_from(["key+", "25h"]),
    )
    def taken_over_refused_then_back_late(self, index, kind, late):
        """A consumer dies just after the provider accepted its request; past the lease a
        second consumer takes the deliveries over and the provider refuses *its* request;
        the message comes back once the first request's key is forgotten (24 h + 1 ms, or
        25 h, after the first possible acceptance). The refusal says nothing of the first
        request: its mark must outlive the takeover, or the last return sends again with a
        key the provider no longer knows (mutant 1, which swarm selection missed)."""
        self._step("refused_takeover")
        message = self._unsent_message(index) or self._publish_the_rest(index)
        if message is None:
            return
        ids = set(self._batch_ids(message))
        self._process(message, crash_at=("send_batch" if self.mode == "batch" else "send", 1), after=True)
        records = self._records()
        marks = [r.maybe_sent_at_ms for rid, r in records.items() if rid in ids and r.maybe_sent_at_ms]
        leases = [records[rid].lease_until_ms or 0 for rid in ids if rid in records]
        anchor = min(marks, default=self.clock())
        self._jump_to(max(leases + [0]) + VISIBILITY_MS + 1)
        message = self._back(message)
        if message is None:
            return
        FIGURES["refused_takeovers"] += 1
        self.provider.script[:0] = [kind, kind]  # the takeover's call and its in-process retry
        self._process(message)
        self.provider.script.clear()
        self._jump_to(max(anchor + EDGES[late], self.clock() + VISIBILITY_MS + 1))
        message = self._back(message)
        if message is not None:
            self._process(message)

    @family("provider")
    @precondition(lambda self: bool(self.queue.visible()) or len(self.published) < len(self.people))
    @rule(
        index=st.integers(0, 5),
        kind=st.sampled_from(["rate_limited", "busy"]),
        late=st.sampled_from(["window+", "key+", "25h"]),
    )
    def refused_then_back_late(self, index, kind, late):
        """The provider refuses a request outright (nothing accepted), and the message comes
        back only past the replay window. The refusal must lift the marks its request set:
        kept, its deliveries look maybe sent past the window and are closed unknown, never
        sent (mutant 3a; after the A/B rules joined the model, 200 examples of swarm over
        `provider` and `time` no longer drew a refusal followed by a late return). In `provider`:
        in `time` it took the draws mutant 8's search needs."""
        self._step("refused_then_late")
        message = self._unsent_message(index) or self._publish_the_rest(index)
        if message is None:
            return
        self.provider.script[:0] = [kind, kind]  # the call and its in-process retry
        self._process(message)
        self.provider.script.clear()
        self._jump_to(self.clock() + EDGES[late] + VISIBILITY_MS + 1)
        message = self._back(message)
        if message is not None:
            FIGURES["refused_then_late"] += 1
            self._process(message)

    @family("suppress")
    @rule(index=st.integers(0, 5), member=st.integers(0, 1))
    def group_recorded_then_a_member_unsubscribes(self, index, member):
        """Batch mode: a consumer records a send group and dies before claiming it; one of its
        members unsubscribes; the message comes back. The group bound nobody, so the member is
        not sent (mutant 16: a group's number met without reading the batch's groups, as a
        message none of whose recipients has a record is sent, is adopted with its members)."""
        self._step("group_then_unsubscribe")
        records = self._records()  # c1's
        fresh = [
            m
            for m in self.queue.visible()
            if campaign_named_by(m.body) == "c1"
            and len(self._batch_ids(m)) > 1
            and not any(rid in records for rid in self._batch_ids(m))
        ]
        if self.mode != "batch" or not fresh:
            return
        message = self.queue.receive_this(fresh[index % len(fresh)])
        if message is None:
            return
        self._process(message, crash_at=("record_group", 1), after=True)
        ids = self._batch_ids(message)
        self._unsubscribe(next(p for p in self.people if p.recipient_id == ids[member % len(ids)]))
        self._jump_to(self.clock() + VISIBILITY_MS + 1)
        message = self._back(message)
        if message is not None:
            FIGURES["group_then_unsubscribe"] += 1
            self._process(message)

    def _unsent_message(self, index: int):
        """A visible message carrying someone nobody has claimed yet (received), if any."""
        records = self._records()
        unsent = [
            m
            for m in self.queue.visible()
            if any(rid not in records or records[rid].attempts == 0 for rid in self._batch_ids(m))
        ]
        return self.queue.receive_this(unsent[index % len(unsent)]) if unsent else None

    def _back(self, message):
        """The message again (its visibility has passed), or its copy redriven from the DLQ."""
        again = self.queue.receive_this(message)
        if again is None and self.queue.dlq:
            self.queue.redrive()
            again = self.queue.receive(0)
        return again

    @family("receive_limit")
    @rule(
        index=st.integers(0, 5),
        kind=st.sampled_from(["rate_limited", "busy", "concurrent", "timeout_before", "timeout_after"]),
        crash=st.integers(0, 4),
    )
    def last_receive_after_a_refusal(self, index, kind, crash):
        """A message's last receive meets a refusal (released for another attempt) and the
        consumer dies just after the release; SQS then sees the message once more and moves
        it to the DLQ."""
        self._step("last_receive_refused")
        message = self.queue.receive(index) or self._publish_the_rest(index)
        if message is None:
            return
        message.receive_count = self.queue.max_receive_count
        self.provider.script[:0] = [kind, kind]  # the first call and its in-process retry
        self._process(message, crash_at=self.release_points[crash] if crash < len(self.release_points) else None)
        self.provider.script.clear()
        self.clock.advance(VISIBILITY_MS + 1)
        self.queue.receive_this(message)  # past its last receive: to the DLQ


def watch_requests(provider: Any, note: Any) -> None:
    """Call `note(emails)` with each request's emails at the moment the provider is asked
    (one-by-one and batch sends): a rule may consume and then move the clock, so a property
    of the moment of the request is checked when it happens."""
    send, send_batch = provider.send, getattr(provider, "send_batch", None)

    def watched_send(email):
        note([email])
        return send(email)

    provider.send = watched_send
    if send_batch is not None:

        def watched_send_batch(emails, **kwargs):
            note(emails)
            return send_batch(emails, **kwargs)

        provider.send_batch = watched_send_batch
