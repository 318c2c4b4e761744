"""The demo's time scale comes from what it measured, and every wait of a run is bounded
(issue 18: on a loaded 2-core machine a batch-mode message outgrew the fixed 4 s function
timeout; the run dead-lettered messages and waited for an accepted count it could not reach)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sendonce_local.demo.report import RunResult, stuck_lines, verdict
from sendonce_local.demo.timing import (
    HEADROOM,
    MIN_FACTOR,
    Calibration,
    MachineTooBusyError,
    ProgressWatch,
    RunStuckError,
    TimeScale,
    WaitBounds,
    choose_time_scale,
    wait_until,
)


@dataclass(frozen=True)
class Deployed:
    """The stack's consumer as deployed (sendonce_cdk defaults)."""

    timeout_s: int = 180
    visibility_timeout_s: int = 1080
    environment: dict[str, str] = field(
        default_factory=lambda: {"SENDONCE_PROVIDER_TIMEOUT_SECONDS": "10", "SENDONCE_SAFETY_MARGIN_MS": "15000"}
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def measured(slowest_s: float, median_s: float | None = None) -> Calibration:
    return Calibration(
        messages=4, slowest_message_s=slowest_s, median_message_s=median_s or slowest_s, init_s=2.0, seconds=10.0
    )


# --- the time scale -------------------------------------------------------------------


def test_a_quiet_machine_keeps_the_scale_asked_for():
    choice = choose_time_scale(Deployed(), measured(0.8), delivery_mode="batch", ceiling=45)

    assert choice.scale == TimeScale(45) and not choice.lowered
    assert choice.scale.function_timeout_s(Deployed()) == 4 and choice.scale.visibility_timeout_s(Deployed()) == 24


def test_a_slow_batch_message_gets_a_function_timeout_it_fits_in():
    # Given a loaded machine where one 100-recipient batch-mode message takes 2.5 s
    # (the fixed 1/45 scale leaves it 4 s - 1 s margin = 3 s: too little to be sure to send)
    deployed = Deployed()

    choice = choose_time_scale(deployed, measured(2.5), delivery_mode="batch", ceiling=45)

    # Then the largest scale whose timeout, less the margin, holds the message with headroom
    scale = choice.scale
    assert choice.lowered and scale.factor < 45
    assert scale.usable_s(deployed) >= HEADROOM["batch"] * 2.5
    assert TimeScale(scale.factor + 1).usable_s(deployed) < HEADROOM["batch"] * 2.5
    # and the stack's proportions still hold: visibility >= 6 x the function timeout
    assert scale.visibility_timeout_s(deployed) >= 6 * scale.function_timeout_s(deployed)
    assert "lowered from 1/45" in choice.explain()


def test_single_mode_needs_less_headroom_than_batch_mode():
    batch = choose_time_scale(Deployed(), measured(3.0), delivery_mode="batch", ceiling=45)
    single = choose_time_scale(Deployed(), measured(3.0), delivery_mode="single", ceiling=45)

    assert single.scale.factor > batch.scale.factor


def test_the_scale_never_goes_above_the_one_asked_for():
    choice = choose_time_scale(Deployed(), measured(0.1), delivery_mode="batch", ceiling=30)

    assert choice.scale.factor == 30


def test_a_machine_too_busy_for_any_scale_is_told_so():
    with pytest.raises(MachineTooBusyError, match=r"took 40\.0 s.*too busy"):
        choose_time_scale(Deployed(), measured(40.0), delivery_mode="batch", ceiling=45)
    # The smallest scale it tries is MIN_FACTOR, and that one fits a message just under the limit.
    limit = 0.999 * TimeScale(MIN_FACTOR).usable_s(Deployed()) / HEADROOM["batch"]
    assert choose_time_scale(Deployed(), measured(limit), delivery_mode="batch", ceiling=45).scale.factor == MIN_FACTOR


def test_the_scaled_provider_timeout_and_margin_keep_their_floors():
    overrides = TimeScale(45).overrides(Deployed())

    assert overrides == {"SENDONCE_PROVIDER_TIMEOUT_SECONDS": "1", "SENDONCE_SAFETY_MARGIN_MS": "1000"}
    assert TimeScale(45).usable_s(Deployed()) == 3


def test_calibration_reads_the_consumers_timings():
    timings = [
        {"init_s": 2.5},
        {"handler_s": 1.2, "messages": 1},
        {"handler_s": 0.9, "messages": 1},
        {"init_s": 3.0},
        {"handler_s": 2.0, "messages": 1},
        {"handler_s": 1.0, "messages": 1},
    ]

    calibration = Calibration.from_timings(timings, seconds=7.0)

    assert (calibration.messages, calibration.slowest_message_s, calibration.init_s) == (4, 2.0, 3.0)
    assert calibration.median_message_s == 1.2
    with pytest.raises(ValueError, match="timed no message"):
        Calibration.from_timings([{"init_s": 1.0}], seconds=1.0)


# --- bounded waits --------------------------------------------------------------------


def bounds_for(recipients: int, slowest_s: float) -> WaitBounds:
    scale = choose_time_scale(Deployed(), measured(slowest_s), delivery_mode="batch", ceiling=45).scale
    return WaitBounds.derive(
        recipients=recipients,
        calibration=measured(slowest_s),
        function_timeout_s=scale.function_timeout_s(Deployed()),
        visibility_timeout_s=scale.visibility_timeout_s(Deployed()),
        concurrency=2,
        max_receive_count=5,
        stalls=max(1, recipients // 960),
        delivery_mode="batch",
    )


def test_bounds_grow_with_the_run_and_with_the_measured_pace():
    small, large, slow = bounds_for(200, 0.8), bounds_for(12_480, 0.8), bounds_for(12_480, 2.5)

    assert small.run_s < large.run_s < slow.run_s
    # Without progress, a run may wait out every receive of a message (then it is dead-lettered).
    assert large.stuck_s >= 6 * (4 + 24)
    assert slow.stuck_s > large.stuck_s


def test_a_run_that_stops_moving_is_stuck_after_the_bound():
    clock = FakeClock()
    watch = ProgressWatch(WaitBounds(run_s=10_000, stuck_s=120), clock=clock)
    accepted = [0]

    def reached() -> bool:
        accepted[0] = min(accepted[0] + 100, 9_580)  # then nothing more, as in issue 18
        watch.observe(accepted=accepted[0], queued=40)
        return accepted[0] >= 12_480

    with pytest.raises(RunStuckError) as stuck:
        wait_until(reached, watch=watch, what="an empty queue", interval_s=1.0, sleep=clock.sleep, clock=clock)

    assert stuck.value.what == "an empty queue" and "no progress" in stuck.value.reason
    assert clock.now == 1000 + 95 + 121  # the last progress at 95 s, then 120 s without any


def test_a_shrinking_queue_is_progress_too():
    clock = FakeClock()
    watch = ProgressWatch(WaitBounds(run_s=10_000, stuck_s=50), clock=clock)
    queued = [400]

    def drained() -> bool:
        queued[0] -= 1  # nothing accepted (e.g. paused), but messages are being acknowledged
        watch.observe(accepted=0, queued=queued[0])
        return queued[0] == 0

    assert wait_until(drained, watch=watch, what="the queue", interval_s=1.0, sleep=clock.sleep, clock=clock)


def test_a_run_that_keeps_moving_still_ends_at_its_run_bound():
    clock = FakeClock()
    watch = ProgressWatch(WaitBounds(run_s=300, stuck_s=60), clock=clock)
    accepted = [0]

    def never() -> bool:
        accepted[0] += 1
        watch.observe(accepted=accepted[0])
        return False

    with pytest.raises(RunStuckError, match="passed its bound of 300 s"):
        wait_until(never, watch=watch, what="a stall milestone", interval_s=1.0, sleep=clock.sleep, clock=clock)


def test_a_wait_of_its_own_has_its_own_bound():
    clock = FakeClock()
    watch = ProgressWatch(WaitBounds(run_s=10_000, stuck_s=10_000), clock=clock)

    with pytest.raises(RunStuckError, match="not reached within 18 s"):
        wait_until(
            lambda: False, watch=watch, what="the doomed consumer's death", timeout_s=18,
            interval_s=0.5, sleep=clock.sleep, clock=clock,
        )  # fmt: skip


def test_the_verdict_of_a_stuck_run_says_what_was_reached_and_what_is_stuck():
    baseline = RunResult("baseline", "incident-7-baseline", "single", 12_480, accepted=13_800, reached=12_480,
                         duplicates=1_320, completed=True)  # fmt: skip
    sendonce = RunResult(
        "sendonce", "incident-7-sendonce", "batch", 12_480, accepted=9_580, reached=9_580, never_sent=2_900,
        dead_lettered=2_900, dlq_depth=29, seconds=1_065.0, invocations_timed_out=310,
        ledger_states={"sent": 9_580, "dead_lettered": 2_900},
        stuck={
            "waiting_for": "an empty queue", "reason": "no progress for 168 s", "accepted": 9_580,
            "queue": {"visible": 3, "in_flight": 2, "delayed": 0}, "dlq_depth": 29,
            "ledger": {"sent": 9_580, "dead_lettered": 2_900}, "invocations_timed_out": 310,
        },
    )  # fmt: skip

    text = verdict(baseline, sendonce, 1_200.0).plain

    assert "FAIL" in text and "PASS" not in text and "did not finish" in text
    lines = stuck_lines(sendonce)
    assert "sendonce STUCK after 1065 s waiting for an empty queue" in lines
    assert "9,580 emails accepted for 12,480 recipients" in lines
    assert "3 visible, 2 in flight" in lines and "dead-letter queue: 29" in lines
    assert "dead_lettered 2,900" in lines and "function timeout: 310" in lines


def test_a_stuck_baseline_means_no_sendonce_run_and_a_fail():
    baseline = RunResult("baseline", "incident-7-baseline", "single", 200, stuck={"waiting_for": "x", "reason": "y"})

    text = verdict(baseline, None, 100.0).plain

    assert text.startswith("baseline STUCK") and "FAIL" in text and "sendonce was not run" in text
