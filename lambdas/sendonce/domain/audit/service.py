"""Set the provider's record of a campaign against the ledger, recipient by recipient.

One pass over the provider's listing (page by page, newest first, back to the campaign's
start) keeps the emails that may be the campaign's — its sender, a subject its template
can render, inside its window, or carrying its tag — indexed by the recipient address's
fingerprint. One pass over the ledger (shard by shard, streamed) then takes each delivery's
candidates: one is the delivery's email; several are told apart by their tags (one
Retrieve Email each); what no delivery claimed is looked up by its tags last. Memory holds
the campaign's candidates and the differences, never the ledger.

Unknown outcomes are settled by evidence (with `settle`): one the provider has becomes
`sent` (protocol `provider_sent`); one absent from a complete listing that covers its whole
window becomes *proven not sent* (`prove_not_sent`), the only unknowns `resume
--include-unknown` sends again. "Covers its whole window": the listing reaches back past
the delivery's first possible acceptance, and the delivery ended before the listing's first
page was read (a request accepted after that page would not be on it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sendonce.domain.audit.records import ListedEmail, ProviderRecords
from sendonce.domain.campaigns.ports import CampaignStore
from sendonce.domain.deliverability.ports import LedgerEvents
from sendonce.domain.errors import SendonceError
from sendonce.domain.models import Campaign, DeliveryRecord, DeliveryState, epoch_ms
from sendonce.domain.sending.ports import DeliveryReads

S = DeliveryState
# Clocks differ (ours, the provider's): a margin on both ends of every window compared.
SKEW_MS = 5 * 60 * 1000
# A request the provider accepts is accepted within its timeout (10 s) of being sent; a
# delivery that changed less than this before the listing's first page may yet appear.
LATE_ACCEPTANCE_MS = 30 * 1000


class AuditOutsideRetentionError(SendonceError):
    """The provider no longer lists the campaign's first emails: no complete audit is possible."""


class Verdict(StrEnum):
    SENT_ONCE = "sent_once"  # ledger sent, the provider one email
    DUPLICATE = "duplicate"  # the provider more than one email
    MISSING = "missing"  # ledger sent, the provider none
    LEDGER_DISAGREES = "ledger_disagrees"  # the provider has it, the ledger says neither sent nor unknown
    PROVIDER_ONLY = "provider_only"  # the campaign's tags at the provider, no ledger record
    UNKNOWN_SENT = "unknown_sent"  # unknown, the provider has it (settled: now sent)
    UNKNOWN_NOT_SENT = "unknown_not_sent"  # unknown, absent from a complete listing covering its window
    UNKNOWN_UNRESOLVED = "unknown_unresolved"  # unknown, nothing proves either way
    SENT_UNWITNESSED = "sent_unwitnessed"  # ledger sent, no provider event (SES cannot prove it absent)
    NOT_SENT = "not_sent"  # neither side has an email (failed, suppressed, cancelled, pending, ...)
    AFTER_LISTING = "after_listing"  # changed after the listing was read: audit again later


# A duplicate, or a difference nothing explains: the audit fails (non-zero exit).
UNEXPLAINED = frozenset({Verdict.DUPLICATE, Verdict.MISSING, Verdict.LEDGER_DISAGREES, Verdict.PROVIDER_ONLY})
# Listed recipient by recipient in the artefact (the rest are counted only).
LISTED = frozenset(Verdict) - {Verdict.SENT_ONCE, Verdict.NOT_SENT}


