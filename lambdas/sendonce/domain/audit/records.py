"""What the audit reads of the provider's side: the `ProviderRecords` port.

Resend lists every email it sent (newest first, no tags, only as far back as the plan's
retention) and returns an email's tags when asked for it alone. SES lists nothing: its
witness is the events its configuration set delivers, recorded on the ledger per delivery,
and an accepted send whose events never arrived looks exactly like one never accepted, so
SES records prove nothing absent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ListedEmail:
    """One email the provider says it sent. Addresses only as fingerprints
    (`models.email_fingerprint`). The tags are filled in where the record carries them."""

    email_id: str
    to_fingerprints: tuple[str, ...]
    sender: str
    subject: str
    created_at_ms: int
    campaign_id: str | None = None
    recipient_id: str | None = None


class ProviderRecords(Protocol):
    name: str
    # How far back the listing reaches (the provider's retention); None: no limit.
    retention_ms: int | None
    # Whether an email absent from a complete listing was never accepted (Resend: yes; SES: no).
    proves_absence: bool
    # Requests made to the provider so far (listing pages and retrieves), for the report.
    requests: int

    def listed(self, campaign_id: str, *, since_ms: int) -> Iterator[ListedEmail]:
        """Every email sent, newest first, page by page, until one older than `since_ms`
        (yielded too) or the end of the listing. Raises if the listing cannot be read. (A
        listing of all the team's emails ignores `campaign_id`; one that knows the campaign
        lists only its emails, with their tags, and nothing older than `since_ms`.)"""
        ...

    def tags(self, email_id: str) -> Mapping[str, str] | None:
        """The email's tags (one request per email); None if the provider no longer has it."""
        ...
