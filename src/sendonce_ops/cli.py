"""`sendonce`: the operator's command line. Parsing and presentation only; every decision
is CampaignService's (lambdas/sendonce/campaigns.py), as it is for the HTTP API.

Endpoints come from the CloudFormation stack's outputs or SENDONCE_* variables
(sendonce_ops.endpoints). docs/cli.md lists the commands with examples.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import importlib
import io
import json
import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import IO, Any

import boto3
import click
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError, NoRegionError
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from sendonce.domain.campaigns.operator_input import (
    RecipientFileError,
    RecipientReader,
    RejectedFileError,
    Row,
    describe_row,
    format_for,
)
from sendonce.domain.campaigns.scheduling import iso
from sendonce.domain.campaigns.service import CampaignService, DeliveryStatus, PublishReport
from sendonce.domain.campaigns.unknowns import DEFAULT_UNKNOWN_WINDOW_S
from sendonce.domain.errors import (
    CampaignNotFoundError,
    CampaignScheduleError,
    IllegalTransitionError,
    InvalidCampaignError,
    JobNotFoundError,
    SettingsError,
)
from sendonce.domain.jobs.models import Job
from sendonce.domain.models import Campaign, CampaignState
from sendonce.wiring import campaign_service, unknown_outcomes
from sendonce_client.streams import DEFAULT_STREAMS, MAX_STREAMS
from sendonce_ops.endpoints import DEFAULT_STACK, Endpoints, EndpointsError, queue_arn, resolve_endpoints
from sendonce_ops.preview_cli import (
    campaign_preview,
    campaign_test_send,
    json_of_test_sends,
    latest_test_sends,
    print_test_sends,
)
from sendonce_ops.publish_streams import publish_file_in_streams
from sendonce_ops.schedule_cli import at_option, campaign_reschedule, campaign_unschedule, instant
from sendonce_ops.specs import SpecError, load_spec, locate


class ExitCode(IntEnum):
    OK = 0
    UNEXPECTED = 1
    BAD_INPUT = 2  # usage error, invalid spec or file, campaign / stack / record not found
    PARTIAL = 3  # part done: bad rows skipped, or `watch` timed out
    CONFLICT = 4  # not allowed in the campaign's state (illegal transition, id exists)
    AUDIT_DIFFERENCES = 5  # `campaign audit` found a duplicate or an unexplained difference


EXIT_CODES_HELP = """\b
Exit codes:
  0  done
  1  unexpected error (AWS unreachable, a bug)
  2  usage error, invalid spec or recipient file, or not found
     (campaign, stack, ledger record)
  3  partly done: bad rows were skipped (publish without --strict),
     a publish stopped after some batches, or watch --timeout ran out
  4  not allowed in the campaign's state: an illegal transition
     (e.g. resume a cancelled campaign), or the id exists already;
     an audit outside the provider's retention
  5  an audit found a duplicate or an unexplained difference
