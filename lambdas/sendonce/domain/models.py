"""The vocabulary of sendonce as typed models: campaigns, batches, recipients, deliveries."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sendonce.domain.campaigns.variants import AbTest, Decision, Variant, check_variants
from sendonce.domain.campaigns.windows import SendWindow
from sendonce.domain.sending.shards import DEFAULT_LEDGER_SHARDS, MAX_LEDGER_SHARDS
from sendonce.domain.sending.shares import MAX_WEIGHT

SCHEMA_VERSION: Literal[1] = 1
MAX_RECIPIENTS_PER_BATCH = 100

# Identifiers end up in DynamoDB keys, Resend's Idempotency-Key (<= 256 chars), provider
# tags (letters, digits, _ and - only) and logs. They are opaque ids, never email
# addresses: an '@' is refused so that logs cannot carry an address by way of an id.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$"
Identifier = Annotated[str, Field(pattern=ID_PATTERN)]

# Deliberately simple: one '@', no spaces, a dot in the domain. The provider has the final word.
_EMAIL = re.compile(
    r"^[^@\s<>(),;:\"\[\]]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+$"
)
VariableValue = str | int | float | bool | None


def is_valid_email(address: str) -> bool:
    return len(address) <= 254 and bool(_EMAIL.match(address))


_ANY_EMAIL = re.compile(r"[^\s<>()\[\],;:\"'`]+@[A-Za-z0-9.-]+")


def redact_emails(text: str) -> str:
    """Replace addresses in provider messages with their fingerprint before they reach
    logs or the ledger (a provider's validation message often quotes the address)."""
    return _ANY_EMAIL.sub(lambda m: f"<email:{email_fingerprint(m.group(0))}>", text)


def email_fingerprint(address: str) -> str:
    """A stable, non-reversible stand-in for an address in logs and the ledger."""
    return hashlib.sha256(address.strip().lower().encode()).hexdigest()[:16]


class Recipient(BaseModel):
    """One addressee. The address is validated per delivery, not per batch, so one bad
    address fails that recipient only instead of poisoning its 99 neighbours."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    recipient_id: Identifier
    email: str = Field(min_length=1, max_length=320)
    variables: dict[str, VariableValue] = Field(default_factory=dict)


class BatchMessage(BaseModel):
    """The body of one SQS message: up to 100 recipients of one campaign."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1]
    campaign_id: Identifier
    batch_id: Identifier
    recipients: list[Recipient] = Field(min_length=1, max_length=MAX_RECIPIENTS_PER_BATCH)

    @field_validator("recipients")
    @classmethod
    def _unique_recipients(cls, recipients: list[Recipient]) -> list[Recipient]:
        seen: set[str] = set()
        for recipient in recipients:
            if recipient.recipient_id in seen:
                raise ValueError(f"recipient_id {recipient.recipient_id!r} appears twice in one batch")
            seen.add(recipient.recipient_id)
        return recipients

    def to_body(self) -> str:
        return self.model_dump_json()


class CampaignState(StrEnum):
    DRAFT = "draft"
    SCHEDULED = "scheduled"
    SENDING = "sending"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class Content(BaseModel):
    """Jinja templates. HTML is escaped by default; subject and text are not HTML."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subject: str = Field(min_length=1, max_length=998)
    html: str | None = None
    text: str | None = None
    # An A/B campaign's variants (campaigns/variants.py): each its subject, and its own bodies
    # where it has them; a variant without one uses the campaign's.
    variants: tuple[Variant, ...] = ()

    @model_validator(mode="after")
    def _some_body(self) -> Content:
        check_variants(self.variants)
        if not self.html and not self.text and not (self.variants and all(v.html or v.text for v in self.variants)):
            raise ValueError("content needs html or text")
        return self

    def of_variant(self, variant_id: str) -> Content:
        """The content one variant's recipients get (KeyError for a variant it does not have)."""
        variant = {v.id: v for v in self.variants}[variant_id]
        return Content(subject=variant.subject, html=variant.html or self.html, text=variant.text or self.text)


class Tracking(BaseModel):
    """Which engagement the campaign records (deliverability/engagement.py): opt-in, each kind
    on its own. The provider inserts the pixel and rewrites the links (SES: the tracked
    configuration set; Resend: the domain's tracking settings); sendonce records the events."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    opens: bool = False
    clicks: bool = False

    def records(self, kind: str) -> bool:
        """Whether an `opened` / `clicked` event of the campaign is recorded."""
        return (kind == "opened" and self.opens) or (kind == "clicked" and self.clicks)


class Campaign(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    campaign_id: Identifier
    name: str = Field(min_length=1, max_length=200)
    provider: str
    sender: str = Field(min_length=3, max_length=320)
    reply_to: str | None = None
    # The templates (up to 300 KB) are stored apart from the campaign's small, often updated
    # state: a campaign read from its state alone has no content (`CampaignStore.content`
    # reads it; it never changes after creation). Its subject stays here, for listings.
    content: Content | None = None
    subject: str | None = None
    state: CampaignState = CampaignState.DRAFT
    state_reason: str | None = None
    state_changed_by: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    # "batch": one provider request per SQS message (Resend /emails/batch) instead of one
    # per recipient. The provider must support it (checked at creation).
    delivery_mode: Literal["single", "batch"] = "single"
    # Published batches whose message has not yet been acknowledged with every recipient
    # ended: a hint that tells a consumer when to check whether the campaign is complete
    # (the ledger decides). Resume resets it to the batches it publishes.
    open_batches: int = 0
    # A publish in progress holds this lease (renewed per request); a campaign does not
    # complete while it is live, so a long streamed publish cannot end in a completed campaign.
    publishing_until_ms: int | None = None
    # How many partition-key values the campaign's ledger is spread over (sending/shards.py),
    # fixed at creation. The campaign store reads an item without it as one shard: the
    # layout of campaigns created before shards existed.
    ledger_shards: int = Field(default=DEFAULT_LEDGER_SHARDS, ge=1, le=MAX_LEDGER_SHARDS)
    # When the send starts (epoch ms, whole seconds): from the spec's `send_at` or `publish
    # --at`. A firing of the campaign's schedule starts it only while it is scheduled for
    # exactly this instant (campaigns/scheduling.py).
    send_at_ms: int | None = None
    # When it may send (campaigns/windows.py); outside it the campaign pauses by itself and
    # resumes at the next opening (campaigns/window_pauses.py). Fixed at creation.
    window: SendWindow | None = None
    # Its share of the provider's rate while other campaigns send too (sending/shares.py):
    # weight against the others of its priority; `high` is served before every `normal`
    # campaign (which keep a floor); `max_rate` caps its provider requests per second.
    # A campaign item from before shares reads as weight 1, normal, uncapped.
    weight: int = Field(default=1, ge=1, le=MAX_WEIGHT)
    priority: Literal["normal", "high"] = "normal"
    max_rate: float | None = Field(default=None, gt=0)
    # Its own caps per mailbox-provider group, in emails per second, under the deployment's
    # (deliverability/group_caps.py). Fixed at creation.
    pacing: dict[str, float] = Field(default_factory=dict)
    # The opens and clicks it records (None: neither). Fixed at creation.
    tracking: Tracking | None = None
    # An A/B test over the content's variants (campaigns/variants.py), fixed at creation, and
    # its winner once recorded (written once: the first decision stands).
    ab_test: AbTest | None = None
    decision: Decision | None = None
    version: int = 0

    @model_validator(mode="before")
    @classmethod
    def _subject_of_content(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("content") is not None and not data.get("subject"):
            content = data["content"]
            subject = content.subject if isinstance(content, Content) else (content or {}).get("subject")
            data = {**data, "subject": subject}
        return data

    @property
    def accepts_sends(self) -> bool:
        # A completed campaign's messages are processed too: every recipient has ended, so
        # each claim finds its delivery final; were one not, sending it is what was asked.
        return self.state in (CampaignState.SENDING, CampaignState.COMPLETED)


class DeliveryState(StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    IN_FLIGHT = "in_flight"
    SENT = "sent"
    FAILED = "failed"
    UNKNOWN = "unknown"
    SUPPRESSED = "suppressed"
    CANCELLED = "cancelled"
    DEAD_LETTERED = "dead_lettered"


FINAL_STATES = frozenset(
    {DeliveryState.SENT, DeliveryState.FAILED, DeliveryState.UNKNOWN, DeliveryState.SUPPRESSED, DeliveryState.CANCELLED}
)
HELD_STATES = frozenset({DeliveryState.CLAIMED, DeliveryState.IN_FLIGHT})


class DeliveryKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    campaign_id: str
    recipient_id: str

    @property
    def idempotency_key(self) -> str:
        """The provider's idempotency key: the same string as the ledger key, readable."""
        return f"sendonce:{self.campaign_id}:{self.recipient_id}"


class DeliveryRecord(BaseModel):
    """What the ledger holds for one delivery."""

    model_config = ConfigDict(frozen=True)

    campaign_id: str
    recipient_id: str
    state: DeliveryState
    owner: str | None = None
    lease_until_ms: int | None = None
    attempts: int = 0
    batch_id: str | None = None
    payload_hash: str | None = None
    provider: str | None = None
    provider_message_id: str | None = None
    reason: str | None = None
    error_class: str | None = None
    email_fingerprint: str | None = None
    # The first moment the provider may have accepted the email (Resend: the claim; SES: the
    # in_flight mark): from then on it is repeated only under its key and inside the window.
    maybe_sent_at_ms: int | None = None
    # The owner whose attempt set maybe_sent_at_ms: only it may lift the mark, and only
    # when the provider refused every request it made (domain/sending/delivery_tables.py).
    maybe_sent_by: str | None = None
    # Batch mode: the send group that owns this delivery; only that group's request (same
    # idempotency key, same members) may send it.
    group_key: str | None = None
    # An A/B campaign's variant, recorded by the first claim (campaigns/variants.py).
    variant: str | None = None
    updated_at: str | None = None
    history: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def key(self) -> DeliveryKey:
        return DeliveryKey(campaign_id=self.campaign_id, recipient_id=self.recipient_id)


class SendGroup(BaseModel):
    """Batch mode: recipients sent in one provider request under one idempotency key.
    Membership is frozen when the group is first recorded: every retry sends exactly
    these recipients with exactly this key, as the provider's batch idempotency requires."""

    model_config = ConfigDict(frozen=True)

    campaign_id: str
    group_id: str
    recipients: list[Recipient]

    @property
    def idempotency_key(self) -> str:
        return f"sendonce:{self.campaign_id}:group:{self.group_id}"


class Receipt(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider_message_id: str


class OutboundEmail(BaseModel):
    """One rendered email, ready for a provider."""

    model_config = ConfigDict(frozen=True)

    idempotency_key: str
    sender: str
    to: str
    reply_to: str | None = None
    subject: str
    html: str | None = None
    text: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)
    # The campaign tracks opens or clicks (Campaign.tracking): a provider that tracks per
    # email sends it so (SES: through the tracked configuration set).
    tracked: bool = False


class DeliveryRequest(BaseModel):
    """The payload the ledger guards: its key fields and the content that must not change."""

    model_config = ConfigDict(frozen=True)

    campaign_id: str
    recipient_id: str
    batch_id: str
    email: str
    variables: dict[str, VariableValue]
    provider: str
    provider_idempotent: bool
    owner: str
    # The SQS message's last receive: a delivery released now is dead-lettered, not pending.
    last_receive: bool = False
    # An A/B campaign's variant for this recipient (campaigns/variants.py): part of the
    # claim's content, so a claimed recipient is never sent another variant.
    variant: str | None = None

    @property
    def key(self) -> DeliveryKey:
        return DeliveryKey(campaign_id=self.campaign_id, recipient_id=self.recipient_id)

    def content_hash(self) -> str:
        body = json.dumps({"email": self.email, "variables": self.variables}, sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:32]


class TestSendOutcome(BaseModel):
    """What one address of a test send came to; the address only as its fingerprint."""

    model_config = ConfigDict(frozen=True)
    __test__: ClassVar[bool] = False  # a model, not a pytest class

    email_fingerprint: str
    provider_message_id: str | None = None
    error: str | None = None
    suppressed: str | None = None  # the suppression it was sent despite (include_suppressed)
    variant: str | None = None  # an A/B campaign's variant this email was

    @property
    def sent(self) -> bool:
        return self.provider_message_id is not None


class TestSendRecord(BaseModel):
    """One test send: the campaign's email to a few of the operator's own addresses, outside
    the ledger (it never counts as, or stands in for, a delivery)."""

    model_config = ConfigDict(frozen=True)
    __test__: ClassVar[bool] = False

    test_send_id: str
    campaign_id: str
    at: str  # ISO 8601, UTC
    by: str
    provider: str
    subject: str  # the first email's (an A/B campaign's test send: its first variant's)
    include_suppressed: bool = False
    outcomes: list[TestSendOutcome]

    @property
    def sent(self) -> int:
        return sum(1 for o in self.outcomes if o.sent)


def epoch_ms(iso: str | None) -> int | None:
    """Milliseconds since the epoch of a record's ISO 8601 time (`created_at`, `updated_at`;
    naive means UTC); None when absent or not a time."""
    if not iso:
        return None
    try:
        parsed = dt.datetime.fromisoformat(iso)
    except ValueError:
        return None
    return int((parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp() * 1000)
