"""What operators hand in as recipients — a recipient file or an API body's list — parsed
and validated the same way for the CLI and the HTTP API.

A recipient file is CSV (header ``recipient_id,email,...``; the other columns become
template variables) or JSON Lines (``{"recipient_id", "email", "variables": {}}``). It is
read as a stream of lines: one row is held at a time, plus the ids and address fingerprints
seen so far (to report a repeat with the line it first appeared on). Each row either yields
a recipient or a problem naming its line; nothing here publishes anything. Sizes come from
sendonce.domain.limits (docs/limits.md); refusals are worded by input_rules.py.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.config import JsonDict

from sendonce.domain import limits
from sendonce.domain.campaigns.input_rules import (
    ADDRESS_PATTERN,
    LINE_PATTERN,
    describe_validation_error,
    strict_json_loads,
)
from sendonce.domain.campaigns.service import CampaignService, PublishReport
from sendonce.domain.errors import ConflictingRequestError, InvalidCampaignError
from sendonce.domain.models import (
    MAX_RECIPIENTS_PER_BATCH,
    Recipient,
    VariableValue,
    email_fingerprint,
)

RecipientFormat = Literal["csv", "jsonl"]
FORMATS_BY_SUFFIX: dict[str, RecipientFormat] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
# Variable values may span lines (a postal address in the text part) but hold no other control.
_VALUE_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class RecipientFileError(InvalidCampaignError):
    """The file as a whole cannot be read (no header, unknown format): nothing was published."""


class MissingFileError(RecipientFileError, ConflictingRequestError):
    """The bucket does not hold (or lets us read) the object named: the request is well formed,
    and the same one succeeds once the object is there."""


VariableName = Annotated[str, Field(min_length=1, max_length=limits.VARIABLE_NAME_CHARS)]
VALUE_PATTERN = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$"
_VARIABLES_SCHEMA: JsonDict = {
    "propertyNames": {"minLength": 1, "maxLength": limits.VARIABLE_NAME_CHARS, "pattern": LINE_PATTERN},
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "pattern": VALUE_PATTERN},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
        ]
    },
}


class InlineRecipient(Recipient):
    """A recipient as an operator hands it in (an API body or a file row), checked up front:
    the address is one, the variables are scalars without control characters, and the whole
    fits its share of a batch (limits.RECIPIENT_JSON_BYTES)."""

    email: str = Field(
        min_length=3,
        max_length=limits.ADDRESS_CHARS,
        pattern=ADDRESS_PATTERN,
        description=f"One address (no display name), at most {limits.ADDRESS_CHARS} characters.",
    )
    variables: dict[VariableName, VariableValue] = Field(
        default_factory=dict,
        max_length=limits.VARIABLES_PER_RECIPIENT,
        description=f"Template variables (scalars). The recipient as JSON is at most "
        f"{limits.RECIPIENT_JSON_BYTES:,} bytes.",
        json_schema_extra=_VARIABLES_SCHEMA,
    )

    @field_validator("variables")
    @classmethod
    def _plain_values(cls, variables: dict[str, VariableValue]) -> dict[str, VariableValue]:
        for name, value in variables.items():
            if not re.fullmatch(LINE_PATTERN[1:-1], name):
                raise ValueError("a variable name holds a control character")
            if isinstance(value, str) and _VALUE_CONTROL_RE.search(value):
                raise ValueError(f"variable {name!r} holds a control character (only tab and line breaks are allowed)")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"variable {name!r} is not a finite number")
        return variables

    @model_validator(mode="after")
    def _fits_a_batch(self) -> InlineRecipient:
        size = len(self.model_dump_json().encode("utf-8", "surrogatepass"))
        if size > limits.RECIPIENT_JSON_BYTES:
            raise ValueError(
                f"the recipient is {size:,} bytes as JSON, more than {limits.RECIPIENT_JSON_BYTES:,} "
                "(shorten its variables; see docs/limits.md)"
            )
        return self


def address_key(email: str) -> str:
    """What makes two addresses the same mailbox for duplicate detection: the address trimmed
    and lower-cased whole. The domain is case-insensitive (RFC 5321); the local part is not by
    the RFC, but virtually every provider delivers it so, and sending twice is the worse
    mistake. Plus-addressing and dots are kept: `a+x@` and `a@` are different addresses to
    most providers. The same fingerprint keys the suppression list."""
    return email_fingerprint(email)


@dataclass(frozen=True)
class Row:
    """One record of a recipient file: a recipient to publish, a problem, or a repeat."""

    line: int
    recipient: Recipient | None = None
    problem: str | None = None
    first_line: int | None = None  # set for a repeated recipient_id: where it appeared first
    # Set for an address (address_key) already given under another recipient_id on that line.
    same_address_as: int | None = None

    @property
    def is_duplicate(self) -> bool:
        return self.first_line is not None

    @property
    def repeats_address(self) -> bool:
        return self.same_address_as is not None


def mark_repeats(rows: Iterable[Row]) -> Iterator[Row]:
    """Mark each row whose recipient_id, or whose address under another id, appeared on an
    earlier row. Holds an id and a fingerprint per distinct recipient, never an address."""
    ids: dict[str, int] = {}
    addresses: dict[str, int] = {}
    for row in rows:
        recipient = row.recipient
        if recipient is not None:
            first = ids.setdefault(recipient.recipient_id, row.line)
            if first != row.line:
                row = Row(line=row.line, recipient=recipient, first_line=first)
            else:
                same = addresses.setdefault(address_key(recipient.email), row.line)
                if same != row.line:
                    row = Row(line=row.line, recipient=recipient, same_address_as=same)
        yield row


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


def bounded_lines(lines: Iterable[str], name: str, *, most: int = limits.RECIPIENT_LINE_BYTES) -> Iterator[str]:
    """The lines, refusing (FILE:LINE) one longer than any recipient can be, or one holding a
    NUL byte (a binary file, or a truncated export)."""
    for number, line in enumerate(lines, start=1):
        if len(line) > most:
            raise RecipientFileError(
                f"{name}:{number}: line longer than {most:,} characters; nothing after it was read"
            )
        if "\x00" in line:
            raise RecipientFileError(f"{name}:{number}: holds a NUL byte (not a text file?); nothing after it was read")
        yield line


class RecipientReader:
    """Iterate a recipient file's rows. A CSV header is read and checked on construction,
    so a file that cannot be read at all fails before anything is published."""

    def __init__(self, lines: Iterable[str], fmt: RecipientFormat, *, name: str = "recipients"):
        self._name = name
        self._fmt = fmt
        self._lines = bounded_lines(lines, name)
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
                raise RecipientFileError(
                    f"{self._name}: the file is empty (expected a header recipient_id,email,...)"
                ) from None
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
        return mark_repeats(self._csv_rows() if self._fmt == "csv" else self._jsonl_rows())

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
                data = strict_json_loads(line)
            except json.JSONDecodeError as exc:
                column = f" (column {exc.colno})" if exc.pos else ""
                yield Row(line=number, problem=f"not valid JSON: {exc.msg}{column}")
                continue
            if not isinstance(data, dict):
                yield Row(line=number, problem='expected a JSON object {"recipient_id", "email", "variables"}')
                continue
            for name in ("recipient_id", "email"):
                if isinstance(data.get(name), str):
                    data[name] = data[name].strip()
            yield _row(number, data)


def _row(line: int, data: dict[str, Any]) -> Row:
    try:
        recipient = InlineRecipient.model_validate(data)
    except ValidationError as exc:
        return Row(
            line=line, problem="; ".join(f"{field}: {message}" for field, message in describe_validation_error(exc))
        )
    return Row(line=line, recipient=recipient)


@dataclass
class RowTally:
    """Passes a file's good rows on as recipients and counts (and keeps the first few of)
    the rest: bad rows are not published, a repeated recipient_id is published once, and an
    address repeated under another id is published again unless `dedupe_addresses`."""

    keep: int = 100
    dedupe_addresses: bool = False
    bad: int = 0
    duplicates: int = 0
    duplicate_addresses: int = 0
    kept: list[Row] = field(default_factory=list)

    def recipients(self, rows: Iterable[Row], on_report: Callable[[Row], None] | None = None) -> Iterator[Recipient]:
        for row in rows:
            if row.recipient is not None and not row.is_duplicate:
                if row.repeats_address:
                    self.duplicate_addresses += 1
                    self._report(row, on_report)
                    if self.dedupe_addresses:
                        continue
                yield row.recipient
                continue
            if row.is_duplicate:
                self.duplicates += 1
            else:
                self.bad += 1
            self._report(row, on_report)

    def _report(self, row: Row, on_report: Callable[[Row], None] | None) -> None:
        if len(self.kept) < self.keep:
            self.kept.append(row)
        if on_report:
            on_report(row)

    def validate(self, rows: Iterable[Row], on_report: Callable[[Row], None] | None = None) -> int:
        """Read every row without publishing; returns how many recipients would be published."""
        return sum(1 for _ in self.recipients(rows, on_report))


def require_some(recipients: Iterator[Recipient], name: str) -> Iterator[Recipient]:
    """Reads up to the first good recipient now, so that a file without one fails before
    anything is published (publishing starts a draft campaign)."""
    first = next(recipients, None)
    if first is None:
        raise RecipientFileError(f"{name}: no valid recipient in the file; nothing was published")
    return itertools.chain([first], recipients)


def describe_row(row: Row, *, dedupe_addresses: bool = False, where: str = "line ") -> str:
    """Why a row was reported; `where` prefixes the row number it refers to ("line 3", "recipients.3")."""
    if row.is_duplicate and row.recipient is not None:  # a repeat always carries its recipient
        return f"recipient_id {row.recipient.recipient_id!r} repeats {where}{row.first_line}; published once"
    if row.repeats_address:
        if dedupe_addresses:
            return f"same address as {where}{row.same_address_as}; not published (dedupe addresses)"
        return (
            f"same address as {where}{row.same_address_as}, under another recipient_id; published "
            "(it gets the email twice; dedupe addresses to send it once)"
        )
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
    dedupe_addresses: bool = False,
    on_report: Callable[[Row], None] | None = None,
    batch_size: int = MAX_RECIPIENTS_PER_BATCH,
    on_batch: Callable[[PublishReport], None] | None = None,
    send_at_ms: int | None = None,
) -> tuple[PublishReport, RowTally]:
    """Publish a recipient file's good rows. `rows()` opens the file afresh: strict mode reads
    it twice (check every row, then publish) so that memory stays flat however long it is."""
    service.get(campaign_id)  # an unknown campaign fails before the file is read
    if strict:
        check = RowTally(dedupe_addresses=dedupe_addresses)
        check.validate(rows(), on_report)
        if check.bad:
            raise RejectedFileError(name, check)
    tally = RowTally(dedupe_addresses=dedupe_addresses)
    recipients = require_some(tally.recipients(rows(), None if strict else on_report), name)
    report = service.publish(campaign_id, recipients, batch_size=batch_size, on_batch=on_batch, send_at_ms=send_at_ms)
    return report, tally


def inline_rows(recipients: Iterable[Recipient]) -> Iterator[Row]:
    """An API body's recipients as rows, numbered by their index in `recipients`."""
    return mark_repeats(Row(line=index, recipient=recipient) for index, recipient in enumerate(recipients))


def object_rows(items: Iterable[Mapping[str, Any]]) -> Iterator[Row]:
    """JSON objects as a file's rows, numbered by their index: each validated as a file row
    is (a bad one is a problem naming its field, not a refusal of the whole list)."""
    return mark_repeats(_row(index, dict(item)) for index, item in enumerate(items))
