"""What operators read of a campaign: the campaign, its delivery status (and completion when
every delivery has ended), an A/B campaign's results, the counters against the ledger, one
delivery, the dead letters. CampaignService inherits it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sendonce.domain.campaigns.ab_results import AbResults, ab_results
from sendonce.domain.campaigns.ports import CampaignCounters, CampaignStore
from sendonce.domain.campaigns.status import (
    DeliveryStatus,
    Reconciliation,
    complete_if_done,
    delivery_status,
    reconcile,
)
from sendonce.domain.campaigns.variants import VariantFigures
from sendonce.domain.errors import InvalidCampaignError
from sendonce.domain.jobs.models import Job
from sendonce.domain.jobs.service import JobService
from sendonce.domain.models import (
    FINAL_STATES,
    BatchMessage,
    Campaign,
    CampaignState,
    DeliveryKey,
    DeliveryRecord,
    DeliveryState,
)
from sendonce.domain.sending.ports import DeliveryReads


@dataclass(frozen=True)
class DeadLetter:
    """One message read (not consumed) from the dead-letter queue."""

    message_id: str
    body: str
    poison_reason: str | None = None  # the consumer's reason when it judged the message poison
    sent_at_ms: int | None = None


@dataclass
class DeadLetterMessage:
    message_id: str
    campaign_id: str | None  # None: the body is no batch of any campaign
    batch_id: str | None
    recipients: int
    dead_lettered: int  # of its recipients, how many the ledger holds as dead-lettered
    error: str | None
    sent_at_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DeadLetterGroup:
    campaign_id: str | None
    messages: int = 0
    recipients: int = 0
    dead_lettered: int = 0
    last_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DeadLetterSummary:
    groups: list[DeadLetterGroup]
    messages: list[DeadLetterMessage]

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": len(self.messages),
            "campaigns": [g.as_dict() for g in self.groups],
            "details": [m.as_dict() for m in self.messages],
        }


class CampaignReads:
    """The campaign service's reads."""

    _campaigns: CampaignStore
    _ledger: DeliveryReads
    _counters: CampaignCounters | None
    _clock_ms: Callable[[], int]
    _operator: str
    _jobs: JobService
    _variant_figures: Callable[[Campaign], Mapping[str, VariantFigures]] | None

    def get(self, campaign_id: str) -> Campaign:
        return self._campaigns.get(campaign_id)

    def list_campaigns(self, state: CampaignState | None = None) -> list[Campaign]:
        return list(self._campaigns.list(state))

    def status(self, campaign_id: str) -> DeliveryStatus:
        """Counts by ledger state (from the counters when the campaign has them). Never changes the campaign: completion is the consumer's
        `complete` event (or `complete_if_done`)."""
        return delivery_status(self._campaigns, self._ledger, campaign_id, self._counters)

    def ab_results(self, campaign_id: str) -> AbResults | None:
        """An A/B campaign's figures per variant and its decision (or that the winner is
        awaited); None, reading nothing more, for a campaign without a test. One read of the
        report's aggregates (the campaign's size does not enter), never of the ledger."""
        campaign = self._campaigns.get(campaign_id)
        if campaign.ab_test is None:
            return None
        figures = self._variant_figures(campaign) if self._variant_figures is not None else None
        return ab_results(campaign, figures)

    def complete_if_done(self, campaign_id: str) -> Campaign | None:
        return complete_if_done(
            self._campaigns, self._ledger, campaign_id, now_ms=self._clock_ms(), counters=self._counters
        )

    def reconcile(self, campaign_id: str) -> Reconciliation:
        """The counters against a full read of the ledger: every drift (O(recipients))."""
        if self._counters is None:
            raise InvalidCampaignError("reconcile: this service keeps no counters")
        return reconcile(self._campaigns, self._ledger, self._counters, campaign_id)

    def start_reconcile(self, campaign_id: str) -> Job:
        """`reconcile` as a job (a page of the ledger a step): its result is the
        Reconciliation's `as_dict`. Not idempotent by id: each call reads the ledger anew."""
        return self._jobs.start_reconcile(campaign_id, by=self._operator)

    def records(self, campaign_id: str) -> Iterator[DeliveryRecord]:
        return self._ledger.records(campaign_id)

    def delivery(self, campaign_id: str, recipient_id: str) -> DeliveryRecord | None:
        """The ledger record of one delivery (None: not claimed yet, or never published)."""
        self._campaigns.get(campaign_id)  # raises CampaignNotFoundError
        return self._ledger.get(DeliveryKey(campaign_id=campaign_id, recipient_id=recipient_id))

    def dead_lettered(self, campaign_id: str) -> list[DeliveryRecord]:
        """Deliveries whose batch reached the DLQ unsent, each with the last error the ledger kept."""
        return [r for r in self._ledger.records(campaign_id) if r.state is DeliveryState.DEAD_LETTERED]

    def dead_letter_summary(self, letters: Iterable[DeadLetter]) -> DeadLetterSummary:
        """Group dead-letter messages by campaign. A message's error is the poison reason the
        consumer attached, else the reason the ledger recorded for its dead-lettered recipients."""
        parsed: list[tuple[DeadLetter, BatchMessage | None]] = []
        members: dict[str, set[str]] = {}
        for letter in letters:
            try:
                batch = BatchMessage.model_validate_json(letter.body)
            except ValidationError:
                batch = None
            parsed.append((letter, batch))
            if batch:
                members.setdefault(batch.campaign_id, set()).update(r.recipient_id for r in batch.recipients)
        dead: dict[tuple[str, str], DeliveryRecord] = {}
        for campaign_id, ids in members.items():  # the letters' recipients only, never the whole campaign
            for recipient_id, record in self._ledger.get_many(campaign_id, sorted(ids)).items():
                if record.state is DeliveryState.DEAD_LETTERED:
                    dead[(campaign_id, recipient_id)] = record
        messages: list[DeadLetterMessage] = []
        for letter, batch in parsed:
            keys = [(batch.campaign_id, r.recipient_id) for r in batch.recipients] if batch else []
            records = [dead[key] for key in keys if key in dead]
            latest = max(records, key=lambda r: r.updated_at or "", default=None)
            messages.append(
                DeadLetterMessage(
                    message_id=letter.message_id,
                    campaign_id=batch.campaign_id if batch else None,
                    batch_id=batch.batch_id if batch else None,
                    recipients=len(batch.recipients) if batch else 0,
                    dead_lettered=len(records),
                    error=letter.poison_reason or (latest.reason if latest else None),
                    sent_at_ms=letter.sent_at_ms,
                )
            )
        groups: dict[str | None, DeadLetterGroup] = {}
        for message in sorted(messages, key=lambda m: m.sent_at_ms or 0):
            group = groups.setdefault(message.campaign_id, DeadLetterGroup(campaign_id=message.campaign_id))
            group.messages += 1
            group.recipients += message.recipients
            group.dead_lettered += message.dead_lettered
            group.last_error = message.error or group.last_error
        ordered = sorted(groups.values(), key=lambda g: (g.campaign_id is None, g.campaign_id or ""))
        return DeadLetterSummary(groups=ordered, messages=messages)


def is_final(state: DeliveryState) -> bool:
    return state in FINAL_STATES
