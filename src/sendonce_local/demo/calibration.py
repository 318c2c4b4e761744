"""Before the runs: how long one batch message takes on this machine, now.

The deployed consumer (the counting wrapper around the deployed handler, runtime built in
the poller's init phase) runs with the deployed concurrency and the deployed, unscaled
function timeout, so nothing hurries it, on a campaign of its own (addresses at
CALIBRATION_DOMAIN, which no demo campaign sends to) in the delivery mode the sendonce run
will use. Each invocation's duration is what `timing.choose_time_scale` sizes the scaled
function timeout from.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sendonce_local.demo.campaign import CALIBRATION_DOMAIN, demo_campaign, demo_recipients
from sendonce_local.demo.consumer import read_timings
from sendonce_local.demo.system import DemoSystem
from sendonce_local.demo.timing import (
    MIN_FACTOR,
    RECIPIENTS_PER_BATCH,
    STARTUP_ALLOWANCE_S,
    Calibration,
    MachineTooBusyError,
    TimeScale,
)
from sendonce_ops.sqs_tools import queue_depths

MESSAGES_PER_CONSUMER = 2


def calibrate(system: DemoSystem, *, delivery_mode: str, seed: int) -> Calibration:
    deployed, operator = system.consumer, system.operator
    assert deployed is not None and operator is not None and system.time_scale is None
    sqs = system.client("sqs")
    concurrency = deployed.max_concurrency
    messages = concurrency * MESSAGES_PER_CONSUMER
    campaign_id = f"calibration-{seed}"
    operator.create(demo_campaign(campaign_id, system.provider, delivery_mode))
    recipients = demo_recipients(messages * RECIPIENTS_PER_BATCH, seed, domain=CALIBRATION_DOMAIN)
    names = [f"calibration-{n}" for n in range(concurrency)]
    consumers = [system.start_sendonce_consumer(name) for name in names]
    # A message slower than the longest scaled timeout allows would not fit anyway.
    bound_s = STARTUP_ALLOWANCE_S + MESSAGES_PER_CONSUMER * TimeScale(MIN_FACTOR).function_timeout_s(deployed)
    started = time.monotonic()

    def timings() -> list[dict[str, float]]:
        return [t for name in names for t in read_timings(system.log_dir / f"{name}.timings")]

    def wait(predicate: Callable[[], bool], what: str) -> None:
        while not predicate():
            if time.monotonic() - started > bound_s:
                done = [f"{t['handler_s']:.1f} s" for t in timings() if "handler_s" in t]
                raise MachineTooBusyError(
                    f"the calibration ({messages} messages of {RECIPIENTS_PER_BATCH} recipients, {concurrency} "
                    f"consumers) had not {what} after {bound_s:.0f} s ({len(done)} messages timed: "
                    f"{', '.join(done) or 'none'}). This machine is too busy for the demo right now: try again "
                    "when it is quieter."
                )
            time.sleep(0.2)

    try:
        # Both consumers ready before the messages arrive, so they share them and moto.
        wait(lambda: sum("init_s" in t for t in timings()) >= concurrency, "started")
        operator.publish(campaign_id, recipients)
        wait(
            lambda: (
                sum("handler_s" in t for t in timings()) >= messages
                and not any(queue_depths(sqs, deployed.queue_url).values())
            ),
            "finished",
        )
    finally:
        for process in consumers:
            process.stop()
        if any(queue_depths(sqs, deployed.queue_url).values()):
            sqs.purge_queue(QueueUrl=deployed.queue_url)  # nothing of it may reach the runs
    return Calibration.from_timings(timings(), seconds=time.monotonic() - started)
