"""The audit's judgement (domain/audit/service.py) over in-memory fakes: which listing proves
an unknown absent, which does not, and what each side's disagreement is called."""

from __future__ import annotations

import pytest

from sendonce.domain.audit.records import ListedEmail
from sendonce.domain.audit.service import (
    LATE_ACCEPTANCE_MS,
    SKEW_MS,
    AuditOutsideRetentionError,
    CampaignAudit,
    subject_pattern,
)
from sendonce.domain.models import Campaign, Content, DeliveryRecord, DeliveryState, email_fingerprint
from tests.fakes import FakeLedger, FakeLedgerEvents

S = DeliveryState
START_MS = 1_900_000_000_000  # the campaign's creation
NOW_MS = START_MS + 3_600_000
DAY_MS = 86_400_000


def iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


class Campaigns:
    def get(self, campaign_id: str) -> Campaign:
        return Campaign(
            campaign_id=campaign_id,
            name="n",
            provider="resend",
            sender="News <news@example.com>",
            created_at=iso(START_MS),
            content=Content(subject="Hello {{ name }}!", text="t"),
        )


class Records:
    name = "resend"

    def __init__(self, emails, *, proves_absence=True, retention_ms=3 * DAY_MS, tags=None):
        self.emails = sorted(emails, key=lambda e: -e.created_at_ms)
        self.proves_absence = proves_absence
        self.retention_ms = retention_ms
        self.requests = 0
        self._tags = tags or {}
        self.retrieved: list[str] = []

    def listed(self, campaign_id, *, since_ms):
        self.requests += 1
        yield from self.emails

    def tags(self, email_id):
        self.requests += 1
        self.retrieved.append(email_id)
        return self._tags.get(email_id)


def email(rid: str, n: int = 0, *, at: int = START_MS + 60_000, subject: str | None = None, sender="news@example.com"):
    return ListedEmail(
        email_id=f"e-{rid}-{n}",
        to_fingerprints=(email_fingerprint(f"{rid}@example.com"),),
        sender=sender,
        subject=subject if subject is not None else f"Hello {rid}!",
        created_at_ms=at,
    )


def record(ledger: FakeLedger, rid: str, state: DeliveryState, *, maybe_sent=START_MS + 1_000, ended=START_MS + 2_000):
    ledger.items[("c1", rid)] = DeliveryRecord(
        campaign_id="c1",
        recipient_id=rid,
        state=state,
        email_fingerprint=email_fingerprint(f"{rid}@example.com"),
        maybe_sent_at_ms=maybe_sent,
        updated_at=iso(ended),
    )


def audit(ledger, records, *, now=NOW_MS):
    return CampaignAudit(
        campaigns=Campaigns(),
        ledger=ledger,
        ledger_events=FakeLedgerEvents(ledger),
        records=records,
        clock_ms=lambda: now,
    )


def older():
    """An email before the campaign's window: the listing reached back past its start."""
    return email("old", at=START_MS - SKEW_MS - 1, subject="other")


def test_the_subject_template_matches_what_it_renders_and_nothing_else():
    pattern = subject_pattern("Hello {{ name }}! {% if x %}a{% endif %}")
    assert pattern.fullmatch("Hello Ann! a") and pattern.fullmatch("Hello ! ")
    assert not pattern.fullmatch("Goodbye Ann! a")


def test_each_side_disagreeing_has_its_name_and_makes_the_audit_fail():
    ledger = FakeLedger()
    for rid, state in (("a", S.SENT), ("b", S.SENT), ("c", S.FAILED), ("d", S.SENT), ("e", S.SUPPRESSED)):
        record(ledger, rid, state)
    emails = [email("a"), email("b"), email("b", 1), email("c"), email("z"), older()]
    tags = {
        "e-b-0": {"campaign_id": "c1", "recipient_id": "b"},
        "e-b-1": {"campaign_id": "c1", "recipient_id": "b"},
        "e-z-0": {"campaign_id": "c1", "recipient_id": "z"},
        "e-c-0": {"campaign_id": "c1", "recipient_id": "c"},
    }

    result = audit(ledger, Records(emails, tags=tags)).run("c1")

    assert result.complete and not result.clean
    assert result.recipients == {
        "duplicate": ["b"],
        "ledger_disagrees": ["c"],
        "missing": ["d"],
        "provider_only": ["z"],
    }
    assert result.counts["sent_once"] == 1 and result.counts["not_sent"] == 1
    assert result.duplicates == {"b": ["e-b-0", "e-b-1"]}
    assert result.artefact()["digest"] == audit(ledger, Records(emails, tags=tags)).run("c1").artefact()["digest"]


def test_another_campaigns_email_with_the_same_subject_is_told_apart_by_its_tags():
    ledger = FakeLedger()
    record(ledger, "a", S.SENT)
    records = Records(
        [email("a"), email("a", 1), older()],
        tags={"e-a-0": {"campaign_id": "c1", "recipient_id": "a"}, "e-a-1": {"campaign_id": "c9", "recipient_id": "a"}},
    )

    result = audit(ledger, records).run("c1")

    assert result.clean and result.counts["sent_once"] == 1 and records.retrieved == ["e-a-0", "e-a-1"]


def test_an_unknown_is_proven_absent_only_by_a_complete_listing_covering_its_window():
    ledger = FakeLedger()
    record(ledger, "covered", S.UNKNOWN)
    record(ledger, "ended_as_listed", S.UNKNOWN, ended=NOW_MS - LATE_ACCEPTANCE_MS + 1)
    record(ledger, "no_mark", S.UNKNOWN, maybe_sent=None)
    record(ledger, "had_it", S.UNKNOWN)
    tags = {"e-had_it-0": {"campaign_id": "c1", "recipient_id": "had_it"}}
    # An email to the unknown's address with another subject is still looked at (by its tags).
    listed = [email("had_it", subject="Re: something else"), older()]

    # A listing that ends before the window's start may have been cut by a retention shorter
    # than the one configured: it proves nothing absent.
    ended = audit(ledger, Records([email("had_it", subject="x")], tags=tags)).run("c1")
    complete = audit(ledger, Records(listed, tags=tags)).run("c1", settle=True)

    assert complete.recipients == {
        "unknown_not_sent": ["covered"],
        "unknown_sent": ["had_it"],
        "unknown_unresolved": ["ended_as_listed", "no_mark"],
    }
    assert complete.clean and ledger.items[("c1", "had_it")].state is S.SENT
    assert ledger.items[("c1", "had_it")].provider_message_id == "e-had_it-0"
    assert ended.complete is False and ended.recipients == {
        "unknown_sent": ["had_it"],
        "unknown_unresolved": ["covered", "ended_as_listed", "no_mark"],
    }


def test_ses_proves_nothing_absent():
    ledger = FakeLedger()
    record(ledger, "sent", S.SENT)
    record(ledger, "unknown", S.UNKNOWN)

    result = audit(ledger, Records([], proves_absence=False, retention_ms=None)).run("c1", settle=True)

    assert result.recipients == {"sent_unwitnessed": ["sent"], "unknown_unresolved": ["unknown"]}
    assert result.clean


def test_outside_the_retention_window_the_audit_is_refused_with_the_dates():
    with pytest.raises(AuditOutsideRetentionError, match="lists sent emails only 3 day\\(s\\) back.*must run before"):
        audit(FakeLedger(), Records([]), now=START_MS + 3 * DAY_MS).run("c1")
