"""What the demo shows: each run's result, the live view, the configuration and summary
tables, and the verdict (PASS, FAIL, or what a stuck run had reached and what was stuck)."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sendonce.domain.sending.shards import DEFAULT_LEDGER_SHARDS
from sendonce_local.demo.campaign import DEMO_LEDGER_SHARDS
from sendonce_local.demo.system import DemoSystem
from sendonce_local.demo.timing import Calibration, ScaleChoice


@dataclass
class RunResult:
    consumer: str
    campaign_id: str
    delivery_mode: str
    recipients: int
    accepted: int = 0
    reached: int = 0
    duplicates: int = 0
    never_sent: int = 0  # recipients the provider accepted no email for
    missing: int = 0  # of those, the ones nothing flags: neither unknown nor dead-lettered (silent loss)
    unknown: int | None = None  # the baseline keeps no record, so it cannot know
    dead_lettered: int | None = None
    dlq_depth: int = 0  # the run's messages left in the dead-letter queue at its end
    redriven: int = 0  # the run's messages the demo moved back from the dead-letter queue
    seconds: float = 0.0
    dynamodb_requests: int = 0
    dynamodb_requests_per_recipient: float = 0.0
    dynamodb_requests_measured: bool = True
    moto_cpu_seconds: float = 0.0
    requests_by_operation: dict[str, int] = field(default_factory=dict)
    ledger_states: dict[str, int] = field(default_factory=dict)
    consumers_killed: int = 0
    stalled_requests: int = 0
    republished_on_resume: int | None = None
    invocations_timed_out: int = 0  # the pollers' count: invocations that ran past the function timeout
    slowest_invocation_s: float | None = None  # sendonce's consumers time theirs
    completed: bool = False
    stuck: dict[str, Any] | None = None  # what the run had reached when it passed a bound

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 1)
        data["dynamodb_requests_per_recipient"] = round(self.dynamodb_requests_per_recipient, 3)
        return data


@dataclass
class LiveState:
    """What the display shows; written by the runs, read by the display thread."""

    recipients: int
    started: float = field(default_factory=time.monotonic)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self, run: str, message: str) -> str:
        line = f"{time.monotonic() - self.started:6.1f}s  {run:<8}  {message}"
        with self.lock:
            self.events.append(line)
        return line

    def update(self, run: str, **values: Any) -> None:
        with self.lock:
            self.rows.setdefault(run, {}).update(values)


class LiveView:
    def __init__(self, state: LiveState) -> None:
        self.state = state

    def __rich__(self) -> Group:
        with self.state.lock:
            rows = {k: dict(v) for k, v in self.state.rows.items()}
            events = list(self.state.events[-10:])
        table = Table(box=None, pad_edge=False)
        for column in ("run", "mode", "emails accepted", "progress", "time"):
            table.add_column(column, justify="right" if column != "run" else "left")
        for run, row in rows.items():
            accepted = row.get("accepted", 0)
            share = min(1.0, accepted / max(1, self.state.recipients))
            bar = "█" * int(share * 30) + "·" * (30 - int(share * 30))
            table.add_row(run, row.get("mode", ""), f"{accepted:,}", bar, f"{row.get('seconds', 0):.0f} s")
        return Group(table, Text("\n".join(events), style="dim"))


def summary_table(baseline: RunResult, sendonce: RunResult, provider: str) -> Table:
    table = Table(title=f"the same campaign, the same faults ({provider})", title_justify="left")
    table.add_column("")
    table.add_column("baseline\n(send, then ack)", justify="right")
    table.add_column("sendonce", justify="right")

    def per_recipient(r: RunResult) -> str:
        value = f"{r.dynamodb_requests_per_recipient:.3f}"
        return value if r.dynamodb_requests_measured else f"{value} (campaign reads only)"

    rows = [
        ("delivery mode", baseline.delivery_mode, sendonce.delivery_mode),
        ("recipients", f"{baseline.recipients:,}", f"{sendonce.recipients:,}"),
        ("emails accepted by the provider", f"{baseline.accepted:,}", f"{sendonce.accepted:,}"),
        ("duplicates (accepted - recipients reached)", f"{baseline.duplicates:,}", f"{sendonce.duplicates:,}"),
        ("recipients never sent", f"{baseline.never_sent:,}", f"{sendonce.never_sent:,}"),
        ("unknown outcomes (flagged, never re-sent)", "not recorded", f"{sendonce.unknown or 0:,}"),
        ("missing: never sent and not flagged", f"{baseline.missing:,}", f"{sendonce.missing:,}"),
        ("DLQ depth (messages redriven by the demo)", f"{baseline.dlq_depth:,}",
         f"{sendonce.dlq_depth:,} ({sendonce.redriven:,})"),
        ("invocations past the function timeout", f"{baseline.invocations_timed_out:,}",
         f"{sendonce.invocations_timed_out:,}"),
        ("wall time", f"{baseline.seconds:.1f} s", f"{sendonce.seconds:.1f} s"),
        ("DynamoDB requests per recipient", per_recipient(baseline), per_recipient(sendonce)),
        ("consumers killed after accept", str(baseline.consumers_killed), str(sendonce.consumers_killed)),
        (
            "requests stalled past the visibility timeout",
            str(baseline.stalled_requests),
            str(sendonce.stalled_requests),
        ),
    ]  # fmt: skip
    for label, left, right in rows:
        style = "bold" if label.startswith(("duplicates", "missing")) else None
        table.add_row(label, left, right, style=style)
    return table


def consumer_summary(system: DemoSystem, choice: ScaleChoice | None, calibration: Calibration | None) -> dict[str, Any]:
    deployed = system.consumer
    assert deployed is not None
    return {
        "handler": deployed.handler,
        "batch_size": deployed.batch_size,
        "max_concurrency": deployed.max_concurrency,
        "function_timeout_s": {"deployed": deployed.timeout_s, "demo": system.function_timeout_s()},
        "visibility_timeout_s": {"deployed": deployed.visibility_timeout_s, "demo": system.visibility_timeout_s()},
        "max_receive_count": deployed.max_receive_count,
        "overrides": {k: {"deployed": deployed.environment.get(k), "demo": v} for k, v in system.overrides.items()},
        "ledger_shards": {"deployed": DEFAULT_LEDGER_SHARDS, "demo": DEMO_LEDGER_SHARDS},
        "time_scale": None if choice is None else {
            "factor": choice.scale.factor, "ceiling": choice.ceiling,
            "message_needs_s": round(choice.needed_s, 2), "timeout_gives_s": round(choice.usable_s, 2),
        },
        "calibration": None if calibration is None else calibration.as_dict(),
    }  # fmt: skip


def configuration_table(system: DemoSystem, choice: ScaleChoice, calibration: Calibration) -> Table:
    deployed = system.consumer
    assert deployed is not None
    table = Table(
        title=f"consumer configuration read back from the deployed stack (time scale 1/{choice.scale.factor})",
        title_justify="left",
    )
    table.add_column("setting")
    table.add_column("deployed", justify="right")
    table.add_column("in the demo", justify="right")
    table.add_row("handler", deployed.handler, deployed.handler)
    table.add_row("event source batch size", str(deployed.batch_size), str(deployed.batch_size))
    table.add_row("MaximumConcurrency", str(deployed.max_concurrency), f"{deployed.max_concurrency} consumer processes")
    table.add_row("function timeout", f"{deployed.timeout_s} s", f"{system.function_timeout_s():.3g} s")
    table.add_row(
        "queue visibility timeout", f"{deployed.visibility_timeout_s} s", f"{system.visibility_timeout_s()} s"
    )
    table.add_row("maxReceiveCount", str(deployed.max_receive_count), str(deployed.max_receive_count))
    for name, value in system.overrides.items():
        table.add_row(name, deployed.environment.get(name, "-"), value)
    table.add_row("a campaign's ledger shards", str(DEFAULT_LEDGER_SHARDS), str(DEMO_LEDGER_SHARDS))
    table.caption = (
        f"Calibration: {calibration.messages} messages of 100 recipients through the deployed consumer, slowest "
        f"{calibration.slowest_message_s:.2f} s (median {calibration.median_message_s:.2f} s); {choice.explain()}. "
        "Everything else in the function's environment is used as deployed. Durations are divided by the time "
        "scale (provider timeout and safety margin not below 1 s); the send rate is raised for a short local run; "
        f"the campaigns' ledger is spread over {DEMO_LEDGER_SHARDS} keys, not {DEFAULT_LEDGER_SHARDS}: ample for "
        "the demo's rate, and 16x fewer queries and position writes on moto."
    )
    return table


def passed(sendonce: RunResult) -> bool:
    return sendonce.completed and sendonce.duplicates == 0 and sendonce.missing == 0


def audit_line(audit: dict[str, Any]) -> str:
    """The audit of sendonce's campaign in one line: what the provider's own records say."""
    counts = audit["counts"]
    line = (
        f"audit against the provider's own records: {counts.get('sent_once', 0):,} sent exactly once, "
        f"{counts.get('duplicate', 0):,} duplicates"
    )
    others = {k: n for k, n in counts.items() if k not in ("sent_once", "duplicate")}
    if others:
        line += ", " + ", ".join(f"{n:,} {k.replace('_', ' ')}" for k, n in others.items())
    line += f"; {audit['listed_emails']:,} emails read in {audit['provider_requests']:,} requests"
    if not audit["proves_absence"]:
        line += " (SES proves nothing absent: an accepted email whose events never arrived looks unsent)"
    return line + (". Clean: every recipient explained." if audit["clean"] else ". NOT CLEAN.")


def verdict(
    baseline: RunResult, sendonce: RunResult | None, seconds: float, *, audit: dict[str, Any] | None = None
) -> Text:
    text = Text()
    for result in (baseline, sendonce):
        if result is not None and result.stuck is not None:
            text.append(stuck_lines(result) + "\n")
    if sendonce is None:
        text.append("FAIL", style="bold red")
        text.append(f": the baseline run did not finish, so sendonce was not run. Total {seconds:.0f} s.")
        return text
    text.append(
        f"baseline: {baseline.duplicates:,} duplicates, {baseline.missing:,} missing. "
        f"sendonce: {sendonce.duplicates:,} duplicates, {sendonce.missing:,} missing, "
        f"{sendonce.unknown or 0:,} unknown, {sendonce.dead_lettered or 0:,} dead-lettered"
        + (f" ({sendonce.redriven:,} messages redriven from the DLQ by the demo)" if sendonce.redriven else "")
        + f". Total {seconds:.0f} s.\n",
    )
    good = passed(sendonce) and (audit is None or audit["clean"])
    text.append("PASS" if good else "FAIL", style="bold green" if good else "bold red")
    if good:
        text.append(": sendonce sent every recipient exactly once")
        if audit is None:
            text.append(".")
        elif audit["proves_absence"]:
            text.append(", and the provider's own records agree.")
        else:  # SES: its events are the only witness, and moto delivers none
            text.append("; the audit found nothing against it (SES's events are its only witness).")
    elif passed(sendonce) and audit is not None:
        text.append(": the ledger says each recipient once, but the audit against the provider's records is not clean.")
    elif not sendonce.completed:
        text.append(": the sendonce run did not finish (above: what it reached, and what was stuck).")
    else:
        text.append(": sendonce did not send each recipient once.")
    return text


def stuck_lines(result: RunResult) -> str:
    """What a run that passed a bound had reached, and what was stuck."""
    stuck = result.stuck or {}
    queue = stuck.get("queue", {})
    ledger = ", ".join(f"{k} {v:,}" for k, v in (stuck.get("ledger") or {}).items()) or "not recorded"
    return (
        f"{result.consumer} STUCK after {result.seconds:.0f} s waiting for {stuck.get('waiting_for')}: "
        f"{stuck.get('reason')}.\n"
        f"  reached: {stuck.get('accepted', 0):,} emails accepted for {result.recipients:,} recipients "
        f"({result.reached:,} recipients reached, {result.duplicates:,} duplicates)\n"
        f"  queue: {queue.get('visible', 0):,} visible, {queue.get('in_flight', 0):,} in flight, "
        f"{queue.get('delayed', 0):,} delayed; dead-letter queue: {stuck.get('dlq_depth', 0):,} of its messages\n"
        f"  ledger: {ledger}; invocations past the function timeout: {stuck.get('invocations_timed_out', 0):,}"
    )
