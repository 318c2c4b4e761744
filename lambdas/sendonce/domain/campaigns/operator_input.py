"""What operators hand in — a campaign spec and a recipient file — parsed and validated
the same way for the CLI and the HTTP API.

A recipient file is CSV (header ``recipient_id,email,...``; the other columns become
template variables) or JSON Lines (``{"recipient_id", "email", "variables": {}}``). It is
read as a stream of lines: one row is held at a time, plus the ids and address fingerprints
seen so far (to report a repeat with the line it first appeared on). Each row either yields
a recipient or a problem naming its line; nothing here publishes anything. Sizes come from
sendonce.domain.limits (docs/limits.md).

Over 500 lines: the spec's and the recipient files' rules stay together because both answer
with the same errors (a file, a line, a field: RejectedFileError, describe_row) that the CLI
and the API present alike.
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.config import JsonDict

from sendonce.domain import limits
from sendonce.domain.campaigns.scheduling import EXAMPLE as SEND_AT_EXAMPLE
from sendonce.domain.campaigns.scheduling import RFC3339_PATTERN, parse_instant
from sendonce.domain.campaigns.service import CampaignService, PublishReport
from sendonce.domain.campaigns.share_input import MaxRate, Priority, Weight, share_rule
from sendonce.domain.campaigns.windows import SendWindow
from sendonce.domain.errors import ConflictingRequestError, InvalidCampaignError
from sendonce.domain.models import (
    MAX_RECIPIENTS_PER_BATCH,
    Campaign,
    Content,
    Identifier,
    Recipient,
    VariableValue,
    email_fingerprint,
)
from sendonce.domain.sending.shards import DEFAULT_LEDGER_SHARDS, MAX_LEDGER_SHARDS

RecipientFormat = Literal["csv", "jsonl"]
FORMATS_BY_SUFFIX: dict[str, RecipientFormat] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}

_ID_RULE = (
    "must be 1-100 letters, digits, '_' or '-', starting with a letter or digit (an opaque id, never an email address)"
)

# Characters that end or split a header line (C0 and C1 controls, DEL, Unicode line and
# paragraph separators). Refused in every field that becomes a header, so no value can add a
# header (`News\r\nBcc: x@evil.example`). The same patterns are in the OpenAPI document.
_CONTROL = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
_CONTROL_BUT_TAB = r"\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ADDRESS = rf"[^@\s<>(),;:\"\[\]\\{_CONTROL}]{{1,{limits.ADDRESS_LOCAL_CHARS}}}@{_LABEL}(?:\.{_LABEL})+"
ADDRESS_PATTERN = rf"^{_ADDRESS}$"
_NAME = rf"(?:[^\"<>()\[\],;:@\\{_CONTROL}]{{1,{limits.DISPLAY_NAME_CHARS}}}|\"[^\"\\{_CONTROL}]{{1,{limits.DISPLAY_NAME_CHARS}}}\")"
SENDER_PATTERN = rf"^(?:{_ADDRESS}|{_NAME} ?<{_ADDRESS}>)$"
SUBJECT_PATTERN = rf"^[^{_CONTROL_BUT_TAB}]+$"
LINE_PATTERN = rf"^[^{_CONTROL}]+$"
PROVIDER_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
# An instant with its UTC offset: RFC 3339's date-time (whether the day exists is the validator's).
SEND_AT_PATTERN = RFC3339_PATTERN
# Variable values may span lines (a postal address in the text part) but hold no other control.
_VALUE_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

_PATTERN_RULES = {
    "recipient_id": _ID_RULE,
    "id": _ID_RULE,
    "campaign_id": _ID_RULE,
    "from": "not a valid sender address (use a@example.com or Name <a@example.com>)",
    "reply_to": "not a valid reply-to address (use a@example.com or Name <a@example.com>)",
    "email": "not a valid email address",
    "subject": "must be one line without control characters (a tab is allowed)",
    "name": "must be one line without control characters",
    "provider": "must be the name of a registered provider",
    "bucket": "not a valid S3 bucket name",
    "send_at": "must be an ISO 8601 time with a UTC offset, such as 2026-12-02T09:00:00+01:00",
}


_SHARDS_RULE = f"must be a whole number from 1 to {MAX_LEDGER_SHARDS} (see docs/scale.md)"


class RecipientFileError(InvalidCampaignError):
    """The file as a whole cannot be read (no header, unknown format): nothing was published."""


class MissingFileError(RecipientFileError, ConflictingRequestError):
    """The bucket does not hold (or lets us read) the object named: the request is well formed,
    and the same one succeeds once the object is there."""


def friendly_message(error: Mapping[str, Any]) -> str:
    """A pydantic error's message in our words, never quoting the input."""
    loc = error.get("loc") or ("",)
    message = str(error.get("msg", ""))
    if error.get("type") == "string_pattern_mismatch" and loc[0] == "window":
        return "must be a local time HH:MM, 00:00 to 23:59"
    if error.get("type") == "string_pattern_mismatch" and str(loc[-1]) in _PATTERN_RULES:
        return _PATTERN_RULES[str(loc[-1])]
    if error.get("type") == "extra_forbidden":
        return "unexpected field"
    if str(loc[-1]) == "ledger_shards":
        return _SHARDS_RULE
    if (rule := share_rule(loc)) is not None:
        return rule
    return message.removeprefix("Value error, ")


