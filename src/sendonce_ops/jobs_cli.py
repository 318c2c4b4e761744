"""`sendonce job status ID` and `sendonce job watch ID`: a job's progress (domain/jobs).

Through the API, resume and cancel answer at once with the job that republishes a campaign's
recipients not yet ended, a page at a time, and the jobs worker runs it; from the CLI the job
runs in the CLI's own process (recorded the same way). These commands follow a job, or take
up one whose runner died. Registered by sendonce_ops/cli.py.
"""

from __future__ import annotations

import time
from typing import Any

import click

from sendonce.domain.jobs.models import Job, JobState

WATCH_EXIT = {JobState.DONE: 0, JobState.FAILED: 1}
TIMED_OUT = 3  # sendonce_ops.cli.ExitCode.PARTIAL


def describe(job: Job) -> str:
    progress = ", ".join(f"{name.replace('_', ' ')} {n:,}" for name, n in sorted(job.progress.items())) or "not started"
    line = f"job {job.job_id} ({job.kind.value} of {job.campaign_id}): {job.state.value} after {job.steps} step(s); {progress}"
    return line + (f"; error: {job.error}" if job.error else "")


@click.group("job")
def job() -> None:
    """Long operations on a campaign (resume, cancel), run a page at a time."""


@job.command("status")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.pass_obj
def job_status(obj: Any, job_id: str, as_json: bool) -> None:
    """A job's state and progress."""
    found = obj.service().jobs.get(job_id)
    if as_json:
        obj.json(found.as_dict())
    else:
        click.echo(describe(found))


@job.command("watch")
@click.argument("job_id")
@click.option(
    "--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True, help="Seconds between reads."
)
@click.option("--timeout", type=click.FloatRange(min=0), default=None, help="Give up after this many seconds (exit 3).")
@click.pass_obj
def job_watch(obj: Any, job_id: str, interval: float, timeout: float | None) -> None:
    """Follow a job until it is done (exit 0) or failed (exit 1)."""
    jobs = obj.service().jobs
    started = time.monotonic()
    last = None
    while True:
        found = jobs.get(job_id)
        line = describe(found)
        if line != last:
            click.echo(line)
            last = line
        if found.done:
            raise SystemExit(WATCH_EXIT[found.state])
        if timeout is not None and time.monotonic() - started >= timeout:
            click.echo(f"job {job_id} still running after {timeout:g} s", err=True)
            raise SystemExit(TIMED_OUT)
        time.sleep(interval)


@job.command("run")
@click.argument("job_id")
@click.pass_obj
def job_run(obj: Any, job_id: str) -> None:
    """Take a running job's remaining steps in this process (one whose worker or CLI died:
    it goes on from its own cursor; a page done twice sends nobody twice)."""
    click.echo(describe(obj.service().jobs.run(job_id)))
