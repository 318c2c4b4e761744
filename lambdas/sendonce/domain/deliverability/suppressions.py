"""The suppression list as operators use it: check, add, remove, list, import.

Addresses come in and are hashed at the port; what the list shows is fingerprints. The
consumer reads the same list before each send (docs/deliverability.md).
"""

from __future__ import annotations

import builtins
import csv
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from sendonce.domain.deliverability.ports import ImportReport, Suppression, SuppressionReason, Suppressions
from sendonce.domain.models import is_valid_email

IMPORT_CHUNK = 500


@dataclass
class ChangeReport:
    changed: int = 0
    unchanged: int = 0
    invalid_lines: list[int] = field(default_factory=list)

    def merge(self, report: ImportReport, offset: int = 0) -> None:
        self.changed += report.added
        self.unchanged += report.already_suppressed
        self.invalid_lines.extend(offset + i for i in report.invalid_lines)


def parse_reason(value: str | None, default: SuppressionReason) -> SuppressionReason:
    if not value or not value.strip():
        return default
    try:
        return SuppressionReason(value.strip().lower())
    except ValueError:
        raise ValueError(
            f"unknown suppression reason {value!r} (known: {', '.join(r.value for r in SuppressionReason)})"
        ) from None


def parse_import_lines(
    lines: Iterable[str], default: SuppressionReason
) -> Iterator[tuple[int, str | None, SuppressionReason]]:
    """(line number, address or None when invalid, reason) for each entry of a CSV / plain list.

    Accepts one address per line or `email,reason`; blank lines, `#` comments and a header
    row naming `email` are skipped.
    """
    for number, row in enumerate(csv.reader(lines), start=1):
        if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
            continue
        address = row[0].strip()
        if number == 1 and address.lower() in ("email", "address", "email_address"):
            continue
        try:
            reason = parse_reason(row[1] if len(row) > 1 else None, default)
        except ValueError:
            yield number, None, default
            continue
        yield number, (address if is_valid_email(address) else None), reason


class SuppressionService:
    def __init__(self, suppressions: Suppressions):
        self._suppressions = suppressions

    def check(self, email: str) -> Suppression | None:
        return self._suppressions.is_suppressed(email)

    def add(
        self,
        emails: Iterable[str],
        *,
        reason: SuppressionReason = SuppressionReason.MANUAL,
        source: str = "operator",
        campaign_id: str | None = None,
    ) -> ChangeReport:
        report = ChangeReport()
        for position, email in enumerate(emails, start=1):
            if not is_valid_email(email.strip()):
                report.invalid_lines.append(position)
            elif self._suppressions.add(email.strip(), reason, source, campaign_id):
                report.changed += 1
            else:
                report.unchanged += 1
        return report

    def remove(self, emails: Iterable[str]) -> ChangeReport:
        report = ChangeReport()
        for email in emails:
            if self._suppressions.remove(email.strip()):
                report.changed += 1
            else:
                report.unchanged += 1
        return report

    def list(self) -> Iterator[Suppression]:
        return self._suppressions.list()

    def import_lines(
        self, lines: Iterable[str], *, reason: SuppressionReason = SuppressionReason.MANUAL, source: str = "import"
    ) -> ChangeReport:
        """Streams: holds one chunk of addresses at a time."""
        report = ChangeReport()
        chunk: dict[SuppressionReason, list[str]] = defaultdict(list)
        size = 0
        for number, address, entry_reason in parse_import_lines(lines, reason):
            if address is None:
                report.invalid_lines.append(number)
                continue
            chunk[entry_reason].append(address)
            size += 1
            if size >= IMPORT_CHUNK:
                self._flush(chunk, source, report)
                chunk, size = defaultdict(list), 0
        self._flush(chunk, source, report)
        return report

    def _flush(self, chunk: dict[SuppressionReason, builtins.list[str]], source: str, report: ChangeReport) -> None:
        for entry_reason, addresses in chunk.items():
            report.merge(self._suppressions.import_(addresses, reason=entry_reason, source=source))
