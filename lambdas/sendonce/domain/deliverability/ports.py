"""What deliverability needs from the outside world: the suppression list, provider events
recorded against the ledger, webhook signatures, the sending account's state. Addresses cross these ports only to be
hashed: what is stored and listed is the email fingerprint
(`sendonce.domain.models.email_fingerprint`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from sendonce.domain.campaigns.ports import CampaignRecords
from sendonce.domain.models import (
    CampaignState,
    DeliveryKey,
    DeliveryState,
)


class SuppressionReason(StrEnum):
    UNSUBSCRIBED = "unsubscribed"
    BOUNCED = "bounced"  # hard bounces only: a soft bounce never suppresses
    COMPLAINED = "complained"
    MANUAL = "manual"


@dataclass(frozen=True)
class Suppression:
    fingerprint: str
    reason: SuppressionReason
    source: str
    campaign_id: str | None = None
    created_at: str | None = None


@dataclass(frozen=True)
class ImportReport:
    added: int = 0
    already_suppressed: int = 0
    # 1-based positions of entries that are not addresses: never the entries themselves,
    # so that a report cannot carry an address into logs.
    invalid_lines: tuple[int, ...] = ()


class Suppressions(Protocol):
    """Addresses that are never sent to, keyed by fingerprint. The first reason recorded
    for an address is kept: adding it again changes nothing and returns False."""

    def is_suppressed(self, email: str) -> Suppression | None: ...

    def suppressed_among(self, emails: Iterable[str]) -> dict[str, Suppression]:
        """The suppressed ones among `emails`, by fingerprint: one consistent read of them all
        (the consumer asks once per message, before its sends)."""
        ...

    def get(self, fingerprint: str) -> Suppression | None: ...

    def add(self, email: str, reason: SuppressionReason, source: str, campaign_id: str | None = None) -> bool: ...

    def add_fingerprint(
        self, fingerprint: str, reason: SuppressionReason, source: str, campaign_id: str | None = None
    ) -> bool:
        """For callers that only ever saw the fingerprint (a one-click unsubscribe token)."""
        ...

    def remove(self, email: str) -> bool: ...

    def list(self) -> Iterator[Suppression]: ...

    def import_(self, emails: Iterable[str], *, reason: SuppressionReason, source: str) -> ImportReport:
        """Add many valid addresses (the caller validated them); already suppressed ones are kept as they are."""
        ...


class EventKind(StrEnum):
    SENT = "sent"  # the provider accepted the email (SES Send, Resend email.sent)
    DELIVERED = "delivered"
    DELIVERY_DELAYED = "delivery_delayed"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    REJECTED = "rejected"  # SES Reject (virus), never attempted
    FAILED = "failed"  # SES Rendering Failure, Resend email.failed
    PROVIDER_SUPPRESSED = "provider_suppressed"  # the provider's own list stopped it
    UNSUBSCRIBED = "unsubscribed"  # our one-click link
    # Engagement (opt-in per campaign: Campaign.tracking): recorded apart from the ledger
    # (deliverability/engagement.py), never as a ledger annotation.
    OPENED = "opened"
    CLICKED = "clicked"


@dataclass(frozen=True)
class ProviderEvent:
    """One provider event about one delivery, normalised from SES or Resend."""

    event_id: str  # stable across redeliveries of the same event: the dedup key
    provider: str
    kind: EventKind
    campaign_id: str | None
    recipient_id: str | None
    message_id: str | None = None
    # The addresses the event is about: used to suppress them, never stored or logged.
    addresses: tuple[str, ...] = ()
    occurred_at: str | None = None
    hard: bool = False  # a permanent bounce
    detail: str | None = None  # short, address-free (bounce type and status, feedback type)
    suppression_reason: SuppressionReason | None = None

    @property
    def key(self) -> DeliveryKey | None:
        if not self.campaign_id or not self.recipient_id:
            return None
        return DeliveryKey(campaign_id=self.campaign_id, recipient_id=self.recipient_id)


class AnnotationStatus(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"  # this event id was applied before: nothing changed
    NO_DELIVERY = "no_delivery"  # no ledger record for the event's tags


@dataclass(frozen=True)
class Annotation:
    status: AnnotationStatus
    # The delivery's state after the write (applied) or as found (duplicate); None when
    # the adapter did not read it back (a counted event written in a transaction).
    state: DeliveryState | None = None
    provider: str | None = None


class FeedbackCounter(StrEnum):
    COMPLAINTS = "complaints"
    HARD_BOUNCES = "hard_bounces"


@dataclass(frozen=True)
class CampaignFeedback:
    """Per-campaign counts the brakes compare (see docs/deliverability.md)."""

    sent: int = 0
    complaints: int = 0
    hard_bounces: int = 0


@dataclass(frozen=True)
class UnknownDelivery:
    recipient_id: str
    provider: str | None
    since_ms: int | None  # when the delivery became unknown
    reason: str | None
    email_fingerprint: str | None
    # A provider 'sent' event arrived for it (while a consumer still held it): it was sent.
    confirmed_message_id: str | None = None
    # An audit found it absent from a complete listing of the provider's sent emails that
    # covers its whole window (protocol event prove_not_sent): it may be sent again.
    proven_not_sent: bool = False


@dataclass
class ReopenReport:
    reopened: list[str] = field(default_factory=list)
    confirmed_sent: list[str] = field(default_factory=list)  # resolved to sent instead: evidence arrived
    skipped: list[str] = field(default_factory=list)  # not unknown (any more)


class LedgerEvents(Protocol):
    """Provider events written onto ledger records (annotations, never a change of state,
    except unknown -> sent on the provider's word, and an operator's reopen), plus the
    per-campaign counters the brakes read."""

    def annotate(self, event: ProviderEvent, *, counter: FeedbackCounter | None = None) -> Annotation:
        """Record the event on its delivery once (deduplicated on event_id); with `counter`,
        add one to that campaign counter in the same atomic write."""
        ...

    def count_sent(self, campaign_id: str, recipient_id: str) -> None: ...

    def feedback(self, campaign_id: str) -> CampaignFeedback: ...

    def resolve_unknown(self, key: DeliveryKey, *, provider_message_id: str, detail: str) -> bool:
        """unknown -> sent, conditional on the state still being unknown."""
        ...

    def unknowns(self, campaign_id: str) -> Iterator[UnknownDelivery]: ...

    def unknowns_page(
        self, campaign_id: str, cursor: str | None, limit: int
    ) -> tuple[list[UnknownDelivery], str | None]:
        """Up to `limit` unknown deliveries from `cursor` (opaque; None: the start), shard by
        shard, and the next page's cursor (None: no more)."""
        ...

    def prove_not_sent(self, key: DeliveryKey, *, audit: str) -> bool:
        """Record that an audit proved the unknown delivery absent at the provider
        (unknown -> unknown); conditional on unknown and on no provider 'sent' evidence."""
        ...

    def reopen_unknown(
        self, campaign_id: str, recipient_ids: Iterable[str], *, by: str, accept_possible_duplicates: bool = False
    ) -> ReopenReport:
        """unknown -> pending (and forget that an attempt may have been accepted), so that
        resume sends it again; conditional on unknown, on no provider 'sent' evidence and on
        an audit's proof that the provider never had it (unless the operator accepts a
        possible second email)."""
        ...


