"""What operators hand in — a campaign spec and a recipient file — parsed and validated
the same way for the CLI and the HTTP API.

A recipient file is CSV (header ``recipient_id,email,...``; the other columns become
template variables) or JSON Lines (``{"recipient_id", "email", "variables": {}}``). It is
read as a stream of lines: one row is held at a time, plus the ids seen so far (to report
a repeated id with the line it first appeared on). Each row either yields a recipient or a
problem naming its line; nothing here publishes anything.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from email.utils import parseaddr
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sendonce.campaigns import CampaignService, PublishReport
from sendonce.errors import InvalidCampaignError
from sendonce.models import MAX_RECIPIENTS_PER_BATCH, Campaign, Content, Identifier, Recipient, is_valid_email

RecipientFormat = Literal["csv", "jsonl"]
FORMATS_BY_SUFFIX: dict[str, RecipientFormat] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}

_ID_RULE = "must be 1-100 letters, digits, '_' or '-', starting with a letter or digit (an opaque id, never an email address)"


class RecipientFileError(InvalidCampaignError):
    """The file as a whole cannot be read (no header, unknown format): nothing was published."""


def friendly_message(error: Mapping[str, Any]) -> str:
    """A pydantic error's message in our words, never quoting the input."""
    loc = error.get("loc") or ("",)
    message = str(error.get("msg", ""))
    if error.get("type") == "string_pattern_mismatch" and str(loc[-1]) in ("recipient_id", "id", "campaign_id"):
        return _ID_RULE
    if error.get("type") == "extra_forbidden":
        return "unexpected field"
    return message.removeprefix("Value error, ")


def describe_validation_error(exc: ValidationError, *, limit: int = 5) -> list[tuple[str, str]]:
    """(field, message) pairs without the offending input, so no address leaks into output."""
    return [
        (".".join(str(p) for p in err["loc"]), friendly_message(err))
        for err in exc.errors(include_url=False, include_input=False)[:limit]
    ]


