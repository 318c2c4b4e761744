"""How much time the demo gives a consumer, and how long it waits for anything: both derived
from what it measures on this machine.

The deployed durations are divided by a time scale (180 s -> 4 s at 1/45) so that a run
waits out visibility timeouts in seconds. A scaled function timeout is only honest if one
batch message fits in it as this machine processes it *now*: on a loaded 2-core machine a
100-recipient batch-mode message (100 suppression reads, the group record, two 100-item
transactions, the send) can take longer than 4 s in moto. Then every attempt runs out of
time before the send, the message is received again and again, reaches the dead-letter
queue, and the run never gets the accepted count it waits for (issue 18).

So the demo first times real batch messages through the real consumer and moto
(`sendonce_local.demo.calibration`), then takes the largest time scale, at most the one
asked for, whose function timeout fits the slowest message with HEADROOM to spare. Every
wait of a run is bounded from the run's size and the measured pace (`WaitBounds`), and
`ProgressWatch` stops a run that has stopped moving.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

# Below these, a loopback call on a busy 2-core machine can time out for no reason.
MIN_PROVIDER_TIMEOUT_S = 1
MIN_SAFETY_MARGIN_MS = 1000
# A run adds load the calibration does not have (the publisher, the operator's reads, the
# faults, redeliveries): a batch-mode message, which sends nothing unless it all fits,
# gets twice the slowest measured duration. A single-mode message sends recipient by
# recipient and returns the rest when time runs short, so it needs less.
HEADROOM = {"batch": 2.0, "single": 1.25}
# The smallest scale the demo derives: 180 s -> 60 s, visibility 1,080 s -> 360 s (a
# machine where one message takes ~25 s: measured with a load average of 12 on 2 cores).
# A machine that needs more is too busy for a run of useful length; the demo says so.
MIN_FACTOR = 3
RECIPIENTS_PER_BATCH = 100
# Bounds on the waits: time for processes to start and stop, and the longest operator pause.
STARTUP_ALLOWANCE_S = 60.0
PAUSE_HOLD_MAX_S = 8.0


class DeployedTimeouts(Protocol):
    """What the time scale reads from the deployed consumer (`stack.DeployedConsumer`)."""

    @property
    def timeout_s(self) -> int: ...
    @property
    def visibility_timeout_s(self) -> int: ...
    @property
    def environment(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class TimeScale:
    """Deployed durations divided by `factor`, keeping their proportions.

    The function timeout and the queue's visibility timeout shrink together (still
    6 x apart). The provider timeout and the safety margin shrink too, but not below
    MIN_PROVIDER_TIMEOUT_S / MIN_SAFETY_MARGIN_MS.
    """

    factor: int

    def function_timeout_s(self, consumer: DeployedTimeouts) -> float:
        return consumer.timeout_s / self.factor

    def visibility_timeout_s(self, consumer: DeployedTimeouts) -> int:
        return max(1, math.ceil(consumer.visibility_timeout_s / self.factor))

    def overrides(self, consumer: DeployedTimeouts) -> dict[str, str]:
        env = consumer.environment
        provider_timeout = max(MIN_PROVIDER_TIMEOUT_S, float(env["SENDONCE_PROVIDER_TIMEOUT_SECONDS"]) / self.factor)
        margin = max(MIN_SAFETY_MARGIN_MS, provider_timeout * 1000, int(env["SENDONCE_SAFETY_MARGIN_MS"]) / self.factor)
        return {
            "SENDONCE_PROVIDER_TIMEOUT_SECONDS": f"{provider_timeout:g}",
            "SENDONCE_SAFETY_MARGIN_MS": str(math.ceil(margin)),
        }

    def usable_s(self, consumer: DeployedTimeouts) -> float:
        """What an invocation may spend before the consumer stops starting sends: the
        function timeout less the safety margin."""
        return self.function_timeout_s(consumer) - int(self.overrides(consumer)["SENDONCE_SAFETY_MARGIN_MS"]) / 1000


@dataclass(frozen=True)
class Calibration:
    """Batch messages timed through the real consumer and moto, with the deployed
    concurrency and no time pressure (the deployed, unscaled function timeout)."""

    messages: int
    slowest_message_s: float  # the handler's duration for one message, runtime already built
    median_message_s: float
    init_s: float  # the slowest runtime build (Lambda's init phase, outside the timeout)
    seconds: float  # wall time of the calibration

    @classmethod
    def from_timings(cls, timings: list[Mapping[str, float]], *, seconds: float) -> Calibration:
        durations = sorted(t["handler_s"] / max(1, t.get("messages", 1)) for t in timings if "handler_s" in t)
        if not durations:
            raise ValueError("the calibration timed no message")
        return cls(
            messages=len(durations),
            slowest_message_s=durations[-1],
            median_message_s=durations[len(durations) // 2],
            init_s=max((t["init_s"] for t in timings if "init_s" in t), default=0.0),
            seconds=seconds,
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "messages": self.messages,
            "slowest_message_s": round(self.slowest_message_s, 2),
            "median_message_s": round(self.median_message_s, 2),
            "init_s": round(self.init_s, 2),
            "seconds": round(self.seconds, 1),
        }


class MachineTooBusyError(RuntimeError):
    """No time scale down to MIN_FACTOR fits the measured message duration."""


@dataclass(frozen=True)
class ScaleChoice:
    scale: TimeScale
    ceiling: int  # the factor asked for (--time-scale, or the provider's default)
    needed_s: float  # what one message needs: HEADROOM x the slowest measured
    usable_s: float  # what the chosen scale gives it

    @property
    def lowered(self) -> bool:
        return self.scale.factor < self.ceiling

    def explain(self) -> str:
        head = f"time scale 1/{self.scale.factor}"
        if self.lowered:
            head += f" (lowered from 1/{self.ceiling})"
        return (
            f"{head}: a message needs {self.needed_s:.1f} s (the slowest measured, with headroom); "
            f"the scaled function timeout leaves it {self.usable_s:.1f} s"
        )


def choose_time_scale(
    consumer: DeployedTimeouts, calibration: Calibration, *, delivery_mode: str, ceiling: int
) -> ScaleChoice:
    """The largest factor, at most `ceiling`, whose function timeout less the safety margin
    fits the slowest measured message with HEADROOM to spare."""
    needed = HEADROOM[delivery_mode] * calibration.slowest_message_s
    for factor in range(ceiling, min(ceiling, MIN_FACTOR) - 1, -1):
        scale = TimeScale(factor)
        usable = scale.usable_s(consumer)
        if usable >= needed:
            return ScaleChoice(scale=scale, ceiling=ceiling, needed_s=needed, usable_s=usable)
    largest = TimeScale(min(ceiling, MIN_FACTOR)).usable_s(consumer)
    raise MachineTooBusyError(
        f"one batch message took {calibration.slowest_message_s:.1f} s here (median "
        f"{calibration.median_message_s:.1f} s over {calibration.messages}); with headroom it needs "
        f"{needed:.1f} s, more than the {largest:.1f} s the longest scaled timeout (1/{MIN_FACTOR}) gives. "
        "This machine is too busy for the demo right now: try again when it is quieter, or with fewer "
        "--recipients."
    )


@dataclass(frozen=True)
class WaitBounds:
    """How long a run may take, and how long it may go without progress."""

    run_s: float
    stuck_s: float

    @classmethod
    def derive(
        cls,
        *,
        recipients: int,
        calibration: Calibration,
        function_timeout_s: float,
        visibility_timeout_s: float,
        concurrency: int,
        max_receive_count: int,
        stalls: int,
        delivery_mode: str,
    ) -> WaitBounds:
        batches = math.ceil(recipients / RECIPIENTS_PER_BATCH)
        # One receive that ends nothing: the invocation, then the message invisible.
        cycle = function_timeout_s + visibility_timeout_s
        # Every batch at the measured pace with headroom, twice over (resume republishes the
        # recipients that had not ended, at most all of them).
        work = HEADROOM[delivery_mode] * 2 * batches * calibration.slowest_message_s / max(1, concurrency)
        # A message that makes no progress is in the dead-letter queue after max_receive_count
        # cycles; nothing legitimate keeps a run still longer than that.
        stuck = (max_receive_count + 1) * cycle + PAUSE_HOLD_MAX_S
        run = STARTUP_ALLOWANCE_S + work + stuck + stalls * cycle + PAUSE_HOLD_MAX_S + calibration.init_s
        return cls(run_s=math.ceil(run), stuck_s=math.ceil(stuck))

    def as_dict(self) -> dict[str, float]:
        return {"run_s": self.run_s, "stuck_s": self.stuck_s}


class RunStuckError(RuntimeError):
    """A run passed one of its bounds; `what` is what it was waiting for."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.what = what
        self.reason = reason


