"""In-memory fakes of the deliverability ports, for unit tests (no sockets)."""

from __future__ import annotations

import copy
import datetime as dt
import json
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

from sendonce.domain.ports import (
    Annotation,
    AnnotationStatus,
    CampaignFeedback,
    EventKind,
    FeedbackCounter,
    ImportReport,
    ProviderEvent,
    ReopenReport,
    Suppression,
    SuppressionReason,
    UnknownDelivery,
)
from sendonce.domain.models import DeliveryKey, DeliveryState, email_fingerprint

from tests.fakes import FakeLedger


class FakeSuppressions:
    def __init__(self):
        self.items: dict[str, Suppression] = {}
        self.fail_next_add: list[Exception] = []
        self.reads = 0

    def is_suppressed(self, email: str) -> Suppression | None:
        return self.get(email_fingerprint(email))

    def get(self, fingerprint: str) -> Suppression | None:
        self.reads += 1
        return self.items.get(fingerprint)

    def add(self, email: str, reason: SuppressionReason, source: str, campaign_id: str | None = None) -> bool:
        return self.add_fingerprint(email_fingerprint(email), reason, source, campaign_id)

    def add_fingerprint(self, fingerprint, reason, source, campaign_id=None) -> bool:
        if self.fail_next_add:
            raise self.fail_next_add.pop(0)
        if fingerprint in self.items:
            return False
        self.items[fingerprint] = Suppression(
            fingerprint=fingerprint, reason=SuppressionReason(reason), source=source, campaign_id=campaign_id,
            created_at=dt.datetime.now(dt.UTC).isoformat(),
        )
        return True

    def remove(self, email: str) -> bool:
        return self.items.pop(email_fingerprint(email), None) is not None

    def list(self) -> Iterator[Suppression]:
        return iter(list(self.items.values()))

    def import_(self, emails: Iterable[str], *, reason: SuppressionReason, source: str) -> ImportReport:
        added = already = 0
        for email in emails:
            if self.add(email, reason, source):
                added += 1
            else:
                already += 1
        return ImportReport(added=added, already_suppressed=already)

    def reasons(self) -> dict[str, str]:
        return {fp: s.reason.value for fp, s in self.items.items()}


