"""The delivery protocol as data: one claim table and one transition table.

Everything that decides what may happen to a delivery reads these tables: the pure
`classify` (used by the in-memory ledger and by batch mode to form groups), the DynamoDB
ledger (whose fenced writes take their allowed states from `TRANSITIONS` and whose claim
condition is checked row by row against `CLAIM_RULES` by tests/integration), the model
check (tests/model) and docs/ledger.md (its diagram and tables are generated from here
and checked by a test).

Why a delivery's record carries `maybe_sent_at_ms` and `maybe_sent_by`: a provider may
have accepted an email whenever a consumer held the delivery with the provider call
possible (Resend: from the claim on, since a consumer may die after Resend accepted and
before anything is written; SES: from `in_flight`). The earliest such moment is kept
(set if absent, never moved later), because Resend's idempotency key lives 24 h from the
*first* request: every repeat must happen within `IDEMPOTENCY_WINDOW_MS` of it, or the
delivery ends `unknown`. The mark is lifted only by the consumer that set it, and only
when the provider definitely refused every request of that claim; a refusal seen by a
later consumer proves nothing about an earlier consumer's request.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sendonce.domain.models import FINAL_STATES, HELD_STATES, DeliveryRecord, DeliveryState

S = DeliveryState

# Resend keeps an idempotency key for 24 h. A repeat is started at most this long after
# the first attempt that may have reached it; a lease (at most the Lambda's 15 min) ends
# well inside the remaining hour.
IDEMPOTENCY_WINDOW_MS = 23 * 3600 * 1000

FINAL = FINAL_STATES
HELD = HELD_STATES
OPEN = frozenset({S.PENDING, S.DEAD_LETTERED})  # not ended, held by nobody
ABSENT = None  # published, never claimed: no item yet


class Verdict(StrEnum):
    CLAIM = "claim"  # take it: this owner holds it until its lease ends
    FINAL = "final"  # already ended: nothing to do (a duplicate prevented)
    HELD = "held"  # another owner holds a live lease: come back when it ends
    CONFLICT = "conflict"  # claimed before with other content: never sent, reported
    STALE = "stale"  # may have been accepted and cannot be repeated safely: close as unknown
    GROUPED = "grouped"  # sent, if at all, under another key: only a repeat under that key may send it


class Lease(StrEnum):
    NONE = "none"
    LIVE = "live"
    EXPIRED = "expired"


class MaybeSent(StrEnum):
    NO = "no"  # no attempt can have been accepted
    FRESH = "fresh"  # the first such attempt is inside the window
    OLD = "old"  # ... outside it


class Group(StrEnum):
    """Under which idempotency key an attempt that may have been accepted went out."""

    NONE = "none"  # the caller's own key (or no such attempt)
    OTHER = "other"  # another key: a batch-mode group's, or the delivery's own when the caller is a group


@dataclass(frozen=True)
class Facts:
    """What the claim rules look at, computed from a record and the caller."""

    state: DeliveryState | None
    same_payload: bool = True
    lease: Lease = Lease.NONE
    maybe_sent: MaybeSent = MaybeSent.NO
    group: Group = Group.NONE
    keyed: bool = True  # the provider honours an idempotency key (Resend), or not (SES)


ANY = None


@dataclass(frozen=True)
class ClaimRule:
    states: frozenset[DeliveryState | None] | None  # None: any state (the absent record included)
    verdict: Verdict
    why: str
    same_payload: bool | None = ANY
    lease: Lease | None = ANY
    maybe_sent: MaybeSent | None = ANY
    group: Group | None = ANY
    keyed: bool | None = ANY

    def matches(self, facts: Facts) -> bool:
        if self.states is not None and facts.state not in self.states:
            return False
        return all(
            want is ANY or want == getattr(facts, name)
            for name, want in (
                ("same_payload", self.same_payload),
                ("lease", self.lease),
                ("maybe_sent", self.maybe_sent),
                ("group", self.group),
                ("keyed", self.keyed),
            )
        )


# First matching row wins. Order matters and is part of the protocol.
CLAIM_RULES: tuple[ClaimRule, ...] = (
    ClaimRule(frozenset({ABSENT}), Verdict.CLAIM, "published, never claimed"),
    ClaimRule(None, Verdict.CONFLICT, "claimed before with other content", same_payload=False),
    ClaimRule(FINAL, Verdict.FINAL, "already ended"),
    ClaimRule(HELD, Verdict.HELD, "its owner's lease is live", lease=Lease.LIVE),
    ClaimRule(
        OPEN | HELD,
        Verdict.STALE,
        "an attempt may have been accepted longer ago than the key window",
        maybe_sent=MaybeSent.OLD,
    ),
    ClaimRule(
        OPEN | HELD,
        Verdict.GROUPED,
        "a request under another key may have carried it",
        maybe_sent=MaybeSent.FRESH,
        group=Group.OTHER,
    ),
    ClaimRule(OPEN | HELD, Verdict.CLAIM, "nothing can have been accepted", maybe_sent=MaybeSent.NO),
    ClaimRule(
        OPEN | HELD,
        Verdict.CLAIM,
        "repeated under the same key inside its window",
        maybe_sent=MaybeSent.FRESH,
        keyed=True,
    ),
    ClaimRule(
        OPEN | HELD,
        Verdict.STALE,
        "may have been accepted and the provider has no key",
        maybe_sent=MaybeSent.FRESH,
        keyed=False,
    ),
)


def facts(
    record: DeliveryRecord | None,
    *,
    payload_hash: str,
    provider_idempotent: bool,
    now_ms: int,
    group_key: str | None = None,
) -> Facts:
    if record is None:
        return Facts(state=ABSENT, keyed=provider_idempotent)
    if record.state in HELD:
        lease = Lease.LIVE if record.lease_until_ms is not None and record.lease_until_ms >= now_ms else Lease.EXPIRED
    else:
        lease = Lease.NONE
    if record.maybe_sent_at_ms is None:
        maybe = MaybeSent.NO
    elif record.maybe_sent_at_ms > now_ms - IDEMPOTENCY_WINDOW_MS:
        maybe = MaybeSent.FRESH
    else:
        maybe = MaybeSent.OLD
    # The key an earlier attempt used: its group's, or the delivery's own (no group).
    other_key = maybe is not MaybeSent.NO and record.group_key != group_key
    return Facts(
        state=record.state,
        same_payload=not record.payload_hash or record.payload_hash == payload_hash,
        lease=lease,
        maybe_sent=maybe,
        group=Group.OTHER if other_key else Group.NONE,
        keyed=provider_idempotent,
    )


def rule_for(f: Facts) -> ClaimRule:
    for rule in CLAIM_RULES:
        if rule.matches(f):
            return rule
    raise ValueError(f"no claim rule covers {f}")  # a hole in the table: tests enumerate every combination


def classify(
    record: DeliveryRecord | None,
    *,
    payload_hash: str,
    provider_idempotent: bool,
    now_ms: int,
    group_key: str | None = None,
) -> Verdict:
    """What a claim on `record` may do. `group_key` is the caller's send group in batch
    mode (None: one recipient on its own)."""
    return rule_for(
        facts(
            record,
            payload_hash=payload_hash,
            provider_idempotent=provider_idempotent,
            now_ms=now_ms,
            group_key=group_key,
        )
    ).verdict


# --- transitions -----------------------------------------------------------------------


class Event(StrEnum):
    CLAIM = "claim"
    MARK_IN_FLIGHT = "mark_in_flight"
    MARK_SENT = "mark_sent"
    SETTLE_REFUSED = "settle_refused"
    SETTLE_REPEATABLE = "settle_repeatable"
    SETTLE_REFUSED_LAST_RECEIVE = "settle_refused_last_receive"
    SETTLE_REPEATABLE_LAST_RECEIVE = "settle_repeatable_last_receive"
    SETTLE_FAILED = "settle_failed"
    SETTLE_SUPPRESSED = "settle_suppressed"
    SETTLE_UNKNOWN = "settle_unknown"
    CLOSE_STALE = "close_stale"
    CLOSE_DEAD_LETTERED = "close_dead_lettered"
    CLOSE_CANCELLED = "close_cancelled"
    CLOSE_CANCELLED_MAYBE_SENT = "close_cancelled_maybe_sent"
    CLOSE_SUPPRESSED = "close_suppressed"
    PROVIDER_SENT = "provider_sent"
    PROVE_NOT_SENT = "prove_not_sent"
    REOPEN_UNKNOWN = "reopen_unknown"


@dataclass(frozen=True)
class Transition:
    event: Event
    sources: tuple[DeliveryState | None, ...]
    target: DeliveryState
    fence: str  # what the conditional write requires besides the source state
    effect: str  # what the write does to the protocol's marks


_OWNER = "owner = me"
TRANSITIONS: tuple[Transition, ...] = (
    Transition(
        Event.CLAIM,
        (ABSENT, S.PENDING, S.DEAD_LETTERED, S.CLAIMED, S.IN_FLIGHT),
        S.CLAIMED,
        "a claim rule says claim",
        "new owner and lease; keyed provider: maybe_sent set if absent",
    ),
    Transition(
        Event.MARK_IN_FLIGHT, (S.CLAIMED,), S.IN_FLIGHT, _OWNER, "unkeyed provider: maybe_sent set before the call"
    ),
    Transition(
        Event.MARK_SENT,
        (S.CLAIMED, S.IN_FLIGHT, S.UNKNOWN),
        S.SENT,
        _OWNER,
        "provider message id kept; from unknown only for the owner closed as unknown: its receipt is the proof",
    ),
    Transition(
        Event.SETTLE_REFUSED,
        (S.CLAIMED, S.IN_FLIGHT),
        S.PENDING,
        _OWNER,
        "every request of this claim was refused: maybe_sent (and group) lifted if this owner set it",
    ),
    Transition(
        Event.SETTLE_REPEATABLE,
        (S.CLAIMED,),
        S.PENDING,
        _OWNER,
        "ambiguous answer, keyed provider: maybe_sent kept, repeated under the same key",
    ),
    # On the message's last receive SQS moves it to the DLQ unless this attempt ends it: a
    # delivery released then is dead-lettered in the same write, so that a crash after it
    # leaves nobody pending behind a message in the DLQ.
    Transition(
        Event.SETTLE_REFUSED_LAST_RECEIVE,
        (S.CLAIMED, S.IN_FLIGHT),
        S.DEAD_LETTERED,
        _OWNER + "; the message's last receive",
        "as settle_refused; the reason kept for the redrive",
    ),
    Transition(
        Event.SETTLE_REPEATABLE_LAST_RECEIVE,
        (S.CLAIMED,),
        S.DEAD_LETTERED,
        _OWNER + "; the message's last receive",
        "as settle_repeatable: maybe_sent kept",
    ),
    Transition(Event.SETTLE_FAILED, (S.CLAIMED, S.IN_FLIGHT), S.FAILED, _OWNER, "permanent refusal, reason kept"),
    Transition(
        Event.SETTLE_SUPPRESSED,
        (S.CLAIMED,),
        S.SUPPRESSED,
        _OWNER + "; no other owner's attempt may have been accepted",
        "address on the suppression list; never called (else `settle_unknown`)",
    ),
    Transition(
        Event.SETTLE_UNKNOWN,
        (S.CLAIMED, S.IN_FLIGHT),
        S.UNKNOWN,
        _OWNER,
        "ambiguous answer that cannot be repeated (unkeyed provider, or the key was used for other content)",
    ),
    Transition(
        Event.CLOSE_STALE,
        (S.PENDING, S.DEAD_LETTERED, S.CLAIMED, S.IN_FLIGHT),
        S.UNKNOWN,
        "a claim rule says stale; same state and owner as read",
        "never re-sent automatically",
    ),
    Transition(
        Event.CLOSE_DEAD_LETTERED,
        (ABSENT, S.PENDING),
        S.DEAD_LETTERED,
        "the message's last receive",
        "reason kept; claimable by a redrive or resume",
    ),
    Transition(
        Event.CLOSE_CANCELLED,
        (ABSENT, S.PENDING, S.DEAD_LETTERED, S.CLAIMED),
        S.CANCELLED,
        "campaign cancelled; nobody holds it (lease expired) and nothing can have been accepted",
        "",
    ),
    Transition(
        Event.CLOSE_CANCELLED_MAYBE_SENT,
        (S.PENDING, S.DEAD_LETTERED, S.CLAIMED, S.IN_FLIGHT),
        S.UNKNOWN,
        "campaign cancelled; nobody holds it and an attempt may have been accepted",
        "a provider 'sent' event can still resolve it",
    ),
    Transition(
        Event.CLOSE_SUPPRESSED,
        (ABSENT, S.PENDING, S.DEAD_LETTERED),
        S.SUPPRESSED,
        "an unsubscribe or complaint for a delivery nobody holds",
        "",
    ),
    Transition(
        Event.PROVIDER_SENT,
        (S.UNKNOWN,),
        S.SENT,
        "a provider event, or an audit of the provider's own records, says it was sent",
        "provider message id kept",
    ),
    # An audit (domain/audit) settles an unknown by evidence: absent from a complete
    # listing of the provider's sent emails that covers its whole window, it is proven
    # not sent; it stays unknown (ended, never re-sent automatically) but may be reopened.
    Transition(
        Event.PROVE_NOT_SENT,
        (S.UNKNOWN,),
        S.UNKNOWN,
        "no provider 'sent' evidence; absent from a complete provider listing covering its window",
        "proven_not_sent_at and the audit kept",
    ),
    Transition(
        Event.REOPEN_UNKNOWN,
        (S.UNKNOWN,),
        S.PENDING,
        "proven not sent by an audit (or an operator accepts a possible second email: `--accept-possible-duplicates`)",
        "maybe_sent, group and the proof lifted",
    ),
)

_BY_EVENT = {t.event: t for t in TRANSITIONS}


def transition(event: Event) -> Transition:
    return _BY_EVENT[event]


def sources(event: Event) -> list[str]:
    """The states a fenced write for `event` may start from (absent excluded), as strings."""
    return [s.value for s in _BY_EVENT[event].sources if s is not None]


def allows_absent(event: Event) -> bool:
    return ABSENT in _BY_EVENT[event].sources


def settle_event(state: DeliveryState, *, maybe_sent: bool) -> Event:
    """The transition a settlement to `state` is."""
    if state is S.PENDING:
        return Event.SETTLE_REPEATABLE if maybe_sent else Event.SETTLE_REFUSED
    if state is S.DEAD_LETTERED:
        return Event.SETTLE_REPEATABLE_LAST_RECEIVE if maybe_sent else Event.SETTLE_REFUSED_LAST_RECEIVE
    return {S.FAILED: Event.SETTLE_FAILED, S.SUPPRESSED: Event.SETTLE_SUPPRESSED, S.UNKNOWN: Event.SETTLE_UNKNOWN}[
        state
    ]


def cancel_event(record: DeliveryRecord | None, *, now_ms: int) -> Event | None:
    """What a cancelled campaign does to a delivery (None: nothing now; a live holder
    finishes first, an ended delivery stays as it is)."""
    if record is None:
        return Event.CLOSE_CANCELLED
    if record.state in FINAL:
        return None
    if record.state in HELD and record.lease_until_ms is not None and record.lease_until_ms >= now_ms:
        return None
    if record.maybe_sent_at_ms is not None or record.state is S.IN_FLIGHT:
        return Event.CLOSE_CANCELLED_MAYBE_SENT
    return Event.CLOSE_CANCELLED


# --- generated documentation -------------------------------------------------------------


def _name(state: DeliveryState | None) -> str:
    return "[*]" if state is None else state.value


def mermaid() -> str:
    lines = ["stateDiagram-v2"]
    for t in TRANSITIONS:
        for source in t.sources:
            lines.append(f"    {_name(source)} --> {t.target.value}: {t.event.value}")
    for state in sorted(FINAL - {S.UNKNOWN}, key=str):
        lines.append(f"    {state.value} --> [*]")
    return "\n".join(lines)


def claim_table() -> str:
    def cell(value: object) -> str:
        return "·" if value is ANY else (("yes" if value else "no") if isinstance(value, bool) else str(value))

    rows = [
        "| # | states | same payload | lease | maybe sent | group | keyed provider | verdict | why |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(CLAIM_RULES, 1):
        states = "any" if r.states is None else ", ".join(sorted(_name(s).replace("[*]", "absent") for s in r.states))
        rows.append(
            f"| {i} | {states} | {cell(r.same_payload)} | {cell(r.lease)} | {cell(r.maybe_sent)} | {cell(r.group)}"
            f" | {cell(r.keyed)} | **{r.verdict.value}** | {r.why} |"
        )
    return "\n".join(rows)


def transition_table() -> str:
    rows = ["| event | from | to | requires | effect |", "|---|---|---|---|---|"]
    for t in TRANSITIONS:
        froms = ", ".join(_name(s).replace("[*]", "absent") for s in t.sources)
        rows.append(f"| `{t.event.value}` | {froms} | {t.target.value} | {t.fence} | {t.effect} |")
    return "\n".join(rows)
