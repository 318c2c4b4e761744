"""`sendonce campaign publish ID --recipients FILE`: reads the file row by row (a bad row
is named by file, line and field), streams it to the service in batches, or in parallel
streams (`--streams`), with progress. Registered on the `campaign` group by sendonce_ops/cli.py."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from sendonce.domain.campaigns.recipients_file import (
    RecipientFileError,
    RecipientReader,
    RejectedFileError,
    Row,
    describe_row,
    format_for,
)
from sendonce.domain.campaigns.service import PublishReport
from sendonce.domain.errors import (
    InvalidCampaignError,
)
from sendonce_client.streams import DEFAULT_STREAMS, MAX_STREAMS
from sendonce_ops.cli_context import (
    Cli,
    ExitCode,
    fail,
    json_option,
    pass_cli,
)
from sendonce_ops.forecast_cli import run_forecast
from sendonce_ops.publish_streams import publish_file_in_streams
from sendonce_ops.schedule_cli import at_option, instant


@click.command("publish")
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
@click.option(
    "--dry-run",
    is_flag=True,
    help="Publish nothing: print the forecast (audience, per mailbox provider, ETA, cost) instead.",
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
    dry_run: bool = False,
) -> None:
    """Publish recipients from a file, streamed: a draft starts sending (with --at, or a spec's
    send_at, it is scheduled: recipients recorded now, sent from that time).

    Every row is validated; a bad row is reported as FILE:LINE: reason and not sent. A
    recipient_id repeated in the file is sent once and reported; so is an address repeated
    under another id (sent to each unless --dedupe-addresses). Publishing the same file
    again sends nobody twice.
    """
    if dry_run:
        run_forecast(cli, campaign_id, recipients_path, fmt, dedupe_addresses=dedupe_addresses, as_json=as_json)
        return
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
            fail(ExitCode.BAD_INPUT, f"rejected: {exc} (fix them, or publish without --strict to skip them)")
        except InvalidCampaignError as exc:
            done = progress.get("report")
            if done is None or not done.accepted:
                raise
            fail(
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