def describe_validation_error(exc: ValidationError, *, limit: int = 5) -> list[tuple[str, str]]:
    """(field, message) pairs without the offending input, so no address leaks into output."""
    return [
        (".".join(str(p) for p in err["loc"]), friendly_message(err))
        for err in exc.errors(include_url=False, include_input=False)[:limit]
    ]


def _utf8_size(value: str | None, what: str, most: int) -> str | None:
    if value is not None and len(value.encode("utf-8", "surrogatepass")) > most:
        raise ValueError(f"{what} is longer than {most:,} bytes (UTF-8); see docs/limits.md")
    return value


# Which providers exist, and which accept batch mode, is the provider registry's to say
# (sendonce.adapters.providers.registry): the campaign service is given both and refuses
# any other campaign (400, naming the providers it knows).

# What the validators below enforce across fields, stated in the JSON schema as well.
_SPEC_SCHEMA: JsonDict = {
    "anyOf": [
        {"required": ["html"], "properties": {"html": {"type": "string", "minLength": 1}}},
        {"required": ["text"], "properties": {"text": {"type": "string", "minLength": 1}}},
    ],
    "oneOf": [
        {"properties": {"delivery_mode": {"enum": ["single"]}}},
        {"required": ["delivery_mode"], "properties": {"delivery_mode": {"enum": ["batch"]}}},
    ],
}