class ProgressWatch:
    """Progress is a higher accepted count or a shorter queue than ever seen in the run.
    `check` raises RunStuckError once the run is past `bounds.run_s`, or has not
    progressed for `bounds.stuck_s`."""

    def __init__(self, bounds: WaitBounds, clock: Callable[[], float] = time.monotonic) -> None:
        self.bounds = bounds
        self._clock = clock
        self.started = self._last_progress = clock()
        self._accepted = -1
        self._queued: int | None = None

    def observe(self, *, accepted: int, queued: int | None = None) -> None:
        moved = accepted > self._accepted
        self._accepted = max(self._accepted, accepted)
        if queued is not None and (self._queued is None or queued < self._queued):
            moved = True
            self._queued = queued
        if moved:
            self._last_progress = self._clock()

    def restart_progress(self) -> None:
        """After the demo itself changed the queue (a redrive): the queue's new low starts afresh."""
        self._queued = None
        self._last_progress = self._clock()

    def idle_s(self) -> float:
        return self._clock() - self._last_progress

    def check(self, what: str) -> None:
        now = self._clock()
        if now - self.started > self.bounds.run_s:
            raise RunStuckError(
                what, f"the run passed its bound of {self.bounds.run_s:.0f} s (from its size and the measured pace)"
            )
        if now - self._last_progress > self.bounds.stuck_s:
            raise RunStuckError(
                what,
                f"no progress (no email accepted, the queue no shorter) for {self.bounds.stuck_s:.0f} s, longer "
                "than a message takes to reach the dead-letter queue",
            )


def wait_until(
    predicate: Callable[[], object],
    *,
    watch: ProgressWatch,
    what: str,
    interval_s: float = 0.1,
    timeout_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> object:
    """`predicate()`'s first truthy value; RunStuckError when the watch says the run is
    stuck, or after `timeout_s` (a bound of this wait alone) if given."""
    deadline = None if timeout_s is None else clock() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        watch.check(what)
        if deadline is not None and clock() > deadline:
            raise RunStuckError(what, f"not reached within {timeout_s:g} s")
        sleep(interval_s)