"""

FINISHED_STATES = (CampaignState.COMPLETED, CampaignState.CANCELLED, CampaignState.PAUSED)


# --- context ------------------------------------------------------------------------


@dataclass
class Cli:
    stack: str
    operator_name: str | None
    out: Console
    err: Console
    _session: Any = None
    _endpoints: Endpoints | None = None
    _services: dict[bool, CampaignService] = field(default_factory=dict)

    @property
    def session(self) -> boto3.session.Session:
        if self._session is None:
            self._session = boto3.session.Session()
            if not self._session.region_name:
                raise NoRegionError()
        return self._session

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None:
            self._endpoints = resolve_endpoints(self.session, self.stack, os.environ)
        return self._endpoints

    def service(self, *, writes: bool = False) -> CampaignService:
        """The operator service; `writes` records who changes state (an STS call, made only then)."""
        if writes not in self._services:
            operator = self.operator() if writes else "operator"
            service = campaign_service(self.endpoints.api_settings(), operator=operator)
            endpoints, session = self.endpoints, self.session
            # `resume --include-unknown` (and `job run` of one) reads and reopens unknowns.
            service.jobs.unknown_outcomes = lambda accept: unknown_outcomes(
                endpoints.ledger_table, endpoints.campaigns_table, session, accept_possible_duplicates=accept
            )
            self._services[writes] = service
        return self._services[writes]

    def operator(self) -> str:
        if self.operator_name:
            return self.operator_name
        try:
            return self.session.client("sts").get_caller_identity()["Arn"]
        except (BotoCoreError, ClientError):
            return f"cli:{getpass.getuser()}"

    def sqs(self) -> Any:
        return self.session.client("sqs")

    def transition_output(self, campaign: Campaign, verb: str, as_json: bool) -> None:
        _transition_output(self, campaign, verb, as_json)

    def json(self, data: Any) -> None:
        click.echo(json.dumps(data, default=str))

    def warn(self, message: str) -> None:
        click.echo(message, err=True)


pass_cli = click.make_pass_decorator(Cli)


class _Group(click.Group):
    """Turns the domain's errors into a message on stderr and a documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - every error leaves with a message and a code
            code, message = _classify(exc)
            click.echo(message, err=True)
            if code is ExitCode.UNEXPECTED and os.environ.get("SENDONCE_DEBUG"):
                traceback.print_exc()
            ctx.exit(int(code))


# The commands that run sendonce on this machine (moto, the local HTTP API, the demo), by
# name: their module is imported only when one of them is listed or run, so operating a
# deployed stack loads neither the Lambda handlers nor moto and the CDK.
LOCAL_COMMANDS_MODULE = "sendonce_local.commands"
LOCAL_COMMANDS = ("demo", "local")