class CampaignSpec(BaseModel):
    """A campaign as an operator writes it (YAML/JSON spec file or the API's POST body)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra=_SPEC_SCHEMA)

    id: Identifier = Field(description="The campaign id: letters, digits, '_' and '-'.")
    name: str = Field(min_length=1, max_length=limits.CAMPAIGN_NAME_CHARS, pattern=LINE_PATTERN)
    subject: str = Field(
        min_length=1,
        max_length=limits.SUBJECT_CHARS,
        pattern=SUBJECT_PATTERN,
        description="Jinja template; not HTML; one line without control characters.",
    )
    sender: str = Field(
        alias="from",
        min_length=3,
        max_length=limits.SENDER_CHARS,
        pattern=SENDER_PATTERN,
        description=f"From address: a@example.com or Name <a@example.com>, at most {limits.SENDER_CHARS} "
        "characters in all; no line breaks or control characters.",
    )
    reply_to: str | None = Field(
        default=None, max_length=limits.SENDER_CHARS, pattern=SENDER_PATTERN, description="Same rules as from."
    )
    html: str | None = Field(
        default=None,
        max_length=limits.HTML_BYTES,
        description=f"Jinja template; variables are HTML-escaped. At most {limits.HTML_BYTES:,} bytes (UTF-8).",
    )
    text: str | None = Field(
        default=None,
        max_length=limits.TEXT_BYTES,
        description=f"Jinja template for the plain-text part. At most {limits.TEXT_BYTES:,} bytes (UTF-8).",
    )
    provider: str = Field(
        pattern=PROVIDER_PATTERN,
        description="A registered provider (docs/architecture.md, 'Providers'); an unknown one is refused (400).",
    )
    delivery_mode: Literal["single", "batch"] = Field(
        default="single",
        description="single: one provider request per recipient; batch: one per SQS message of up to 100 "
        "recipients (needs a provider whose capabilities allow it: docs/architecture.md, 'Providers').",
    )
    ledger_shards: int = Field(
        default=DEFAULT_LEDGER_SHARDS,
        ge=1,
        le=MAX_LEDGER_SHARDS,
        description="How many partition-key values the campaign's ledger is spread over; fixed at creation. "
        f"The default ({DEFAULT_LEDGER_SHARDS}) keeps the hottest one under 0.1 write units per recipient "
        "(docs/scale.md); fewer make whole-campaign reads cheaper for small campaigns.",
    )
    send_at: str | None = Field(
        default=None,
        pattern=SEND_AT_PATTERN,
        json_schema_extra={"format": "date-time"},
        description="When the send starts: ISO 8601 with a UTC offset (2026-12-02T09:00:00+01:00 or ...Z), to "
        "the second, in the future. Publishing records the recipients at once and the campaign waits in "
        "`scheduled` until then (docs/operations-campaigns.md).",
    )

    window: SendWindow | None = Field(
        default=None,
        description="When it may send: {days: [mon..sun], from: HH:MM, to: HH:MM, tz: IANA zone}; a `to` at or "
        "before `from` spans midnight (equal: 24 hours). Outside it the campaign pauses by itself and resumes at the "
        "next opening (docs/operations-campaigns.md).",
    )
    # Its share of the provider's rate while other campaigns send (campaigns/share_input.py).
    weight: Weight = 1
    priority: Priority = "normal"
    max_rate: MaxRate = None

    @field_validator("ledger_shards", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        # JSON Schema's integer: 71 and 71.0 are the same number; "71" and true are not numbers.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("not a number")
        return value

    @field_validator("send_at", mode="before")
    @classmethod
    def _instant(cls, value: Any) -> Any:
        # YAML reads an unquoted time as a datetime: back to the text it was, offset and all.
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                raise ValueError(f"has no UTC offset; say which zone it is in ({SEND_AT_EXAMPLE}, or Z for UTC)")
            return value.isoformat()
        if isinstance(value, str):
            try:
                parse_instant(value, what="send_at")
            except InvalidCampaignError as exc:
                raise ValueError(str(exc).removeprefix("send_at: ")) from None
        return value

    @field_validator("html")
    @classmethod
    def _html_size(cls, value: str | None) -> str | None:
        return _utf8_size(value, "html", limits.HTML_BYTES)

    @field_validator("text")
    @classmethod
    def _text_size(cls, value: str | None) -> str | None:
        return _utf8_size(value, "text", limits.TEXT_BYTES)

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
            delivery_mode=self.delivery_mode,
            ledger_shards=self.ledger_shards,
            send_at_ms=parse_instant(self.send_at) if self.send_at else None,
            window=self.window,
            weight=self.weight,
            priority=self.priority,
            max_rate=self.max_rate,
        )


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


class BodyTooDeepError(ValueError):
    pass


def strict_json_loads(text: str | bytes, *, max_depth: int = 32) -> Any:
    """json.loads for input from outside: RFC 8259 only (no NaN or Infinity), no lone
    surrogates (they cannot be stored or sent), nesting at most `max_depth`. Every refusal is
    a json.JSONDecodeError, so callers have one error to turn into a message."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")

    def refuse_constant(name: str) -> Any:
        raise json.JSONDecodeError(f"{name} is not JSON", str(text), 0)

    try:
        data = json.loads(text, parse_constant=refuse_constant)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", str(text), 0) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise json.JSONDecodeError(f"a value cannot be read ({exc})", str(text), 0) from None
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > max_depth:
                raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", str(text), 0)
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise json.JSONDecodeError("a string holds a lone surrogate (\\ud800-\\udfff)", str(text), 0) from None
    return data


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