class FakeLedgerEvents:
    """Annotations beside a FakeLedger's records (which have no field for them), with the
    same dedup, counting and conditional moves as the DynamoDB adapter."""

    def __init__(self, ledger: FakeLedger):
        self.ledger = ledger
        self.annotations: dict[tuple[str, str], list[ProviderEvent]] = {}
        self.applied_ids: dict[tuple[str, str], set[str]] = {}
        self.sent_evidence: dict[tuple[str, str], str] = {}
        self.counters: dict[str, Counter] = {}
        self.unknown_since_ms: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def annotate(self, event: ProviderEvent, *, counter: FeedbackCounter | None = None) -> Annotation:
        key = event.key
        with self._lock:
            record = self.ledger.items.get((key.campaign_id, key.recipient_id)) if key else None
            if record is None:
                return Annotation(AnnotationStatus.NO_DELIVERY)
            slot = (key.campaign_id, key.recipient_id)
            ids = self.applied_ids.setdefault(slot, set())
            if event.event_id in ids:
                return Annotation(AnnotationStatus.DUPLICATE, state=record.state, provider=record.provider)
            ids.add(event.event_id)
            self.annotations.setdefault(slot, []).append(event)
            if event.kind is EventKind.SENT and event.message_id:
                self.sent_evidence.setdefault(slot, event.message_id)
            if counter is not None:
                self.counters.setdefault(key.campaign_id, Counter())[FeedbackCounter(counter).value] += 1
                return Annotation(AnnotationStatus.APPLIED)
            return Annotation(AnnotationStatus.APPLIED, state=record.state, provider=record.provider)

    def count_sent(self, campaign_id: str) -> None:
        with self._lock:
            self.counters.setdefault(campaign_id, Counter())["sent"] += 1

    def feedback(self, campaign_id: str) -> CampaignFeedback:
        counts = self.counters.get(campaign_id, Counter())
        return CampaignFeedback(sent=counts["sent"], complaints=counts["complaints"], hard_bounces=counts["hard_bounces"])

    def resolve_unknown(self, key: DeliveryKey, *, provider_message_id: str, detail: str) -> bool:
        with self._lock:
            record = self.ledger.items.get((key.campaign_id, key.recipient_id))
            if record is None or record.state is not DeliveryState.UNKNOWN:
                return False
            self.ledger._put(
                record.model_copy(update={"state": DeliveryState.SENT, "provider_message_id": provider_message_id,
                                          "reason": None, "error_class": None}),
                "sent",
            )
            return True

    def unknowns(self, campaign_id: str) -> Iterator[UnknownDelivery]:
        for record in list(self.ledger.records(campaign_id)):
            if record.state is DeliveryState.UNKNOWN:
                slot = (campaign_id, record.recipient_id)
                yield UnknownDelivery(
                    recipient_id=record.recipient_id,
                    provider=record.provider,
                    since_ms=self.unknown_since_ms.get(slot, 0),
                    reason=record.reason,
                    email_fingerprint=record.email_fingerprint,
                    confirmed_message_id=self.sent_evidence.get(slot),
                )

    def reopen_unknown(self, campaign_id: str, recipient_ids: Iterable[str], *, by: str) -> ReopenReport:
        report = ReopenReport()
        for rid in recipient_ids:
            slot = (campaign_id, rid)
            record = self.ledger.items.get(slot)
            if record is None or record.state is not DeliveryState.UNKNOWN:
                report.skipped.append(rid)
            elif slot in self.sent_evidence:
                self.resolve_unknown(DeliveryKey(campaign_id=campaign_id, recipient_id=rid),
                                     provider_message_id=self.sent_evidence[slot], detail="evidence")
                report.confirmed_sent.append(rid)
            else:
                self.ledger._put(
                    record.model_copy(update={"state": DeliveryState.PENDING, "maybe_sent_at_ms": None,
                                              "lease_until_ms": None, "error_class": None, "reason": f"reopened by {by}"}),
                    "reopened",
                    by,
                )
                report.reopened.append(rid)
        return report

    def kinds(self, campaign_id: str, recipient_id: str) -> list[str]:
        return [e.kind.value for e in self.annotations.get((campaign_id, recipient_id), [])]


SES_FIXTURES = Path(__file__).parent / "fixtures" / "ses_events"


@cache
def _fixture(name: str) -> dict:
    return json.loads((SES_FIXTURES / f"{name}.json").read_text())


def ses_event(
    name: str,
    *,
    campaign_id: str | None = "c1",
    recipient_id: str | None = "r1",
    email: str = "user1@example.com",
    message_id: str | None = None,
) -> dict:
    """A fixture from tests/fixtures/ses_events with our tags, the address and message id replaced."""
    event = copy.deepcopy(_fixture(name))
    detail = event["detail"]
    mail = detail["mail"]
    for tag, value in (("campaign_id", campaign_id), ("recipient_id", recipient_id)):
        if value is None:
            mail["tags"].pop(tag, None)
        else:
            mail["tags"][tag] = [value]
    if message_id:
        mail["messageId"] = message_id
        mail["commonHeaders"]["messageId"] = message_id
    mail["destination"] = [email]
    mail["commonHeaders"]["to"] = [email]
    for body_name, list_name in (("bounce", "bouncedRecipients"), ("complaint", "complainedRecipients"),
                                 ("deliveryDelay", "delayedRecipients")):
        for entry in detail.get(body_name, {}).get(list_name, []):
            entry["emailAddress"] = email
    if "delivery" in detail:
        detail["delivery"]["recipients"] = [email]
    return event