class _Sendonce(_Group):
    """The `sendonce` group: its own commands, and the local ones attached on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LOCAL_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in LOCAL_COMMANDS:
            command = _local_command(cmd_name)
        return command


def _local_command(name: str) -> click.Command:
    try:
        module = importlib.import_module(LOCAL_COMMANDS_MODULE)
    except ImportError as error:
        return _unavailable(name, error)
    return getattr(module, name)


def _unavailable(name: str, error: ImportError) -> click.Command:
    """A stand-in that says why `sendonce NAME ...` cannot run, whatever its arguments."""
    reason = f"the local tooling (sendonce_local) cannot be imported: {error}"

    @click.command(
        name, help=f"Unavailable: {reason}.", short_help=f"(unavailable: {error})", add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )  # fmt: skip
    def unavailable() -> None:
        if os.environ.get("SENDONCE_DEBUG"):
            traceback.print_exception(error)
        _fail(
            ExitCode.UNEXPECTED,
            f"error: `sendonce {name}` is unavailable: {reason}. It needs sendonce's runtime dependencies "
            "(moto[server], aws-cdk-lib, constructs, cdk-nag): reinstall with `pip install sendonce`, not --no-deps.",
        )

    return unavailable


def _classify(exc: Exception) -> tuple[ExitCode, str]:
    if isinstance(exc, SpecError):
        return ExitCode.BAD_INPUT, "\n".join(exc.problems) + "\nnothing was created"
    if isinstance(exc, IllegalTransitionError):
        return ExitCode.CONFLICT, f"error: {exc}"
    if isinstance(exc, CampaignScheduleError):  # scheduled and recorded; only the schedule is missing
        return ExitCode.PARTIAL, f"error: {exc}"
    if isinstance(exc, (CampaignNotFoundError, JobNotFoundError, InvalidCampaignError, EndpointsError, SettingsError)):
        return ExitCode.BAD_INPUT, f"error: {exc}"
    if isinstance(exc, NoRegionError):
        return ExitCode.BAD_INPUT, "error: no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or a profile's region)"
    if isinstance(exc, NoCredentialsError):
        return ExitCode.BAD_INPUT, "error: no AWS credentials found (set AWS_PROFILE or AWS_ACCESS_KEY_ID/...)"
    if isinstance(exc, EndpointConnectionError):
        return ExitCode.UNEXPECTED, f"error: cannot reach AWS: {exc}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return ExitCode.UNEXPECTED, f"error: AWS {exc.operation_name}: {error.get('Code')}: {error.get('Message')}"
    return ExitCode.UNEXPECTED, f"unexpected error: {type(exc).__name__}: {exc} (SENDONCE_DEBUG=1 shows the traceback)"


def _fail(code: ExitCode, message: str) -> None:
    click.echo(message, err=True)
    raise click.exceptions.Exit(int(code))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")


@click.group(cls=_Sendonce, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--stack",
    envvar="SENDONCE_STACK",
    default=DEFAULT_STACK,
    show_default=True,
    help="CloudFormation stack whose outputs name the queues and tables. SENDONCE_QUEUE_URL, "
    "SENDONCE_DEAD_LETTER_QUEUE_URL, SENDONCE_LEDGER_TABLE and SENDONCE_CAMPAIGNS_TABLE override them "
    "(with all four set, no stack is read). Env: SENDONCE_STACK.",
)
@click.option(
    "--operator",
    "operator_name",
    envvar="SENDONCE_OPERATOR",
    default=None,
    help="Recorded as who changed a campaign's state. Default: your AWS identity's ARN. Env: SENDONCE_OPERATOR.",
)
@click.pass_context
def cli(ctx: click.Context, stack: str, operator_name: str | None) -> None:
    """Operate sendonce campaigns: create, publish, pause, resume, cancel, watch; the DLQ; the ledger.

    Region and credentials come from the usual AWS settings (AWS_REGION, AWS_PROFILE, ...);
    AWS_ENDPOINT_URL points every client elsewhere (e.g. moto's server).
    """
    ctx.obj = Cli(
        stack=stack,
        operator_name=operator_name,
        out=Console(highlight=False),
        err=Console(stderr=True, highlight=False),
    )


def main() -> None:
    cli(prog_name="sendonce")


# --- campaign -----------------------------------------------------------------------


@cli.group()
def campaign() -> None:
    """Create and steer campaigns (state machine: docs/operations-campaigns.md)."""


def campaign_summary(campaign: Campaign) -> dict[str, Any]:
    return {
        "campaign_id": campaign.campaign_id,
        "name": campaign.name,
        "provider": campaign.provider,
        "from": campaign.sender,
        "subject": campaign.subject,
        "delivery_mode": campaign.delivery_mode,
        "state": campaign.state.value,
        "state_reason": campaign.state_reason,
        "state_changed_by": campaign.state_changed_by,
        "updated_at": campaign.updated_at,
        "send_at": iso(campaign.send_at_ms) if campaign.send_at_ms is not None else None,
    }


@campaign.command("list")
@click.option(
    "--state", type=click.Choice([s.value for s in CampaignState]), default=None, help="Only campaigns in this state."
)
@json_option
@pass_cli
def campaign_list(cli: Cli, state: str | None, as_json: bool) -> None:
    """The campaigns (id, state, delivery mode, last change), by id.

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
    for column in ("id", "state", "delivery mode", "updated"):
        table.add_column(column)
    for c in campaigns:
        reason = f" ({c.state_reason})" if c.state_reason else ""
        table.add_row(Text(c.campaign_id), Text(c.state.value + reason), c.delivery_mode, c.updated_at or "-")
    cli.out.print(table)


@campaign.command("create")
@click.option(
    "--spec",
    "spec_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="YAML or JSON: id, name, subject, from, reply_to, html / html_file, text / text_file, provider, "
    "delivery_mode.",
)
@json_option
@pass_cli
def campaign_create(cli: Cli, spec_path: Path, as_json: bool) -> None:
    """Create a campaign (state draft) from a spec file and print its id."""
    spec = load_spec(spec_path)  # before any AWS call: a bad spec touches nothing
    try:
        created = cli.service(writes=True).create(spec.to_campaign())
    except InvalidCampaignError as exc:  # e.g. an unregistered provider: point at its line
        raise SpecError([locate(spec_path, str(exc))]) from exc
    if as_json:
        cli.json(campaign_summary(created))
    else:
        click.echo(created.campaign_id)


@campaign.command("publish")
@click.argument("campaign_id")
@click.option(
    "--recipients",
    "recipients_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="CSV (header recipient_id,email,...; other columns are template variables) or JSON Lines "
    '({"recipient_id", "email", "variables"}).',
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl"]),
    default=None,
    help="Default: from the extension (.csv, .jsonl, .ndjson).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Check every row first and publish nothing if any is bad (exit 2). "
    "Without it bad rows are skipped and reported, the rest published (exit 3).",
)
@click.option(
    "--dedupe-addresses",
    is_flag=True,
    help="Send an address given under several recipient ids once (the first row). Without it such "
    "rows are reported and each is sent.",
)
@click.option(
    "--batch-size", type=click.IntRange(1, 100), default=100, show_default=True, help="Recipients per SQS message."
)
@click.option(
    "--streams",
    type=click.IntRange(1, MAX_STREAMS),
    default=DEFAULT_STREAMS,
    show_default=True,
    help="Chunks of 1,000 recipients published at once (1: one after another; a scheduled publish uses 1).",
)
@at_option(required=False)
@json_option
@pass_cli
def campaign_publish(
    cli: Cli,
    campaign_id: str,
    recipients_path: Path,
    fmt: str | None,
    strict: bool,
    dedupe_addresses: bool,
    batch_size: int,
    streams: int,
    at: str | None,
    as_json: bool,
) -> None:
    """Publish recipients from a file, streamed: a draft starts sending (with --at, or a spec's
    send_at, it is scheduled: recipients recorded now, sent from that time).

    Every row is validated; a bad row is reported as FILE:LINE: reason and not sent. A
    recipient_id repeated in the file is sent once and reported; so is an address repeated
    under another id (sent to each unless --dedupe-addresses). Publishing the same file
    again sends nobody twice.
    """
    name = str(recipients_path)
    file_format = format_for(name, fmt)
    send_at_ms = instant(at)  # a bad time fails before the file is read
    progress: dict[str, Any] = {}

    def report(row: Row) -> None:
        cli.warn(f"{name}:{row.line}: {describe_row(row, dedupe_addresses=dedupe_addresses)}")

    passes = iter(("checking", "publishing") if strict else ("publishing",))

    with _publish_progress(cli.err, recipients_path, quiet=as_json) as bar:

        def on_batch(so_far: PublishReport) -> None:
            progress["report"] = so_far
            bar.published(so_far)

        def rows() -> Iterator[Row]:
            bar.start(next(passes, "publishing"))
            return _recipient_rows(recipients_path, file_format, on_read=bar.advance)

        try:
            result, tally = publish_file_in_streams(
                cli.service(writes=True),
                campaign_id,
                rows,
                streams=streams,
                name=name,
                strict=strict,
                dedupe_addresses=dedupe_addresses,
                on_report=report,
                batch_size=batch_size,
                on_batch=on_batch,
                send_at_ms=send_at_ms,
            )
        except RejectedFileError as exc:
            _fail(ExitCode.BAD_INPUT, f"rejected: {exc} (fix them, or publish without --strict to skip them)")
        except InvalidCampaignError as exc:
            done = progress.get("report")
            if done is None or not done.accepted:
                raise
            _fail(
                ExitCode.PARTIAL,
                f"error: {exc}\n{done.accepted} recipients were published before it; "
                "fix the file and run the same command again (nobody is sent twice)",
            )
    duplicates = tally.duplicates + len(result.duplicates_in_input)
    summary = {
        "campaign_id": campaign_id,
        "accepted": result.accepted,
        "bad_rows": tally.bad,
        "duplicates": duplicates,
        "duplicate_addresses": tally.duplicate_addresses,
        "batches_new": result.batches_new,
        "batches_already_enqueued": result.batches_already_enqueued,
        "messages_sent": result.messages_sent,
        "batches_recorded": result.batches_recorded,
        "send_at": result.send_at,
    }
    if as_json:
        cli.json(summary)
    else:
        if result.send_at:
            click.echo(f"scheduled {campaign_id} for {result.send_at}: recorded now, sent from then")
        else:
            click.echo(f"published to {campaign_id}")
        table = Table(show_header=False)
        table.add_column(style="bold")
        table.add_column(justify="right")
        table.add_row("accepted", str(result.accepted))
        table.add_row("bad rows (skipped)", str(tally.bad))
        table.add_row("duplicates (sent once)", str(duplicates))
        table.add_row(
            "same address, another id " + ("(sent once)" if dedupe_addresses else "(sent to each)"),
            str(tally.duplicate_addresses),
        )
        table.add_row("batches new", str(result.batches_new))
        table.add_row("batches already enqueued", str(result.batches_already_enqueued))
        table.add_row("SQS messages sent", str(result.messages_sent))
        if result.send_at:
            table.add_row("batches recorded (sent at the start)", str(result.batches_recorded))
        cli.out.print(table)
    if tally.bad:
        raise click.exceptions.Exit(int(ExitCode.PARTIAL))


def _recipient_rows(path: Path, file_format: str, on_read: Callable[[int], None] | None = None) -> Iterator[Row]:
    """The file's rows, read as they are consumed; the header is checked now. `on_read`
    hears of every chunk of bytes read from the file (the progress bar's measure)."""
    name = str(path)
    try:
        raw: io.RawIOBase = io.FileIO(path, "rb")
        if on_read is not None:
            raw = _CountingReader(raw, on_read)
        handle = io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8-sig", newline="")
    except FileNotFoundError:
        raise RecipientFileError(f"{name}: no such file") from None
    except OSError as exc:
        raise RecipientFileError(f"{name}: cannot be read: {exc}") from None
    try:
        reader = RecipientReader(_text_lines(handle, name), file_format, name=name)
    except BaseException:
        handle.close()
        raise
    return _closing(reader, handle)


def _closing(rows: Iterable[Row], handle: IO[str]) -> Iterator[Row]:
    with handle:
        yield from rows


def _text_lines(handle: IO[str], name: str) -> Iterator[str]:
    number = 0
    try:
        for number, line in enumerate(handle, start=1):  # noqa: B007 - number is read after the loop
            yield line
    except UnicodeDecodeError:
        raise RecipientFileError(f"{name}:{number + 1}: not UTF-8 text") from None


class _CountingReader(io.RawIOBase):
    """A file's bytes, reporting how many each read returned."""

    def __init__(self, raw: io.RawIOBase, on_read: Callable[[int], None]):
        self._raw = raw
        self._on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        count = self._raw.readinto(buffer)
        if count:
            self._on_read(count)
        return count

    def close(self) -> None:
        self._raw.close()
        super().close()


class _PublishProgress:
    """The publish bar: bytes of the recipient file read, with rate and ETA. Silent when
    stderr is not a terminal (or with --json): nothing but row reports reaches stderr then."""

    def __init__(self, progress: Progress | None, path: Path):
        self._progress = progress
        self._name = path.name
        try:
            self._total: int | None = path.stat().st_size
        except OSError:
            self._total = None
        self._task: Any = None
        self._pass = "publishing"

    def start(self, what: str) -> None:
        """A read of the file begins (strict mode reads it twice: checking, then publishing)."""
        self._pass = what
        if self._progress is None:
            return
        if self._task is None:
            self._task = self._progress.add_task(f"{what} {self._name}", total=self._total)
        else:
            self._progress.reset(self._task, total=self._total, description=f"{what} {self._name}")

    def advance(self, count: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, count)

    def published(self, report: PublishReport) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=f"{self._pass} {self._name}: {report.accepted:,} recipients")