@dataclass
class AuditResult:
    campaign_id: str
    provider: str
    window_from_ms: int
    listing_read_at_ms: int
    retention_ms: int | None
    complete: bool  # the listing reached an email older than the window's start (or keeps everything)
    proves_absence: bool
    settled: bool
    counts: Counter[str] = field(default_factory=Counter)
    recipients: dict[str, list[str]] = field(default_factory=dict)  # verdict -> recipient ids
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # recipient id -> the provider's email ids
    listed_emails: int = 0
    retrieves: int = 0
    provider_requests: int = 0

    @property
    def clean(self) -> bool:
        return not any(self.counts[v] for v in UNEXPLAINED)

    def add(self, verdict: Verdict, recipient_id: str) -> None:
        self.counts[verdict.value] += 1
        if verdict in LISTED:
            self.recipients.setdefault(verdict.value, []).append(recipient_id)

    def findings(self) -> dict[str, Any]:
        """What the audit found, sorted: the same facts give the same bytes (and digest)."""
        return {
            "campaign_id": self.campaign_id,
            "provider": self.provider,
            "window_from": _iso(self.window_from_ms),
            "listing_complete": self.complete,
            "proves_absence": self.proves_absence,
            "counts": {v.value: self.counts[v.value] for v in Verdict},
            "recipients": {k: sorted(v) for k, v in sorted(self.recipients.items())},
            "duplicates": [{"recipient_id": r, "emails": sorted(e)} for r, e in sorted(self.duplicates.items())],
            "clean": self.clean,
        }

    def artefact(self) -> dict[str, Any]:
        """The findings with their SHA-256 (over canonical JSON), and how this run read them."""
        findings = self.findings()
        canonical = json.dumps(findings, sort_keys=True, separators=(",", ":"))
        return {
            "findings": findings,
            "digest": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest(),
            "run": {
                "listing_read_at": _iso(self.listing_read_at_ms),
                "retention_days": None if self.retention_ms is None else round(self.retention_ms / 86_400_000, 2),
                "must_run_before": None
                if self.retention_ms is None
                else _iso(self.window_from_ms + SKEW_MS + self.retention_ms),
                "settled": self.settled,
                "listed_emails": self.listed_emails,
                "retrieves": self.retrieves,
                "provider_requests": self.provider_requests,
            },
        }


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def _address(sender: str) -> str:
    """`News <news@example.com>` and `news@example.com` alike: the address, lower case."""
    found = re.search(r"<([^>]+)>", sender)
    return (found.group(1) if found else sender).strip().lower()


def subject_pattern(template: str) -> re.Pattern[str]:
    """What the campaign's subject template can render to: its literal text, anything where
    a `{{ ... }}` stands; from the first `{% ... %}` on (its text may or may not render), anything."""
    head, block, _ = template.partition("{%")
    parts = re.split(r"\{\{.*?\}\}", head, flags=re.DOTALL)
    return re.compile(".*".join(re.escape(p) for p in parts) + (".*" if block else ""), re.DOTALL)


