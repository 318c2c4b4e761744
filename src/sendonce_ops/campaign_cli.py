"""`sendonce campaign ...`: list, create, pause, resume, cancel, pick, status, reconcile, watch.
Parsing and presentation only; every decision is CampaignService's. The group is attached
to `sendonce` by sendonce_ops/cli.py, which also adds the commands of the other `*_cli` modules."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from sendonce.domain.campaigns.ab_results import AbResults
from sendonce.domain.campaigns.scheduling import iso
from sendonce.domain.campaigns.service import DeliveryStatus
from sendonce.domain.campaigns.unknowns import DEFAULT_UNKNOWN_WINDOW_S
from sendonce.domain.errors import InvalidCampaignError
from sendonce.domain.models import Campaign, CampaignState
from sendonce_ops.audit_cli import campaign_audit
from sendonce_ops.cli_context import (
    FINISHED_STATES,
    Cli,
    ExitCode,
    campaign_summary,
    fail,
    job_extra,
    json_option,
    pass_cli,
    transition_output,
)
from sendonce_ops.jobs_cli import describe as describe_job
from sendonce_ops.preview_cli import (
    json_of_test_sends,
    latest_test_sends,
    print_test_sends,
)
from sendonce_ops.sending_cli import sending_json, sending_line, sending_of
from sendonce_ops.specs import SpecError, load_spec, locate


@click.group()
def campaign() -> None:
    """Create and steer campaigns (state machine: docs/operations-campaigns.md)."""


@campaign.command("list")
@click.option(
    "--state", type=click.Choice([s.value for s in CampaignState]), default=None, help="Only campaigns in this state."
)
@json_option
@pass_cli
def campaign_list(cli: Cli, state: str | None, as_json: bool) -> None:
    """The campaigns (id, state, delivery mode, priority, last change), by id.

    One Scan of the campaigns table per call (it has no index by state); the ledger is not read.
    """
    campaigns = cli.service().list_campaigns(CampaignState(state) if state else None)
    if as_json:
        cli.json({"campaigns": [{**campaign_summary(c), "open_batches": max(c.open_batches, 0)} for c in campaigns]})
        return
    if not campaigns:
        click.echo(f"no campaign is {state}" if state else "no campaigns")
        return
    table = Table()
    for column in ("id", "state", "delivery mode", "priority", "updated"):
        table.add_column(column)
    for c in campaigns:
        reason = f" ({c.state_reason})" if c.state_reason else ""
        table.add_row(
            Text(c.campaign_id), Text(c.state.value + reason), c.delivery_mode, c.priority, c.updated_at or "-"
        )
    cli.out.print(table)


@campaign.command("create")
@click.option(
    "--spec",
    "spec_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="YAML or JSON: id, name, subject, from, reply_to, html / html_file, text / text_file, provider, "
    "delivery_mode, weight, priority, max_rate.",
)
@json_option
@pass_cli
def campaign_create(cli: Cli, spec_path: Path, as_json: bool) -> None:
    """Create a campaign (state draft) from a spec file and print its id."""
    spec = load_spec(spec_path)  # before any AWS call: a bad spec touches nothing
    try:
        campaign = spec.to_campaign()  # e.g. a variant id given twice (no schema can say it)
        created = cli.service(writes=True).create(campaign)
    except InvalidCampaignError as exc:  # e.g. an unregistered provider: point at its line
        raise SpecError([locate(spec_path, str(exc))]) from exc
    if as_json:
        cli.json(campaign_summary(created))
    else:
        click.echo(created.campaign_id)


@campaign.command("pause")
@click.argument("campaign_id")
@click.option("--reason", default=None, help="Recorded with the state change.")
@json_option
@pass_cli
def campaign_pause(cli: Cli, campaign_id: str, reason: str | None, as_json: bool) -> None:
    """Stop sending: consumers send no new batch of this campaign (those in progress finish)."""
    transition_output(cli, cli.service(writes=True).pause(campaign_id, reason=reason), "paused", as_json)


@campaign.command("resume")
@click.argument("campaign_id")
@click.option("--reason", default=None, help="Recorded with the state change (default: resumed).")
@click.option(
    "--include-unknown",
    is_flag=True,
    help="Also send again deliveries whose outcome was unknown and that `campaign audit --settle` proved "
    "the provider never sent.",
)
@click.option(
    "--accept-possible-duplicates",
    is_flag=True,
    help="With --include-unknown: also every unknown without proof (no provider 'sent' event for longer than "
    "--unknown-older-than; SES cannot prove absence): those recipients may get the email twice.",
)
@click.option(
    "--recipient",
    "recipient_ids",
    multiple=True,
    help="With --include-unknown: only these recipients' unknown deliveries (repeatable).",
)
@click.option(
    "--unknown-older-than",
    type=click.IntRange(min=0),
    default=DEFAULT_UNKNOWN_WINDOW_S,
    show_default=True,
    help="Seconds a delivery must have been unknown to be reopened.",
)
@json_option
@pass_cli
def campaign_resume(
    cli: Cli,
    campaign_id: str,
    reason: str | None,
    include_unknown: bool,
    accept_possible_duplicates: bool,
    recipient_ids: tuple[str, ...],
    unknown_older_than: int,
    as_json: bool,
) -> None:
    """Send again: republishes every recipient that has not ended (the ledger sends each once)."""
    if accept_possible_duplicates and not include_unknown:
        fail(ExitCode.BAD_INPUT, "error: --accept-possible-duplicates needs --include-unknown")
    if include_unknown:
        # A resume_unknown job, run here a page of unknowns at a time (`job run ID` takes it up).
        service = cli.service(writes=True)
        reopening = service.start_resume_including_unknown(
            campaign_id,
            recipient_ids=recipient_ids or None,
            older_than_s=unknown_older_than,
            accept_possible_duplicates=accept_possible_duplicates,
            reason=reason,
        )
        if reopening.result is None:
            fail(ExitCode.PARTIAL, describe_job(reopening))
        republish = reopening.result["republish_job"]
        transition_output(
            cli,
            service.get(campaign_id),
            "resumed",
            as_json,
            **job_extra(service.jobs.get(republish) if republish else None),
            reopened=reopening.listed.get("reopened", []),
            confirmed_sent=reopening.listed.get("confirmed_sent", []),
            not_reopened=reopening.listed.get("not_reopened", []),
        )
        return
    if recipient_ids:
        fail(ExitCode.BAD_INPUT, "error: --recipient chooses unknown deliveries: it needs --include-unknown")
    resumed, job = cli.service(writes=True).resume(campaign_id, reason=reason)
    transition_output(cli, resumed, "resumed", as_json, **job_extra(job))


@campaign.command("cancel")
@click.argument("campaign_id")
@click.option("--reason", default=None, help="Recorded with the state change.")
@json_option
@pass_cli
def campaign_cancel(cli: Cli, campaign_id: str, reason: str | None, as_json: bool) -> None:
    """End the campaign: recipients not yet sent end as cancelled. Cannot be undone."""
    cancelled, job = cli.service(writes=True).cancel(campaign_id, reason=reason)
    transition_output(cli, cancelled, "cancelled", as_json, job=job.as_dict())


@campaign.command("pick")
@click.argument("campaign_id")
@click.argument("variant", required=False)
@click.option("--reason", default=None, help="Recorded with the decision (default: picked by hand by OPERATOR).")
@json_option
@pass_cli
def campaign_pick(cli: Cli, campaign_id: str, variant: str | None, reason: str | None, as_json: bool) -> None:
    """An A/B campaign's winner: VARIANT, or without it by the test's figures so far; then a job
    sends it to every recipient still waiting. The first decision stands: a later pick (by
    hand or the test's scheduled end) changes nothing and says which stands
    (docs/operations-campaigns.md#ab-tests)."""
    result = cli.service(writes=True).pick(campaign_id, variant, reason=reason)
    if as_json:
        cli.json(result.as_dict())
        return
    decision = result.decision
    line = f"picked {result.variant} for {campaign_id}, by {decision.by}: {decision.reason}"
    if not result.decided_now:
        line = f"{campaign_id}'s winner was picked before and stands: {result.variant}, by {decision.by} at "
        line += f"{iso(decision.at_ms)}: {decision.reason}"
    job = cli.service(writes=True).jobs.get(result.job_id) if result.job_id else None
    if job is not None and not job.done:
        line += f"; job {job.job_id} is sending it to the rest (`sendonce job watch {job.job_id}`)"
    elif job is not None:
        line += f"; republished the {job.progress.get('republished', 0)} recipient(s) still waiting"
    click.echo(line)


STATUS_ROWS = (
    ("total", "total"),
    ("pending", "pending"),
    ("in progress", "in_progress"),
    ("sent", "sent"),
    ("failed", "failed"),
    ("suppressed", "suppressed"),
    ("unknown", "unknown"),
    ("cancelled", "cancelled"),
    ("dead-lettered", "dead_lettered"),
    ("remaining", "remaining"),
)


@campaign.command("status")
@click.argument("campaign_id")
@json_option
@pass_cli
def campaign_status(cli: Cli, campaign_id: str, as_json: bool) -> None:
    """Counts of the campaign's deliveries by outcome, its state and why; while it sends, its
    rate, share of the provider's rate, dwell and ETA over the last 30 s."""
    service = cli.service()
    status = service.status(campaign_id)
    current = service.get(campaign_id)
    now = sending_of(cli, current, status)
    dead = service.dead_lettered(campaign_id) if status.dead_lettered else []
    tests, tests_count = latest_test_sends(cli, campaign_id)
    # An A/B campaign's variants: one read of the report's aggregates (none for any other).
    variants = service.ab_results(campaign_id) if current.ab_test is not None else None
    if as_json:
        cli.json(
            {
                **status.as_dict(),
                "delivery_mode": current.delivery_mode,
                "weight": current.weight,
                "priority": current.priority,
                "max_rate": current.max_rate,
                "send_at": iso(current.send_at_ms) if current.send_at_ms is not None else None,
                "sending_now": sending_json(now),
                "test_sends": json_of_test_sends(tests, tests_count),
                "ab_test": variants.as_dict() if variants is not None else None,
                "dead_lettered_recipients": [
                    {"recipient_id": r.recipient_id, "reason": r.reason, "updated_at": r.updated_at} for r in dead[:100]
                ],
            }
        )
        return
    _print_status(cli, status, current)
    click.echo(sending_line(now, status))
    print_test_sends(cli, tests, tests_count)
    if variants is not None:
        _print_variants(cli, variants)
    if dead:
        by_reason: dict[str, list[str]] = {}
        for record in dead:
            by_reason.setdefault(record.reason or "(no reason recorded)", []).append(record.recipient_id)
        table = Table(title="dead-lettered recipients (last error)", title_justify="left")
        table.add_column("last error")
        table.add_column("recipients", justify="right")
        table.add_column("recipient ids")
        for reason, ids in sorted(by_reason.items(), key=lambda item: -len(item[1])):
            shown = ", ".join(ids[:10]) + (f", ... ({len(ids) - 10} more)" if len(ids) > 10 else "")
            table.add_row(Text(reason), str(len(ids)), Text(shown))
        cli.out.print(table)
        click.echo("`sendonce dlq redrive` sends them again (nobody twice)")


@campaign.command("reconcile")
@click.argument("campaign_id")
@json_option
@pass_cli
def campaign_reconcile(cli: Cli, campaign_id: str, as_json: bool) -> None:
    """Compare the campaign's counters with a full read of its ledger; print every drift.

    Runs as a job in this process (`sendonce job status ID` shows it; `job run ID` takes up
    one whose CLI died), reading the ledger a page of one shard a step: O(recipients). While
    the campaign sends, the counters lag the ledger by the stream's delay; at rest, any drift
    is a fault. Exits 1 when there is one."""
    job = cli.service().start_reconcile(campaign_id)
    if job.result is None:
        click.echo(describe_job(job), err=True)
        raise SystemExit(ExitCode.PARTIAL)
    result = job.result
    if as_json:
        cli.json(result)
    elif not result["counted"]:
        click.echo(f"campaign {campaign_id}: created before counters (or without them): its status is a full read")
    elif not result["drifts"]:
        total = sum(result["ledger"].values())
        click.echo(f"campaign {campaign_id}: counters equal the ledger ({total:,} recipients)")
    else:
        table = Table(title=f"campaign {campaign_id}: counters differ from the ledger", title_justify="left")
        for column in ("state", "counter", "ledger"):
            table.add_column(column, justify="left" if column == "state" else "right")
        for drift in result["drifts"]:
            table.add_row(drift["state"], str(drift["counter"]), str(drift["ledger"]))
        cli.out.print(table)
    if result["drifts"]:
        raise SystemExit(1)


def _print_status(cli: Cli, status: DeliveryStatus, campaign: Campaign | None = None) -> None:
    reason = f" ({status.state_reason})" if status.state_reason else ""
    spec = ""
    if campaign is not None:
        cap = f", max_rate {campaign.max_rate:g} requests/s" if campaign.max_rate is not None else ""
        spec = f", delivery mode {campaign.delivery_mode}, weight {campaign.weight}, priority {campaign.priority}{cap}"
    click.echo(f"campaign {status.campaign_id}: {status.state.value}{reason}{spec}")
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    values = status.as_dict()
    for label, key in STATUS_ROWS:
        table.add_row(label, str(values[key]))
    cli.out.print(table)


def _print_variants(cli: Cli, results: AbResults) -> None:
    """Each test variant's emails sent, unique opens and clicks and their rates per email sent,
    the rest's (sent the winner); then the winner, or how it will be picked."""
    test, decision = results.test, results.decision
    title = f"A/B test of {test.share:.0%} of the recipients by {test.pick_by}; the rest are sent the winner"
    table = Table(title=title, title_justify="left")
    for column in ("variant", "sent", "unique opens", "open rate", "clicks", "click rate"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for row in (*results.variants, results.rest):
        name = "the rest" if row is results.rest else row.variant
        if decision is not None and row.variant == decision.variant:
            name += " (winner)"
        rates = ["-" if r is None else f"{100 * r:.1f}%" for r in (row.open_rate, row.click_rate)]
        f = row.figures
        table.add_row(Text(name), f"{f.sent:,}", f"{f.opened:,}", rates[0], f"{f.clicked:,}", rates[1])
    cli.out.print(table)
    if decision is None:
        click.echo(
            f"awaiting the winner: the highest rate of unique {test.pick_by} per email sent, {test.after_s // 60} "
            f"minutes after the start, or by hand: `sendonce campaign pick {results.campaign_id} [VARIANT]`"
        )
    else:
        click.echo(f"winner {decision.variant}, picked by {decision.by} at {iso(decision.at_ms)}: {decision.reason}")
    if not results.counted:
        click.echo("(this service keeps no figures per variant)")


class _RateColumn(ProgressColumn):
    def render(self, task: Any) -> Text:
        speed = task.speed
        return Text(f"{speed:.1f}/s" if speed else "-/s")


@campaign.command("watch")
@click.argument("campaign_id")
@click.option(
    "--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True, help="Seconds between reads."
)
@click.option("--timeout", type=click.FloatRange(min=0), default=None, help="Give up after this many seconds (exit 3).")
@click.option(
    "--audit",
    "audit_after",
    is_flag=True,
    help="When the campaign completes, run `campaign audit` on it (inside the provider's retention); "
    "its exit code is the command's.",
)
@json_option
@pass_cli
def campaign_watch(
    cli: Cli, campaign_id: str, interval: float, timeout: float | None, audit_after: bool, as_json: bool
) -> None:
    """Follow progress until the campaign is completed, cancelled or paused.

    A progress bar with rate and ETA; with --json one status line per read.
    """
    _watch(cli, campaign_id, interval, timeout, as_json)
    if audit_after and cli.service().get(campaign_id).state is CampaignState.COMPLETED:
        click.get_current_context().invoke(
            campaign_audit, campaign_id=campaign_id, settle=False, retention_days=None, out=None, as_json=as_json
        )


def _watch(cli: Cli, campaign_id: str, interval: float, timeout: float | None, as_json: bool) -> None:
    service = cli.service()
    current = service.get(campaign_id)  # its provider and delivery mode never change
    deadline = time.monotonic() + timeout if timeout is not None else float("inf")

    def wait() -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(interval, left))
        return True

    if as_json:
        while True:
            status = service.status(campaign_id)
            now = sending_of(cli, current, status)
            cli.json(
                {
                    **status.as_dict(),
                    "sending_now": sending_json(now),
                    "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                }
            )
            if status.state in FINISHED_STATES:
                return
            if not wait():
                raise click.exceptions.Exit(int(ExitCode.PARTIAL))
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=cli.out) as progress:
        task = progress.add_task(campaign_id, total=None)
        while True:
            status = service.status(campaign_id)
            now = sending_of(cli, current, status)
            progress.update(
                task,
                total=status.total or None,
                completed=status.total - status.remaining,
                description=f"{campaign_id} {status.state.value}: {status.sent} sent, {status.failed} failed, "
                f"{status.dead_lettered} dead-lettered\n  {sending_line(now, status, short=True)}",
            )
            if status.state in FINISHED_STATES:
                break
            if not wait():
                progress.stop()
                _print_status(cli, status)
                click.echo(sending_line(now, status))
                fail(ExitCode.PARTIAL, f"timed out after {timeout}s; campaign {campaign_id} is {status.state.value}")
    _print_status(cli, status)
