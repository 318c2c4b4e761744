"""`sendonce demo`: the incident replayed on this machine, twice, with the same faults.

The incident: a campaign of 12,480 recipients; the consumer outlived its visibility
timeout after the provider had accepted part of a batch, SQS delivered the batch again,
and 1,284 recipients got the email twice in 11 minutes (docs/incident.md).

The demo deploys the real stack into moto, runs the deployed consumer configuration
behind local event-source pollers (one process per concurrent invocation), and sends
one campaign twice: through the generic "send, then ack" consumer the incident ran
(`sendonce_local.demo.baseline`) and through sendonce. Both runs get the same fault schedule
(`schedule.py`):

1. a consumer process is SIGKILLed after the provider accepted (part of) its batch and
   before it acknowledged it; the batch comes back to another consumer;
2. the operator pauses the campaign and resumes it (CampaignService);
3. one provider request every ~1,000 recipients is accepted and then answered only
   after the visibility timeout has passed, so the batch is delivered to a second
   consumer while the first still waits.

Durations are scaled down from the deployed ones, as far as this machine allows: the
demo first times batch messages through the real consumer (`calibration.py`) and picks
the time scale whose function timeout fits them (`timing.py`). Every wait is bounded
from the run's size and that pace; a run that passes a bound is stopped and reported.

Deliveries are counted at the provider. Exit status 0 when sendonce sent no duplicate
and missed no recipient.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live

from sendonce.settings import ApiSettings
from sendonce_local.demo.calibration import calibrate
from sendonce_local.demo.campaign import DEFAULT_RECIPIENTS, DEFAULT_SEED, demo_recipients
from sendonce_local.demo.report import (
    LiveState,
    LiveView,
    RunResult,
    audit_line,
    configuration_table,
    consumer_summary,
    passed,
    summary_table,
    verdict,
)
from sendonce_local.demo.schedule import CampaignRun, stall_count
from sendonce_local.demo.system import DemoSystem
from sendonce_local.demo.timing import (
    Calibration,
    MachineTooBusyError,
    ScaleChoice,
    WaitBounds,
    choose_time_scale,
)

# The largest time scale, unless --time-scale says otherwise. Resend: function timeout
# 180 s -> 4 s, visibility timeout 1080 s -> 24 s. SES sends one request per recipient
# with 3 ledger writes each: a batch needs a longer budget. The calibration lowers it
# when a message needs more time on this machine.
DEFAULT_TIME_SCALES = {"resend": 45, "ses": 18}


@dataclass(frozen=True)
class DemoOptions:
    recipients: int = DEFAULT_RECIPIENTS
    provider: str = "resend"
    seed: int = DEFAULT_SEED
    time_scale: int = DEFAULT_TIME_SCALES["resend"]  # the largest factor the demo may use
    keep_running: bool = False
    as_json: bool = False
    report: Path | None = None  # write sendonce's campaign report (one HTML page) here


def run_demo(options: DemoOptions, console: Console) -> tuple[dict[str, Any], bool]:
    """Run both campaigns; return the summary and whether sendonce sent each recipient once."""
    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="sendonce-demo-"))
    state = LiveState(recipients=options.recipients)
    interactive = console.is_terminal and not options.as_json

    def say(line: str) -> None:
        if not interactive and not options.as_json:
            console.print(line, highlight=False)

    system = DemoSystem(provider=options.provider, log_dir=log_dir, say=say)
    sendonce_mode = "batch" if options.provider == "resend" else "single"
    keep_logs = False
    summary: dict[str, Any] = {
        "recipients": options.recipients, "provider": options.provider, "seed": options.seed,
        "time_scale": None, "time_scale_ceiling": options.time_scale,
    }  # fmt: skip
    try:
        if interactive:
            with console.status("starting moto and the local Resend server, deploying the stack into moto"):
                system.start()
        else:
            system.start()
        summary["deploy_seconds"] = round(system.deploy_seconds, 1)
        try:
            if interactive:
                with console.status("timing batch messages through the deployed consumer (calibration)"):
                    calibration, choice = _calibrate(system, options, sendonce_mode)
            else:
                say("calibration: timing batch messages through the deployed consumer, unhurried")
                calibration, choice = _calibrate(system, options, sendonce_mode)
        except MachineTooBusyError as exc:
            summary.update(seconds=round(time.monotonic() - started, 1), too_busy=str(exc), ok=False)
            console.print(f"[bold red]FAIL[/bold red]: {exc}", highlight=False)
            keep_logs = True
            console.print(f"consumer and function logs kept in {log_dir}", highlight=False)
            return summary, False
        summary["calibration"] = calibration.as_dict()
        deployed = system.consumer
        assert deployed is not None
        bounds = WaitBounds.derive(
            recipients=options.recipients,
            calibration=calibration,
            function_timeout_s=system.function_timeout_s(),
            visibility_timeout_s=system.visibility_timeout_s(),
            concurrency=deployed.max_concurrency,
            max_receive_count=deployed.max_receive_count,
            stalls=stall_count(options.recipients),
            delivery_mode=sendonce_mode,
        )
        summary.update(time_scale=choice.scale.factor, bounds=bounds.as_dict())
        if not options.as_json:
            console.print(configuration_table(system, choice, calibration))
        people = demo_recipients(options.recipients, options.seed)
        results: dict[str, RunResult] = {}
        live = Live(LiveView(state), console=console, refresh_per_second=4, transient=False) if interactive else None
        if live:
            live.start()
        try:
            for kind in ("baseline", "sendonce"):
                if options.provider == "resend":
                    system.resend.reset()  # counts per run: the same addresses get both campaigns
                results[kind] = CampaignRun(
                    system, consumer=kind, recipients=people, seed=options.seed, state=state, bounds=bounds
                ).run()
                if not results[kind].completed:
                    break  # a stuck baseline proves nothing about sendonce
        finally:
            if live:
                live.stop()
        baseline, sendonce = results["baseline"], results.get("sendonce")
        ok = sendonce is not None and passed(sendonce)
        audit = None
        if sendonce is not None and sendonce.completed:
            if interactive:
                with console.status(f"auditing sendonce's campaign against {options.provider}'s own records"):
                    audit = audit_campaign(system, sendonce.campaign_id)
            else:
                say(f"audit: sendonce's campaign against {options.provider}'s own records")
                audit = audit_campaign(system, sendonce.campaign_id)
            ok = ok and audit["clean"]
        summary.update(
            seconds=round(time.monotonic() - started, 1),
            consumer=consumer_summary(system, choice, calibration),
            baseline=baseline.as_dict(),
            sendonce=sendonce.as_dict() if sendonce else None,
            audit=audit,
            ok=ok,
        )
        if not options.as_json:
            if sendonce is not None:
                console.print(summary_table(baseline, sendonce, options.provider))
            if audit is not None:
                console.print(audit_line(audit), highlight=False)
            console.print(verdict(baseline, sendonce, summary["seconds"], audit=audit))
        elif not ok:
            console.print(verdict(baseline, sendonce, summary["seconds"], audit=audit))  # on stderr with --json
        if not ok:
            keep_logs = True
            console.print(f"consumer and function logs kept in {log_dir}", highlight=False)
        if options.report is not None and sendonce is not None:
            path = write_report(system, sendonce.campaign_id, options.report)
            summary["report"] = str(path)
            say(f"report: {path}")
        if options.keep_running:
            keep_running(system, options, console, example_recipient=people[0].recipient_id)
        return summary, ok
    except BaseException:
        keep_logs = True
        console.print(f"[red]demo failed[/red]; consumer and function logs kept in {log_dir}", highlight=False)
        if system.moto.pid:
            console.print(system.moto.log_tail(1500), highlight=False, markup=False)
        raise
    finally:
        system.stop()
        if not keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)


def _calibrate(system: DemoSystem, options: DemoOptions, delivery_mode: str) -> tuple[Calibration, ScaleChoice]:
    """The measured pace, and the time scale it allows (applied to the system)."""
    calibration = calibrate(system, delivery_mode=delivery_mode, seed=options.seed)
    assert system.consumer is not None
    choice = choose_time_scale(system.consumer, calibration, delivery_mode=delivery_mode, ceiling=options.time_scale)
    system.apply_time_scale(choice.scale)
    system.say(f"calibration: {choice.explain()}")
    return calibration, choice


def audit_campaign(system: DemoSystem, campaign_id: str) -> dict[str, Any]:
    """`sendonce campaign audit` of sendonce's campaign, as an operator would run it once it
    completed: the provider's own records (the local Resend server's List Sent Emails and
    Retrieve Email; SES's recorded events) set against the ledger. The figures the demo prints."""
    from sendonce.settings import ConsumerSettings
    from sendonce.wiring.audit import build_campaign_audit

    settings = ConsumerSettings.from_env(system.env)
    result = build_campaign_audit(settings, system.provider, system.clients).run(campaign_id, settle=False)
    artefact = result.artefact()
    return {
        "clean": result.clean,
        "proves_absence": result.proves_absence,
        "listing_complete": result.complete,
        "counts": {verdict: n for verdict, n in sorted(result.counts.items()) if n},
        "duplicates": sorted(result.duplicates),
        "listed_emails": result.listed_emails,
        "provider_requests": result.provider_requests,
        "digest": artefact["digest"],
    }