class WebhookVerifier(Protocol):
    def verify(self, body: str, headers: Mapping[str, str]) -> dict[str, Any]:
        """The parsed payload of a correctly signed, fresh webhook; raises WebhookSignatureError."""
        ...


# --- the sending account's health (domain/deliverability/account_health.py) ----------------


class Enforcement(StrEnum):
    """SES `EnforcementStatus`; another provider maps its own account states onto these."""

    HEALTHY = "HEALTHY"
    PROBATION = "PROBATION"
    SHUTDOWN = "SHUTDOWN"


class Verdict(StrEnum):
    HEALTHY = "healthy"
    PROBATION = "probation"  # an alarm, nothing paused
    STOPPED = "stopped"  # the account cannot send: its sending campaigns are paused


@dataclass(frozen=True)
class AccountState:
    """What the provider says of the account, as read now."""

    provider: str
    sending_enabled: bool
    enforcement: str  # an Enforcement value, or what the provider said if it is none of them

    @property
    def verdict(self) -> Verdict:
        if not self.sending_enabled or self.enforcement == Enforcement.SHUTDOWN:
            return Verdict.STOPPED
        if self.enforcement == Enforcement.PROBATION:
            return Verdict.PROBATION
        return Verdict.HEALTHY

    @property
    def reason(self) -> str:
        """The paused campaigns' reason, and the record's: what the provider said."""
        said = []
        if not self.sending_enabled:
            said.append("sending disabled")
        if self.enforcement != Enforcement.HEALTHY:
            said.append(f"enforcement status {self.enforcement}")
        return f"{self.provider} account: {', '.join(said) or 'healthy'}"