@contextlib.contextmanager
def _publish_progress(console: Console, path: Path, *, quiet: bool) -> Iterator[_PublishProgress]:
    if quiet or not console.is_terminal:
        yield _PublishProgress(None, path)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as progress:
        yield _PublishProgress(progress, path)


def _job_extra(job: Job | None) -> dict[str, Any]:
    """A resume's job: the recipients it republished once done, the job itself."""
    if job is None:
        return {"republished": 0, "job": None}
    return {"republished": job.progress.get("republished", 0) if job.done else None, "job": job.as_dict()}


def _transition_output(cli: Cli, campaign: Campaign, verb: str, as_json: bool, **extra: Any) -> None:
    if as_json:
        cli.json({**campaign_summary(campaign), **extra})
        return
    reason = f" ({campaign.state_reason})" if campaign.state_reason else ""
    if campaign.state is CampaignState.SCHEDULED and campaign.send_at_ms is not None:
        reason = f" (for {iso(campaign.send_at_ms)})"
    line = f"{verb} {campaign.campaign_id}: now {campaign.state.value}{reason}, by {campaign.state_changed_by}"
    job = extra.get("job")
    if job is not None and job["state"] == "running":
        line += f"; job {job['job_id']} is republishing (`sendonce job watch {job['job_id']}`)"
    elif extra.get("republished") is not None:
        line += f"; republished {extra['republished']} recipient(s) not yet ended"
    if extra.get("reopened") or extra.get("confirmed_sent"):
        line += (
            f"; reopened {len(extra['reopened'])} unknown outcome(s), "
            f"{len(extra['confirmed_sent'])} confirmed sent by the provider"
        )
    click.echo(line)