def _check_address(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    value = value.strip()
    _, address = parseaddr(value)
    if not address or not is_valid_email(address):
        raise ValueError(f"not a valid {what} address (use a@example.com or Name <a@example.com>)")
    return value


class CampaignSpec(BaseModel):
    """A campaign as an operator writes it (YAML/JSON spec file or the API's POST body)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: Identifier = Field(description="The campaign id: letters, digits, '_' and '-'.")
    name: str = Field(min_length=1, max_length=200)
    subject: str = Field(min_length=1, max_length=998, description="Jinja template; not HTML.")
    sender: str = Field(alias="from", min_length=3, max_length=320, description="From address, e.g. News <news@example.com>.")
    reply_to: str | None = Field(default=None, max_length=320)
    html: str | None = Field(default=None, description="Jinja template; variables are HTML-escaped.")
    text: str | None = Field(default=None, description="Jinja template for the plain-text part.")
    provider: str = Field(min_length=1, description="A registered provider: ses or resend.")

    @field_validator("sender")
    @classmethod
    def _sender_is_an_address(cls, value: str) -> str:
        return _check_address(value, "sender")

    @field_validator("reply_to")
    @classmethod
    def _reply_to_is_an_address(cls, value: str | None) -> str | None:
        return _check_address(value, "reply-to")

    @model_validator(mode="after")
    def _some_body(self) -> CampaignSpec:
        if not self.html and not self.text:
            raise ValueError("html or text is required")
        return self

    def to_campaign(self) -> Campaign:
        return Campaign(
            campaign_id=self.id,
            name=self.name,
            provider=self.provider,
            sender=self.sender,
            reply_to=self.reply_to,
            content=Content(subject=self.subject, html=self.html, text=self.text),
        )


class InlineRecipient(Recipient):
    """A recipient in an API body: the address is checked up front, like a file row."""

    @field_validator("email")
    @classmethod
    def _email_is_an_address(cls, value: str) -> str:
        if not is_valid_email(value.strip()):
            raise ValueError("not a valid email address")
        return value.strip()


@dataclass(frozen=True)
class Row:
    """One record of a recipient file: a recipient to publish, a problem, or a repeat."""

    line: int
    recipient: Recipient | None = None
    problem: str | None = None
    first_line: int | None = None  # set for a repeated recipient_id: where it appeared first

    @property
    def is_duplicate(self) -> bool:
        return self.first_line is not None


def format_for(name: str, given: str | None = None) -> RecipientFormat:
    if given:
        if given not in ("csv", "jsonl"):
            raise RecipientFileError(f"{name}: unknown format {given!r} (csv or jsonl)")
        return given  # type: ignore[return-value]
    lowered = name.lower()
    for suffix, fmt in FORMATS_BY_SUFFIX.items():
        if lowered.endswith(suffix):
            return fmt
    raise RecipientFileError(f"{name}: cannot tell the format from the name; say csv or jsonl")


class RecipientReader:
    """Iterate a recipient file's rows. A CSV header is read and checked on construction,
    so a file that cannot be read at all fails before anything is published."""

    def __init__(self, lines: Iterable[str], fmt: RecipientFormat, *, name: str = "recipients"):
        self._name = name
        self._fmt = fmt
        self._lines = iter(lines)
        self._seen: dict[str, int] = {}
        self._columns: list[str] = []
        if fmt == "csv":
            self._csv = csv.reader(self._lines)
            self._read_header()

    def _read_header(self) -> None:
        header: list[str] | None = None
        while header is None:
            try:
                header = next(self._csv)
            except StopIteration:
                raise RecipientFileError(f"{self._name}: the file is empty (expected a header recipient_id,email,...)") from None
            except csv.Error as exc:
                raise RecipientFileError(f"{self._name}:{self._csv.line_num}: header is not valid CSV: {exc}") from exc
            if not any(cell.strip() for cell in header):
                header = None
        columns = [cell.strip() for cell in header]
        if columns and columns[0].startswith("\ufeff"):
            columns[0] = columns[0][1:]
        line = self._csv.line_num
        missing = [c for c in ("recipient_id", "email") if c not in columns]
        if missing:
            raise RecipientFileError(
                f"{self._name}:{line}: header must name the columns recipient_id and email (missing: {', '.join(missing)})"
            )
        repeated = sorted({c for c in columns if columns.count(c) > 1})
        if repeated:
            raise RecipientFileError(f"{self._name}:{line}: column(s) named twice in the header: {', '.join(repeated)}")
        if "" in columns:
            raise RecipientFileError(f"{self._name}:{line}: a header column has no name")
        self._columns = columns

    def __iter__(self) -> Iterator[Row]:
        rows = self._csv_rows() if self._fmt == "csv" else self._jsonl_rows()
        for row in rows:
            if row.recipient is not None:
                first = self._seen.setdefault(row.recipient.recipient_id, row.line)
                if first != row.line:
                    row = Row(line=row.line, recipient=row.recipient, first_line=first)
            yield row

    def _csv_rows(self) -> Iterator[Row]:
        width = len(self._columns)
        while True:
            start = self._csv.line_num + 1
            try:
                cells = next(self._csv)
            except StopIteration:
                return
            except csv.Error as exc:
                yield Row(line=start, problem=f"not valid CSV: {exc}")
                if self._csv.line_num < start:
                    return
                continue
            if not any(cell.strip() for cell in cells):
                continue  # blank line
            if len(cells) != width:
                yield Row(line=start, problem=f"expected {width} columns, found {len(cells)}")
                continue
            values = dict(zip(self._columns, cells, strict=True))
            recipient_id = values.pop("recipient_id").strip()
            email = values.pop("email").strip()
            yield _row(start, {"recipient_id": recipient_id, "email": email, "variables": values})

    def _jsonl_rows(self) -> Iterator[Row]:
        for number, line in enumerate(self._lines, start=1):
            if number == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                yield Row(line=number, problem=f"not valid JSON: {exc.msg} (column {exc.colno})")
                continue
            if not isinstance(data, dict):
                yield Row(line=number, problem="expected a JSON object {\"recipient_id\", \"email\", \"variables\"}")
                continue
            for name in ("recipient_id", "email"):
                if isinstance(data.get(name), str):
                    data[name] = data[name].strip()
            yield _row(number, data)


def _row(line: int, data: dict) -> Row:
    try:
        recipient = Recipient.model_validate(data)
    except ValidationError as exc:
        return Row(line=line, problem="; ".join(f"{field}: {message}" for field, message in describe_validation_error(exc)))
    if not is_valid_email(recipient.email):
        return Row(line=line, problem="email: not a valid address")
    return Row(line=line, recipient=recipient)


@dataclass
class RowTally:
    """Passes a file's good rows on as recipients and counts (and keeps the first few of)
    the rest: bad rows are not published, a repeated recipient_id is published once."""

    keep: int = 100
    bad: int = 0
    duplicates: int = 0
    kept: list[Row] = field(default_factory=list)

    def recipients(self, rows: Iterable[Row], on_skip: Callable[[Row], None] | None = None) -> Iterator[Recipient]:
        for row in rows:
            if row.recipient is not None and not row.is_duplicate:
                yield row.recipient
                continue
            if row.is_duplicate:
                self.duplicates += 1
            else:
                self.bad += 1
            if len(self.kept) < self.keep:
                self.kept.append(row)
            if on_skip:
                on_skip(row)

    def validate(self, rows: Iterable[Row], on_skip: Callable[[Row], None] | None = None) -> int:
        """Read every row without publishing; returns how many recipients would be published."""
        return sum(1 for _ in self.recipients(rows, on_skip))


def require_some(recipients: Iterator[Recipient], name: str) -> Iterator[Recipient]:
    """Reads up to the first good recipient now, so that a file without one fails before
    anything is published (publishing starts a draft campaign)."""
    first = next(recipients, None)
    if first is None:
        raise RecipientFileError(f"{name}: no valid recipient in the file; nothing was published")
    return itertools.chain([first], recipients)


def describe_row(row: Row) -> str:
    if row.is_duplicate:
        return f"recipient_id {row.recipient.recipient_id!r} repeats line {row.first_line}; published once"
    return row.problem or ""


class RejectedFileError(RecipientFileError):
    """A strict publish found bad rows: nothing was published. `tally` holds the first few."""

    def __init__(self, name: str, tally: RowTally):
        super().__init__(f"{name}: {tally.bad} bad row(s); nothing was published")
        self.tally = tally


def publish_file(
    service: CampaignService,
    campaign_id: str,
    rows: Callable[[], Iterable[Row]],
    *,
    name: str,
    strict: bool,
    on_skip: Callable[[Row], None] | None = None,
    batch_size: int = MAX_RECIPIENTS_PER_BATCH,
    on_batch: Callable[[PublishReport], None] | None = None,
) -> tuple[PublishReport, RowTally]:
    """Publish a recipient file's good rows. `rows()` opens the file afresh: strict mode reads
    it twice (check every row, then publish) so that memory stays flat however long it is."""
    service.get(campaign_id)  # an unknown campaign fails before the file is read
    if strict:
        check = RowTally()
        check.validate(rows(), on_skip)
        if check.bad:
            raise RejectedFileError(name, check)
    tally = RowTally()
    recipients = require_some(tally.recipients(rows(), None if strict else on_skip), name)
    report = service.publish(campaign_id, recipients, batch_size=batch_size, on_batch=on_batch)
    return report, tally