@dataclass(frozen=True)
class HealthRecord:
    """What the last check saw, kept between checks: the verdict and since when, when the
    account last stopped and when it came back from that (None: not since recorded)."""

    provider: str
    verdict: Verdict
    reason: str
    since_ms: int
    checked_ms: int
    stopped_at_ms: int | None = None
    back_at_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "verdict": self.verdict.value}


class ProviderAccount(Protocol):
    """The provider's view of the sending account (SES: `GetAccount`)."""

    def state(self) -> AccountState: ...


class HealthRecords(Protocol):
    """The last check's record, one per provider."""

    def last(self, provider: str) -> HealthRecord | None: ...

    def record(self, record: HealthRecord) -> None: ...


class SendingCampaigns(CampaignRecords, Protocol):
    """The campaigns sending now (by state: an index, never the ledger), and their moves."""

    def list(self, state: CampaignState | None = None) -> Any: ...


@dataclass(frozen=True)
class GroupPlaces:
    """Places asked of a mailbox group's cap for one provider request: `count` emails to
    `group`, under the deployment's `cap` and the campaign's `campaign_cap` (emails/s; None:
    none) (deliverability/group_caps.py)."""

    group: str
    count: int
    campaign_id: str
    cap: float | None
    campaign_cap: float | None


@dataclass(frozen=True)
class PlacesTaken:
    """Places a request got (always true): `held_s`, how long the group's caps held it
    because the second it asked in was full (0.0: not held), for the report."""

    held_s: float = 0.0

    def __bool__(self) -> bool:
        return True


class GroupCaps(Protocol):
    def take(self, places: GroupPlaces, *, deadline: float | None = None) -> PlacesTaken | None:
        """Wait until `places.count` more emails to the group are within its caps, shared by
        every consumer of every campaign; None if `deadline` (epoch seconds) would pass first."""
        ...

    def deferred(self, group: str) -> None:
        """The group's mailbox provider deferred mail: slow that group for every consumer."""
        ...


class WarmupBudget(Protocol):
    def take(self, domain: str, day: str, count: int, cap: int, *, whole: bool = True) -> int:
        """Up to `count` more sends from `domain` on `day` (YYYY-MM-DD, UTC) within its `cap`,
        shared by every consumer of every campaign (deliverability/warmup.py): how many were
        taken; with `whole`, `count` or none."""
        ...


class EngagementStore(Protocol):
    """A recipient's first open and first click of a campaign, and the campaign's unique
    opens and clicks per minute (adapters/dynamodb/engagement.py)."""

    def record(self, campaign_id: str, recipient_id: str, kind: str, at_ms: int, *, variant: str | None = None) -> str:
        """Record that the recipient `kind` ("opened" / "clicked") at `at_ms`: "first" (a
        recipient's first, counted in its minute), "earlier" (before the one recorded: moved
        to its minute, counted once), or "repeat" (at or after it: counted already).
        `variant`: an A/B campaign's, what the recipient counts under (report_data.variant_key),
        counted and moved with the campaign's own count, in the same write."""
        ...