def write_report(system: DemoSystem, campaign_id: str, path: Path) -> Path:
    """The page `sendonce campaign report` writes, for sendonce's campaign of this run, once
    the counters' aggregator has applied every ledger change."""
    from sendonce.wiring.api import campaign_reports
    from sendonce_ops.report_page import write

    assert system.consumer is not None
    system.drain_counters()
    settings = ApiSettings(
        ledger_table=system.consumer.ledger_table,
        campaigns_table=system.consumer.campaigns_table,
        queue_url=system.consumer.queue_url,
        dead_letter_queue_url=system.consumer.dead_letter_queue_url,
        counters=True,
    )
    return write(campaign_reports(settings).report(campaign_id), path)


def keep_running(system: DemoSystem, options: DemoOptions, console: Console, *, example_recipient: str) -> None:
    deployed = system.consumer
    assert deployed is not None
    for n in range(deployed.max_concurrency):
        system.start_sendonce_consumer(f"kept-{n}")
    endpoint = system.moto.endpoint
    campaign = f"incident-{options.seed}-sendonce"
    console.print(
        f"""
Still running (Ctrl-C stops everything):
  moto with the stack       {endpoint}
  local Resend server       {system.resend.url}    (curl {system.resend.url}/_local/deliveries)
  consumers                 {deployed.max_concurrency} x {deployed.handler}, visibility timeout still scaled

Point the CLI at it:
  export AWS_ENDPOINT_URL={endpoint} AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \\
         AWS_SESSION_TOKEN=testing AWS_DEFAULT_REGION=us-east-1 SENDONCE_STACK=Sendonce
  sendonce campaign status {campaign}
  sendonce ledger show {campaign} {example_recipient}
  sendonce dlq list
  sendonce local api --port 8080 &
  curl -s http://127.0.0.1:8080/campaigns/{campaign}/delivery-status
""",
        highlight=False,
        markup=False,
        soft_wrap=True,  # commands to copy: no line breaks inside them
    )
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command("demo")
@click.option(
    "--recipients",
    type=click.IntRange(200, 100_000),
    default=DEFAULT_RECIPIENTS,
    show_default=True,
    help="Recipients in the campaign (generated from --seed).",
)
@click.option(
    "--provider",
    type=click.Choice(["resend", "ses"]),
    default="resend",
    show_default=True,
    help="resend: the local Resend server, sendonce in batch mode (about 4 min for 12,480 "
    "recipients on 2 cores). ses: moto's SES behind a stalling proxy, single mode, 3 ledger "
    "writes per recipient: --recipients 2000 takes about 3.5 min, 12,480 about 10.",
)
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Seed for the recipients.")
@click.option(
    "--time-scale",
    type=click.IntRange(10, 600),
    default=None,
    help="Divide the deployed function timeout and visibility timeout (and provider timeout and "
    "safety margin, not below 1 s) by at most this. The demo first times batch messages through "
    "the deployed consumer and lowers the scale (longer timeouts) until one fits with headroom, "
    "down to 1/3. Default: 45 with resend (180 s -> 4 s, 1080 s -> 24 s), 18 with ses (10 s, 60 s).",
)
@click.option(
    "--keep-running",
    is_flag=True,
    help="Leave moto, the Resend server and consumers up; print how "
    "to use the CLI and the HTTP API against them. Ctrl-C stops.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option(
    "--report",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Also write sendonce's campaign report (as `sendonce campaign report` does) to this file.",
)
def demo(
    recipients: int,
    provider: str,
    seed: int,
    time_scale: int | None,
    keep_running: bool,
    as_json: bool,
    report: Path | None,
) -> None:
    """Replay the incident locally: the same campaign and faults through the generic consumer and
    through sendonce, counted at the provider.

    Deploys the CDK stack into moto, runs the deployed consumer behind local pollers (time scaled
    down as far as the measured pace allows), kills a consumer after the provider accepted, pauses
    and resumes, and stalls provider answers past the visibility timeout. Exit status 0 when
    sendonce sent no duplicate and lost no recipient silently (never sent and not flagged unknown
    or dead-lettered), 1 otherwise, also when a run passed its bound (what it reached and what
    was stuck are printed).
    """
    time_scale = time_scale or DEFAULT_TIME_SCALES[provider]
    options = DemoOptions(recipients=recipients, provider=provider, seed=seed, time_scale=time_scale,
                          keep_running=keep_running, as_json=as_json, report=report)  # fmt: skip
    console = Console(stderr=as_json, highlight=False)
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        summary, ok = run_demo(options, console)
    except KeyboardInterrupt:
        console.print("interrupted; everything the demo started is stopped")
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if as_json:
        click.echo(json.dumps(summary))
    sys.exit(0 if ok else 1)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> None:
    demo.main(args=list(argv) if argv is not None else None, prog_name="python -m sendonce_local.demo.run")


if __name__ == "__main__":
    main()
