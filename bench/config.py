"""What a benchmark run is asked to do (`BenchConfig`: the quick and full runs), and the error
that says a phase's figures mean nothing."""

from __future__ import annotations

from dataclasses import dataclass

RECIPIENTS_PER_MESSAGE = 100


class BenchError(RuntimeError):
    """A phase did not finish, or finished with wrong deliveries: its figures mean nothing."""


@dataclass(frozen=True)
class BenchConfig:
    name: str = "quick"
    recipients: int = 200  # unthrottled, duplicate and batch-mode phases
    rate_per_second: float = 25.0  # emails/s, single mode: the most the shared limiter is set to
    send_concurrency: int = 8
    pollers: int = 2  # concurrent invocations (the event source's MaximumConcurrency)
    latency_ms: tuple[float, float] = (50.0, 200.0)
    message_samples: int = 1  # isolated messages timed per path
    message_size: int = RECIPIENTS_PER_MESSAGE  # recipients per SQS message (a batch)
    ses_recipients: int = 30
    pairs: int = 1  # baseline/sendonce pairs at the rate; 2 runs them A B B A
    rate_limited_seconds: float = 10.0  # recipients per run at the rate: about this long
    rate_headroom: float = 0.6  # the rate: this part of sendonce's unthrottled throughput ...
    min_rate_per_second: float = 5.0  # ... but no less than this
    limiter_unthrottled: bool = False  # also unthrottled with the limiter on at a rate that never binds
    provider_enforced_rate: bool = False  # also at the rate with the provider enforcing it (429s)
    default_team_recipients: int = 40  # at Resend's default team limit (5/s) with default settings
    cold_start_runs: int = 1
    cold_start_detail: bool = False  # also -X importtime, overall and by package without bytecode
    function_timeout_s: float = 60.0
    phase_timeout_s: float = 300.0
    # The campaigns' ledger shards (None: the default a campaign gets, 256). The completion
    # check of an uncounted campaign reads every shard: the smoke test's tiny campaigns take 4.
    ledger_shards: int | None = None

    @property
    def mean_latency_s(self) -> float:
        return (self.latency_ms[0] + self.latency_ms[1]) / 2 / 1000


QUICK = BenchConfig()
FULL = BenchConfig(
    name="full",
    recipients=2000,
    rate_per_second=30.0,
    rate_limited_seconds=60.0,
    message_samples=5,
    ses_recipients=200,
    pairs=2,
    limiter_unthrottled=True,
    provider_enforced_rate=True,
    cold_start_runs=3,
    cold_start_detail=True,
    phase_timeout_s=900.0,
)


# --- environment ----------------------------------------------------------------------