@campaign.command("pause")
@click.argument("campaign_id")
@click.option("--reason", default=None, help="Recorded with the state change.")
@json_option
@pass_cli
def campaign_pause(cli: Cli, campaign_id: str, reason: str | None, as_json: bool) -> None:
    """Stop sending: consumers send no new batch of this campaign (those in progress finish)."""
    _transition_output(cli, cli.service(writes=True).pause(campaign_id, reason=reason), "paused", as_json)


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
        _fail(ExitCode.BAD_INPUT, "error: --accept-possible-duplicates needs --include-unknown")
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
            _fail(ExitCode.PARTIAL, describe_job(reopening))
        republish = reopening.result["republish_job"]
        _transition_output(
            cli,
            service.get(campaign_id),
            "resumed",
            as_json,
            **_job_extra(service.jobs.get(republish) if republish else None),
            reopened=reopening.listed.get("reopened", []),
            confirmed_sent=reopening.listed.get("confirmed_sent", []),
            not_reopened=reopening.listed.get("not_reopened", []),
        )
        return
    if recipient_ids:
        _fail(ExitCode.BAD_INPUT, "error: --recipient chooses unknown deliveries: it needs --include-unknown")
    resumed, job = cli.service(writes=True).resume(campaign_id, reason=reason)
    _transition_output(cli, resumed, "resumed", as_json, **_job_extra(job))


