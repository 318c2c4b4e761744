"""The campaign lifecycle as data: one transition table, read by the code, the docs and the tests.

Every state change of a campaign, the automatic ones included, is a row here, and every
caller changes state through `apply`, which turns the rows of one event into conditional
writes. Reading a campaign (status, watch) never changes its state: completion is the
`complete` event, taken by a consumer when the ledger says nothing remains and no publish
is under way (its lease is in the campaign item, checked in the same conditional write).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum

from sendonce.domain.campaigns.ports import CampaignRecords, StateChange
from sendonce.domain.errors import IllegalTransitionError
from sendonce.domain.models import Campaign, CampaignState

C = CampaignState

AUTOMATIC = "sendonce (automatic)"
AUTOMATIC_HALT = "sendonce (automatic halt)"


class CampaignEvent(StrEnum):
    PUBLISH = "publish"
    SCHEDULE = "schedule"
    RESCHEDULE = "reschedule"
    UNSCHEDULE = "unschedule"
    START = "start"
    PAUSE = "pause"
    HALT = "halt"
    BRAKE = "brake"
    RESUME = "resume"
    REOPEN_UNKNOWN = "reopen_unknown"
    CANCEL = "cancel"
    COMPLETE = "complete"
    WINDOW_CLOSE = "window_close"
    WINDOW_OPEN = "window_open"


@dataclass(frozen=True)
class CampaignTransition:
    event: CampaignEvent
    source: CampaignState
    target: CampaignState
    by: str  # who takes it: operator, or sendonce on its own
    guard: str = ""
    # A row that stays in its state keeps who set it and why, unless it takes the state over.
    takes_over: bool = False


T = CampaignTransition
E = CampaignEvent
TRANSITIONS: tuple[CampaignTransition, ...] = (
    T(E.PUBLISH, C.DRAFT, C.SENDING, "operator", "opens a publish lease; enqueues batches an unschedule left"),
    T(E.PUBLISH, C.SCHEDULED, C.SCHEDULED, "operator", "opens a publish lease; recorded, enqueued at the start"),
    T(E.SCHEDULE, C.DRAFT, C.SCHEDULED, "operator", "publish --at: opens a publish lease; records, enqueues nothing"),
    T(E.RESCHEDULE, C.SCHEDULED, C.SCHEDULED, "operator", "moves send_at and its one-time schedule"),
    T(E.UNSCHEDULE, C.SCHEDULED, C.DRAFT, "operator", "deletes the schedule; recorded recipients kept"),
    T(
        E.START,
        C.SCHEDULED,
        C.SENDING,
        "sendonce",
        "the schedule fired for exactly send_at; no publish lease live; a job enqueues every recorded batch",
    ),
    T(E.PUBLISH, C.SENDING, C.SENDING, "operator", "opens a publish lease"),
    T(E.PUBLISH, C.PAUSED, C.PAUSED, "operator", "opens a publish lease; recorded, sent on resume"),
    T(E.PUBLISH, C.COMPLETED, C.SENDING, "operator", "new recipients reopen it; opens a publish lease"),
    T(E.PAUSE, C.SENDING, C.PAUSED, "operator"),
    T(
        E.PAUSE,
        C.PAUSED,
        C.PAUSED,
        "operator",
        "the pause becomes the operator's (who, why): no window opening resumes it",
        takes_over=True,
    ),
    T(
        E.HALT,
        C.SENDING,
        C.PAUSED,
        "sendonce",
        "the provider refuses every send (quota, suspended key), or the account health check reads an account that cannot send",
    ),
    T(E.BRAKE, C.SENDING, C.PAUSED, "sendonce", "complaint or bounce rate over its brake"),
    T(
        E.WINDOW_CLOSE,
        C.SENDING,
        C.PAUSED,
        "sendonce",
        "a consumer read the campaign outside its send window, or found its sending domain's warm-up cap for"
        " the day reached; sets the one-time schedule of the next opening (the next day's, for warm-up)",
    ),
    T(E.RESUME, C.PAUSED, C.SENDING, "operator", "republishes every recipient that has not ended"),
    T(
        E.WINDOW_OPEN,
        C.PAUSED,
        C.SENDING,
        "sendonce",
        "the opening's schedule fired; only while paused by the window (or the warm-up cap) for exactly that"
        " opening (never an operator's, a halt's or a brake's pause); republishes every recipient that has not"
        " ended",
    ),
    T(E.RESUME, C.SENDING, C.SENDING, "operator", "republishes every recipient that has not ended"),
    T(E.REOPEN_UNKNOWN, C.COMPLETED, C.PAUSED, "operator", "some unknown outcomes reopened (resume follows)"),
    T(E.CANCEL, C.DRAFT, C.CANCELLED, "operator", "republishes the rest so consumers close them"),
    T(E.CANCEL, C.SCHEDULED, C.CANCELLED, "operator", "deletes the schedule; closes the recorded recipients"),
    T(E.CANCEL, C.SENDING, C.CANCELLED, "operator", "republishes the rest so consumers close them"),
    T(E.CANCEL, C.PAUSED, C.CANCELLED, "operator", "republishes the rest so consumers close them"),
    T(
        E.COMPLETE,
        C.SENDING,
        C.COMPLETED,
        "sendonce",
        "every published recipient ended; no publish lease live; open batches reset",
    ),
)


def sources(event: CampaignEvent) -> list[CampaignState]:
    return [t.source for t in TRANSITIONS if t.event is event]


def writes(event: CampaignEvent) -> list[tuple[CampaignState, list[CampaignState], bool]]:
    """The conditional writes that take `event`: (target, sources, stays). A row that stays
    in its state gets a write of its own, which keeps who changed the state and why (unless
    the row takes the state over: then it records its own)."""
    by_target: dict[tuple[CampaignState, bool], list[CampaignState]] = defaultdict(list)
    for t in TRANSITIONS:
        if t.event is event:
            by_target[(t.target, t.source is t.target and not t.takes_over)].append(t.source)
    return [(target, allowed, stays) for (target, stays), allowed in by_target.items()]


def can(event: CampaignEvent, state: CampaignState) -> bool:
    return state in sources(event)


def leaves_mark(event: CampaignEvent, *, stays: bool) -> bool:
    """Whether taking `event` marks the campaign report's timeline: every move does, but a
    publish that keeps the state (a publish lease opened or renewed, possibly many times)."""
    return not (stays and event is CampaignEvent.PUBLISH)


def apply(
    store: CampaignRecords,
    campaign_id: str,
    event: CampaignEvent,
    *,
    by: str,
    reason: str | None = None,
    publishing_until_ms: int | None = None,
    holder: str | None = None,
    unless_publishing_at_ms: int | None = None,
    open_batches: int | None = None,
    send_at_ms: int | None = None,
    clear_send_at: bool = False,
    if_send_at_ms: int | None = None,
    if_reason: str | None = None,
) -> Campaign:
    """Take `event` on the campaign: one conditional write per target state of the event
    (most events have one), tried until one matches the campaign's current state.
    `send_at_ms` sets the start time, `clear_send_at` removes it, `if_send_at_ms` makes the
    write conditional on it (a schedule's firing starts only the time it was set for);
    `if_reason` on the current state's reason (a window's opening resumes only its own pause)."""
    last: IllegalTransitionError | None = None
    for target, allowed, stays in writes(event):
        try:
            change = StateChange(
                to=target,
                allowed_from=tuple(allowed),
                by=by,
                reason=reason,
                stays=stays,
                mark=event.value if leaves_mark(event, stays=stays) else None,
                publishing_until_ms=publishing_until_ms,
                holder=holder,
                unless_publishing_at_ms=unless_publishing_at_ms,
                open_batches=open_batches,
                send_at_ms=send_at_ms,
                clear_send_at=clear_send_at,
                if_send_at_ms=if_send_at_ms,
                if_reason=if_reason,
            )
            return store.transition(campaign_id, change)
        except IllegalTransitionError as exc:
            last = exc
    assert last is not None
    raise IllegalTransitionError(f"{event.value}: {last}") from last


def mermaid() -> str:
    lines = ["stateDiagram-v2", "    [*] --> draft: create"]
    for t in TRANSITIONS:
        lines.append(f"    {t.source.value} --> {t.target.value}: {t.event.value}")
    lines += ["    completed --> [*]", "    cancelled --> [*]"]
    return "\n".join(lines)


def table() -> str:
    rows = ["| event | from | to | by | guard / effect |", "|---|---|---|---|---|"]
    for t in TRANSITIONS:
        rows.append(f"| `{t.event.value}` | {t.source.value} | {t.target.value} | {t.by} | {t.guard} |")
    return "\n".join(rows)