class CampaignAudit:
    def __init__(
        self,
        *,
        campaigns: CampaignStore,
        ledger: DeliveryReads,
        ledger_events: LedgerEvents,
        records: ProviderRecords,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ):
        self._campaigns = campaigns
        self._ledger = ledger
        self._events = ledger_events
        self._records = records
        self._clock_ms = clock_ms

    def run(self, campaign_id: str, *, settle: bool = False) -> AuditResult:
        campaign = self._campaigns.get(campaign_id)
        started = epoch_ms(campaign.created_at)
        if started is None:
            raise AuditOutsideRetentionError(f"campaign {campaign_id!r} has no creation time to start an audit from")
        window_from = started - SKEW_MS
        now = self._clock_ms()
        retention = self._records.retention_ms
        if retention is not None and now - retention > window_from:
            raise AuditOutsideRetentionError(
                f"campaign {campaign_id!r} began {_iso(started)}; {self._records.name} lists sent emails only"
                f" {retention / 86_400_000:g} day(s) back (to {_iso(now - retention)}): an audit must run"
                f" before {_iso(window_from + retention)}"
            )
        result = AuditResult(
            campaign_id=campaign_id,
            provider=self._records.name,
            window_from_ms=window_from,
            listing_read_at_ms=now,
            retention_ms=retention,
            complete=False,
            proves_absence=self._records.proves_absence,
            settled=settle,
        )
        # An unknown is settled on its tags alone, and proven absent only if no email to its
        # address carries them, whatever its subject: its address is watched in the listing.
        watched = {u.email_fingerprint for u in self._events.unknowns(campaign_id) if u.email_fingerprint}
        index = self._candidates(campaign, window_from, watched, result)
        audit_id = f"audit@{_iso(now)}"
        for record in self._ledger.records(campaign_id):
            emails = index.pop(record.email_fingerprint, []) if record.email_fingerprint else []
            mine = self._mine(record, emails, result)
            self._judge(record, mine, result, settle=settle, audit_id=audit_id)
        # Candidates no delivery claimed: the campaign's, by their tags, have no ledger record.
        for emails in index.values():
            for email in emails:
                tagged = self._tagged(email, result)
                if tagged.campaign_id == campaign_id:
                    result.add(Verdict.PROVIDER_ONLY, tagged.recipient_id or f"email:{email.email_id}")
        result.provider_requests = self._records.requests
        return result

    def _candidates(
        self, campaign: Campaign, window_from: int, watched: set[str], result: AuditResult
    ) -> dict[str, list[ListedEmail]]:
        sender = _address(campaign.sender)
        templates = [campaign.subject or ""]
        if campaign.ab_test is not None:  # an A/B campaign's variants each have a subject of their own
            templates += [v.subject for v in self._campaigns.content(campaign.campaign_id).variants]
        subjects = [subject_pattern(template) for template in templates]
        index: dict[str, list[ListedEmail]] = {}
        for email in self._records.listed(campaign.campaign_id, since_ms=window_from):
            result.listed_emails += 1
            if email.created_at_ms < window_from:
                result.complete = True
                break
            if email.campaign_id is not None:
                ours = email.campaign_id == campaign.campaign_id
            else:
                ours = _address(email.sender) == sender and any(p.fullmatch(email.subject) for p in subjects)
            if ours or not watched.isdisjoint(email.to_fingerprints):
                for fingerprint in dict.fromkeys(email.to_fingerprints):
                    index.setdefault(fingerprint, []).append(email)
        else:
            # The listing ended before the window's start: all there is, or all the provider
            # still keeps (a plan's retention may be shorter than the one configured)? Only a
            # provider that keeps everything says; otherwise nothing is proven absent.
            result.complete = self._records.retention_ms is None
        return index

    def _tagged(self, email: ListedEmail, result: AuditResult) -> ListedEmail:
        if email.campaign_id is not None:
            return email
        result.retrieves += 1
        tags = self._records.tags(email.email_id) or {}
        return ListedEmail(
            email_id=email.email_id,
            to_fingerprints=email.to_fingerprints,
            sender=email.sender,
            subject=email.subject,
            created_at_ms=email.created_at_ms,
            campaign_id=tags.get("campaign_id", ""),
            recipient_id=tags.get("recipient_id", ""),
        )

    def _mine(self, record: DeliveryRecord, emails: list[ListedEmail], result: AuditResult) -> list[ListedEmail]:
        """The delivery's emails among those sent to its address. For a delivery the ledger
        says sent, a single candidate is taken as matched (address, sender, subject, window);
        otherwise, and wherever there are several, the tags decide."""
        campaign_id, recipient_id = record.campaign_id, record.recipient_id
        if record.state is S.SENT and len(emails) == 1 and emails[0].campaign_id is None:
            return emails
        mine = []
        for email in emails:
            tagged = self._tagged(email, result)
            if tagged.campaign_id == campaign_id and tagged.recipient_id == recipient_id:
                mine.append(tagged)
            elif tagged.campaign_id == campaign_id:
                # The campaign's email for another recipient at the same address.
                result.add(Verdict.PROVIDER_ONLY, tagged.recipient_id or f"email:{email.email_id}")
        return mine

    def _judge(
        self, record: DeliveryRecord, mine: list[ListedEmail], result: AuditResult, *, settle: bool, audit_id: str
    ) -> None:
        rid = record.recipient_id
        if len(mine) > 1:
            result.duplicates[rid] = [e.email_id for e in mine]
            result.add(Verdict.DUPLICATE, rid)
            return
        changed_ms = epoch_ms(record.updated_at)
        after_listing = changed_ms is not None and changed_ms + LATE_ACCEPTANCE_MS > result.listing_read_at_ms
        if record.state is S.SENT:
            if mine:
                result.add(Verdict.SENT_ONCE, rid)
            elif after_listing:
                result.add(Verdict.AFTER_LISTING, rid)
            else:
                result.add(Verdict.MISSING if result.proves_absence else Verdict.SENT_UNWITNESSED, rid)
            return
        if record.state is S.UNKNOWN:
            if mine:
                if settle:
                    self._events.resolve_unknown(
                        record.key,
                        provider_message_id=mine[0].email_id,
                        detail=f"found in {result.provider}'s records by {audit_id}",
                    )
                result.add(Verdict.UNKNOWN_SENT, rid)
            elif self._proven_absent(record, result, after_listing):
                if settle:
                    self._events.prove_not_sent(record.key, audit=audit_id)
                result.add(Verdict.UNKNOWN_NOT_SENT, rid)
            else:
                result.add(Verdict.UNKNOWN_UNRESOLVED, rid)
            return
        if mine:
            result.add(Verdict.AFTER_LISTING if after_listing else Verdict.LEDGER_DISAGREES, rid)
        else:
            result.add(Verdict.NOT_SENT, rid)

    @staticmethod
    def _proven_absent(record: DeliveryRecord, result: AuditResult, after_listing: bool) -> bool:
        """Absent from a complete listing that covers the delivery's whole window: from its
        first possible acceptance (inside the listing) to its end (before the listing)."""
        first = record.maybe_sent_at_ms
        return (
            result.proves_absence
            and result.complete
            and not after_listing
            and record.updated_at is not None
            and first is not None
            and first >= result.window_from_ms + SKEW_MS
        )