@campaign.command("cancel")
@click.argument("campaign_id")
@click.option("--reason", default=None, help="Recorded with the state change.")
@json_option
@pass_cli
def campaign_cancel(cli: Cli, campaign_id: str, reason: str | None, as_json: bool) -> None:
    """End the campaign: recipients not yet sent end as cancelled. Cannot be undone."""
    cancelled, job = cli.service(writes=True).cancel(campaign_id, reason=reason)
    _transition_output(cli, cancelled, "cancelled", as_json, job=job.as_dict())


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
    """Counts of the campaign's deliveries by outcome, its state and why."""
    service = cli.service()
    status = service.status(campaign_id)
    current = service.get(campaign_id)
    delivery_mode = current.delivery_mode
    dead = service.dead_lettered(campaign_id) if status.dead_lettered else []
    tests, tests_count = latest_test_sends(cli, campaign_id)
    if as_json:
        cli.json(
            {
                **status.as_dict(),
                "delivery_mode": delivery_mode,
                "send_at": iso(current.send_at_ms) if current.send_at_ms is not None else None,
                "test_sends": json_of_test_sends(tests, tests_count),
                "dead_lettered_recipients": [
                    {"recipient_id": r.recipient_id, "reason": r.reason, "updated_at": r.updated_at} for r in dead[:100]
                ],
            }
        )
        return
    _print_status(cli, status, delivery_mode)
    print_test_sends(cli, tests, tests_count)
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


def _print_status(cli: Cli, status: DeliveryStatus, delivery_mode: str | None = None) -> None:
    reason = f" ({status.state_reason})" if status.state_reason else ""
    mode = f", delivery mode {delivery_mode}" if delivery_mode else ""
    click.echo(f"campaign {status.campaign_id}: {status.state.value}{reason}{mode}")
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    values = status.as_dict()
    for label, key in STATUS_ROWS:
        table.add_row(label, str(values[key]))
    cli.out.print(table)


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
            cli.json({**status.as_dict(), "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
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
            progress.update(
                task,
                total=status.total or None,
                completed=status.total - status.remaining,
                description=f"{campaign_id} {status.state.value}: {status.sent} sent, {status.failed} failed, "
                f"{status.dead_lettered} dead-lettered",
            )
            if status.state in FINISHED_STATES:
                break
            if not wait():
                progress.stop()
                _print_status(cli, status)
                _fail(ExitCode.PARTIAL, f"timed out after {timeout}s; campaign {campaign_id} is {status.state.value}")
    _print_status(cli, status)


# --- dead-letter queue --------------------------------------------------------------


@cli.group()
def dlq() -> None:
    """The dead-letter queue: what is there and why; send it again."""


@dlq.command("list")
@click.option(
    "--limit", type=click.IntRange(min=1), default=1000, show_default=True, help="Read at most this many messages."
)
@json_option
@pass_cli
def dlq_list(cli: Cli, limit: int, as_json: bool) -> None:
    """Messages in the DLQ grouped by campaign, with the last error (read, not consumed)."""
    from sendonce_ops.dead_letters import read_dead_letters

    letters = read_dead_letters(cli.sqs(), cli.endpoints.dead_letter_queue_url, limit=limit)
    summary = cli.service().dead_letter_summary(letters)
    if as_json:
        cli.json(summary.as_dict())
        return
    if not summary.messages:
        click.echo("the dead-letter queue is empty")
        return
    table = Table(title=f"dead-letter queue: {len(summary.messages)} message(s)", title_justify="left")
    for column, justify in (
        ("campaign", "left"),
        ("messages", "right"),
        ("recipients", "right"),
        ("dead-lettered", "right"),
        ("last error", "left"),
    ):
        table.add_column(column, justify=justify)
    for group in summary.groups:
        table.add_row(
            group.campaign_id or "(not a batch)",
            str(group.messages),
            str(group.recipients),
            str(group.dead_lettered),
            Text(group.last_error or "-"),
        )
    cli.out.print(table)


@dlq.command("redrive")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Move at most N messages (moved by this command: SQS move tasks take no count).",
)
@click.option("--rate", type=click.IntRange(1, 500), default=None, help="Messages per second for the SQS move task.")
@json_option
@pass_cli
def dlq_redrive(cli: Cli, limit: int | None, rate: int | None, as_json: bool) -> None:
    """Move the DLQ's messages back to the campaign queue to be processed again.

    Uses SQS StartMessageMoveTask; where that is not available (moto) the messages are moved
    by this command instead, and it says so. Recipients already sent are not sent again.
    """
    from sendonce_ops.dead_letters import redrive

    endpoints = cli.endpoints
    sqs = cli.sqs()
    result = redrive(
        cli.session,
        dead_letter_queue_url=endpoints.dead_letter_queue_url,
        queue_url=endpoints.queue_url,
        dead_letter_queue_arn=endpoints.dead_letter_queue_arn or queue_arn(sqs, endpoints.dead_letter_queue_url),
        queue_arn=endpoints.queue_arn or queue_arn(sqs, endpoints.queue_url),
        limit=limit,
        rate=rate,
    )
    if as_json:
        cli.json(result.as_dict())
        return
    if result.method == "move-task":
        click.echo(
            f"SQS is moving the DLQ's messages back to the campaign queue (task {result.task_handle}); "
            "`sendonce dlq list` shows what is left"
        )
        return
    if result.fallback_reason:
        cli.warn(f"{result.fallback_reason}; moving the messages directly instead")
    click.echo(f"moved {result.moved} message(s) from the DLQ back to the campaign queue")


# --- ledger -------------------------------------------------------------------------


@cli.group()
def ledger() -> None:
    """The delivery ledger: one record per (campaign, recipient)."""


@ledger.command("show")
@click.argument("campaign_id")
@click.argument("recipient_id")
@json_option
@pass_cli
def ledger_show(cli: Cli, campaign_id: str, recipient_id: str, as_json: bool) -> None:
    """One delivery's record and history (the address appears only as a fingerprint)."""
    record = cli.service().delivery(campaign_id, recipient_id)
    if record is None:
        _fail(
            ExitCode.BAD_INPUT,
            f"error: no ledger record for recipient {recipient_id!r} of campaign {campaign_id!r} "
            "(not claimed by a consumer yet, or never published)",
        )
    if as_json:
        cli.json(record.model_dump(mode="json"))
        return
    click.echo(f"delivery {campaign_id} / {recipient_id}")
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for name in (
        "state",
        "reason",
        "error_class",
        "attempts",
        "provider",
        "provider_message_id",
        "batch_id",
        "owner",
        "lease_until_ms",
        "maybe_sent_at_ms",
        "email_fingerprint",
        "updated_at",
    ):
        value = getattr(record, name)
        if value is not None:
            table.add_row(name, Text(str(value.value if hasattr(value, "value") else value)))
    cli.out.print(table)
    history = Table(title="history", title_justify="left")
    for column in ("at", "event", "owner", "detail"):
        history.add_column(column)
    for entry in record.history:
        history.add_row(*(Text(str(entry.get(c) or "")) for c in ("at", "event", "owner", "detail")))
    cli.out.print(history)


# --- deliverability: the suppression list, unknown outcomes (docs/deliverability.md) ---

from sendonce_ops.audit_cli import campaign_audit  # noqa: E402
from sendonce_ops.deliverability_cli import campaign_unknowns, suppression  # noqa: E402
from sendonce_ops.jobs_cli import describe as describe_job  # noqa: E402
from sendonce_ops.jobs_cli import job  # noqa: E402
from sendonce_ops.report_cli import campaign_report  # noqa: E402

cli.add_command(suppression)
campaign.add_command(campaign_unknowns)
campaign.add_command(campaign_report)
campaign.add_command(campaign_audit)
cli.add_command(job)
campaign.add_command(campaign_preview)
campaign.add_command(campaign_test_send)
campaign.add_command(campaign_reschedule)
campaign.add_command(campaign_unschedule)

# --- the cost model (docs/benchmarks.md) ---

from sendonce_ops.cost import cost  # noqa: E402

cli.add_command(cost)


if __name__ == "__main__":
    main()
