"""Before anyone is sent anything: preview a campaign's email, check a recipient file renders,
and send a test to a few of the operator's own addresses.

All three build the email with `provider_call.compose`, the function the consumer sends
with, so what is shown is what a recipient gets, headers included (List-Unsubscribe,
Feedback-ID). A test send goes through the campaign's provider and
the shared send rate but never near the ledger: it has no ledger, counts or suppression
writes to make (this module holds none of those ports), and its idempotency keys have a
namespace of their own (`sendonce-test:<campaign>:<id>`), so no real delivery's key is used
and a later real send to the same address is sent as if the test never happened.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from sendonce.domain import limits
from sendonce.domain.campaigns.ports import CampaignStore
from sendonce.domain.campaigns.recipients_file import Row
from sendonce.domain.campaigns.variants import HELD, variant_for
from sendonce.domain.deliverability.feedback_id import FeedbackId
from sendonce.domain.deliverability.ports import Suppressions
from sendonce.domain.deliverability.unsubscribe import UnsubscribeLinks
from sendonce.domain.errors import ConflictingRequestError, InvalidCampaignError, ProviderError, RetryableProviderError
from sendonce.domain.models import (
    Campaign,
    Content,
    OutboundEmail,
    Recipient,
    TestSendOutcome,
    TestSendRecord,
    VariableValue,
    email_fingerprint,
    is_valid_email,
)
from sendonce.domain.sending.ports import EmailProvider, RateLimiter, TestSendLog
from sendonce.domain.sending.provider_call import compose
from sendonce.domain.sending.rendering import CompiledContent, RenderError

logger = logging.getLogger(__name__)

TEST_KEY_PREFIX = "sendonce-test"
TEST_SUBJECT_PREFIX = "[TEST] "
TEST_HEADER = "X-Sendonce-Test"
# Who a preview or test is addressed to when no recipient is named: the id signs the
# unsubscribe link; the address is never sent to (.invalid cannot resolve, RFC 2606).
PREVIEW_RECIPIENT_ID = "preview"
PREVIEW_ADDRESS = "preview@example.invalid"
# How long a test send waits for a place in the shared send rate, and how often it tries
# again when the provider says "too fast".
RATE_WAIT_S = 20.0
THROTTLE_RETRIES = 3
CHECK_PROBLEMS_KEPT = 100


def _compiled(campaign: Campaign, campaigns: CampaignStore, content: Content | None = None) -> CompiledContent:
    """The campaign's templates (or `content`), compiled (read from its content item when the
    state item does not carry them)."""
    try:
        return CompiledContent(content or campaign.content or campaigns.content(campaign.campaign_id))
    except RenderError as exc:
        raise InvalidCampaignError(f"campaign {campaign.campaign_id!r}: {exc}") from exc


def _variants(campaign: Campaign, campaigns: CampaignStore) -> dict[str, CompiledContent]:
    """An A/B campaign's variants, each compiled whole (as its recipients get it), by id."""
    content = campaign.content or campaigns.content(campaign.campaign_id)
    return {v.id: _compiled(campaign, campaigns, content.of_variant(v.id)) for v in content.variants}


def _chosen_variants(campaign: Campaign, variant: str | None) -> tuple[str, ...]:
    """The variants a preview or a test send may show: `variant` (checked), or, for an A/B
    campaign, all of them in the test's order; () for any other campaign."""
    test = campaign.ab_test
    if test is None:
        if variant is not None:  # the request is sound; the campaign is not one it fits (as a pick's)
            raise ConflictingRequestError(f"variant: campaign {campaign.campaign_id!r} has no A/B test")
        return ()
    if variant is None:
        return test.variants
    if variant not in test.variants:
        raise InvalidCampaignError(f"variant: {variant!r} is not one of {', '.join(test.variants)}")
    return (variant,)


def recipient_of(variables: Mapping[str, Any], *, recipient_id: str = PREVIEW_RECIPIENT_ID) -> Recipient:
    """A stand-in recipient holding `variables` (raises InvalidCampaignError naming a bad one)."""
    try:
        return Recipient(recipient_id=recipient_id, email=PREVIEW_ADDRESS, variables=dict(variables))
    except ValidationError as exc:
        problems = "; ".join(
            f"variables.{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)[:5]
        )
        raise InvalidCampaignError(f"{problems} (values are strings, numbers, true/false or null)") from None


def _missing(content: CompiledContent, variables: Mapping[str, VariableValue]) -> list[str]:
    return sorted(content.variables - set(variables))


def _render_problem(exc: RenderError, missing: list[str]) -> str:
    return f"{exc}" + (
        f" (variables the templates use and this recipient lacks: {', '.join(missing)})" if missing else ""
    )


@dataclass(frozen=True)
class Preview:
    campaign_id: str
    recipient_id: str
    provider: str
    sender: str
    reply_to: str | None
    # The variables the templates use that were not given, and those given that no template uses.
    missing: list[str]
    unused: list[str]
    subject: str | None = None
    html: str | None = None
    text: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # the template failed: nothing above would be sent
    unsubscribe_configured: bool = True
    # An A/B campaign's: the variant shown (the recipient's own, unless one was asked for),
    # and whether the recipient is one of the rest with no winner yet (shown: the first).
    variant: str | None = None
    awaits_winner: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "recipient_id": self.recipient_id,
            "ok": self.ok,
            "error": self.error,
            "missing": self.missing,
            "unused": self.unused,
            "provider": self.provider,
            "from": self.sender,
            "reply_to": self.reply_to,
            "subject": self.subject,
            "headers": self.headers,
            "unsubscribe_configured": self.unsubscribe_configured,
            "html": self.html,
            "text": self.text,
            "variant": self.variant,
            "awaits_winner": self.awaits_winner,
        }


@dataclass(frozen=True)
class CheckProblem:
    line: int
    recipient_id: str | None
    problem: str


@dataclass
class CheckReport:
    """A recipient file rendered row by row; nothing sent or published."""

    campaign_id: str
    checked: int = 0  # recipients rendered
    failed: int = 0  # rows that cannot be sent: unreadable, or the templates fail for them
    duplicates: int = 0  # repeated recipient_id: published once, rendered once
    unused: set[str] = field(default_factory=set)  # given by some row, used by no template
    problems: list[CheckProblem] = field(default_factory=list)  # the first 100

    def as_dict(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "checked": self.checked,
            "failed": self.failed,
            "duplicates": self.duplicates,
            "unused": sorted(self.unused),
            "problems": [p.__dict__ for p in self.problems],
        }


class PreviewService:
    def __init__(
        self,
        *,
        campaigns: CampaignStore,
        unsubscribe: UnsubscribeLinks | None = None,
        feedback_id: FeedbackId | None = None,
    ):
        self._campaigns = campaigns
        self._unsubscribe = unsubscribe
        self._feedback_id = feedback_id

    def preview(self, campaign_id: str, recipient: Recipient, *, variant: str | None = None) -> Preview:
        """The email `recipient` would get; a template error is reported, not raised. An A/B
        campaign's: the recipient's own variant (its test variant, or the winner), or
        `variant`; one of the rest before a winner is recorded is shown the first."""
        campaign = self._campaigns.get(campaign_id)
        content = _compiled(campaign, self._campaigns)
        shown, awaits = self._shown(campaign, recipient, variant)
        missing = _missing(content, recipient.variables)
        preview = Preview(
            campaign_id=campaign_id,
            recipient_id=recipient.recipient_id,
            provider=campaign.provider,
            sender=campaign.sender,
            reply_to=campaign.reply_to,
            missing=missing,
            unused=sorted(set(recipient.variables) - content.variables),
            unsubscribe_configured=self._unsubscribe is not None,
            variant=shown,
            awaits_winner=awaits,
        )
        try:
            email = compose(
                campaign, content, recipient, "preview", self._unsubscribe, feedback_id=self._feedback_id, variant=shown
            )
        except RenderError as exc:
            return replace(preview, error=_render_problem(exc, missing))
        return replace(preview, subject=email.subject, html=email.html, text=email.text, headers=email.headers)

    @staticmethod
    def _shown(campaign: Campaign, recipient: Recipient, variant: str | None) -> tuple[str | None, bool]:
        """The variant a preview shows, and whether the recipient still awaits the winner."""
        allowed = _chosen_variants(campaign, variant)
        if not allowed or variant is not None:
            return variant, False
        assert campaign.ab_test is not None
        own = variant_for(campaign.campaign_id, recipient.recipient_id, campaign.ab_test, campaign.decision)
        return (allowed[0], True) if own == HELD else (own, False)

    def check(self, campaign_id: str, rows: Iterable[Row]) -> CheckReport:
        """Render every recipient of a file as the consumer would; report each that fails by line.
        An A/B campaign's recipients each get one of its variants: every row is rendered with
        every variant, and a failure names the variant."""
        campaign = self._campaigns.get(campaign_id)
        content = _compiled(campaign, self._campaigns)
        variants = _variants(campaign, self._campaigns) if campaign.ab_test is not None else {}
        # What each recipient may get: any of the variants; else the campaign's one email.
        renders: list[tuple[str | None, CompiledContent]] = [*variants.items()] or [(None, content)]
        report = CheckReport(campaign_id=campaign_id)

        def fail(row: Row, problem: str) -> None:
            report.failed += 1
            if len(report.problems) < CHECK_PROBLEMS_KEPT:
                recipient_id = row.recipient.recipient_id if row.recipient else None
                report.problems.append(CheckProblem(line=row.line, recipient_id=recipient_id, problem=problem))

        for row in rows:
            if row.recipient is None:
                fail(row, row.problem or "cannot be read")
                continue
            if row.is_duplicate:
                report.duplicates += 1
                continue
            report.checked += 1
            variables = row.recipient.variables
            report.unused.update(set(variables) - content.variables)
            problems = []
            for variant, compiled in renders:
                try:
                    compose(
                        campaign,
                        content,
                        row.recipient,
                        "check",
                        self._unsubscribe,
                        feedback_id=self._feedback_id,
                        variant=variant,
                    )
                except RenderError as exc:
                    problem = _render_problem(exc, _missing(compiled, variables))
                    problems.append(problem if variant is None else f"variant {variant}: {problem}")
            if problems:
                fail(row, "; ".join(problems))
        return report


class TestSendService:
    """Send a campaign's email to a few addresses, marked as a test, outside the ledger."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        *,
        campaigns: CampaignStore,
        providers: Mapping[str, EmailProvider],
        log: TestSendLog,
        limiter: RateLimiter | None = None,
        suppressions: Suppressions | None = None,
        unsubscribe: UnsubscribeLinks | None = None,
        feedback_id: FeedbackId | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ):
        self._campaigns = campaigns
        self._providers = providers
        self._log = log
        self._limiter = limiter
        self._suppressions = suppressions
        self._unsubscribe = unsubscribe
        self._feedback_id = feedback_id
        self._clock = clock
        self._sleep = sleep
        self._new_id = new_id

    def send(
        self,
        campaign_id: str,
        to: Sequence[str],
        *,
        variables: Mapping[str, Any] | None = None,
        by: str,
        include_suppressed: bool = False,
        variant: str | None = None,
    ) -> TestSendRecord:
        """Everything is checked before anything is sent: the addresses (at most
        limits.TEST_SEND_ADDRESSES, none suppressed unless `include_suppressed`), the provider,
        the variant and the templates. Each address's outcome is recorded, sent or not. An A/B
        campaign sends `variant`, or each of its variants, to every address."""
        addresses = self._addresses(to)
        campaign = self._campaigns.get(campaign_id)
        variants: tuple[str | None, ...] = _chosen_variants(campaign, variant) or (None,)
        provider = self._providers.get(campaign.provider)
        if provider is None:
            raise ConflictingRequestError(
                f"campaign {campaign_id!r} sends with {campaign.provider!r}, which is not configured here "
                f"(configured: {', '.join(sorted(self._providers)) or 'none'})"
            )
        content = _compiled(campaign, self._campaigns)
        test_send_id = self._new_id()
        stand_in = recipient_of(variables or {}, recipient_id=f"test-{test_send_id[:12]}")
        for shown in variants:
            try:
                content.render(stand_in.variables, variant=shown)
            except RenderError as exc:
                where = "variables" if shown is None else f"variables (variant {shown})"
                raise ConflictingRequestError(
                    f"{where}: {_render_problem(exc, _missing(content, stand_in.variables))}"
                ) from exc
        suppressed = self._suppressed(addresses, include_suppressed)

        outcomes = []
        subject = ""
        for n, (shown, (index, address)) in enumerate((v, a) for v in variants for a in enumerate(addresses)):
            addressee = stand_in.model_copy(update={"email": address})
            email = self._email(campaign, content, addressee, test_send_id, n, variant=shown)
            subject = subject or email.subject
            outcome = self._send_one(provider, email, suppressed.get(index))
            outcomes.append(outcome.model_copy(update={"variant": shown}) if shown is not None else outcome)
        record = TestSendRecord(
            test_send_id=test_send_id,
            campaign_id=campaign_id,
            at=dt.datetime.fromtimestamp(self._clock(), dt.UTC).isoformat(timespec="milliseconds"),
            by=by,
            provider=provider.name,
            subject=subject,
            include_suppressed=include_suppressed,
            outcomes=outcomes,
        )
        self._log.record(record)
        logger.info(
            "test send",
            extra={"campaign_id": campaign_id, "test_send_id": test_send_id, "sent": record.sent, "to": len(outcomes)},
        )
        return record

    def recent(self, campaign_id: str, *, limit: int = limits.TEST_SENDS_SHOWN) -> tuple[list[TestSendRecord], int]:
        """The newest test sends of a campaign and how many there are in all."""
        return self._log.recent(campaign_id, limit=limit)

    @staticmethod
    def _addresses(to: Sequence[str]) -> list[str]:
        addresses: list[str] = []
        seen: set[str] = set()
        for index, raw in enumerate(to):
            address = raw.strip()
            if not is_valid_email(address):
                raise InvalidCampaignError(f"to[{index}]: not a valid email address")
            if email_fingerprint(address) not in seen:
                seen.add(email_fingerprint(address))
                addresses.append(address)
        if not addresses:
            raise InvalidCampaignError("to: give at least one address")
        if len(addresses) > limits.TEST_SEND_ADDRESSES:
            raise InvalidCampaignError(
                f"to: {len(addresses)} addresses; a test send goes to at most {limits.TEST_SEND_ADDRESSES} "
                "(publish to send to an audience)"
            )
        return addresses

    def _suppressed(self, addresses: list[str], include_suppressed: bool) -> dict[int, str]:
        """Index -> why the address is suppressed; refuses them all unless `include_suppressed`."""
        if self._suppressions is None:
            return {}
        found = {}
        for index, address in enumerate(addresses):
            suppression = self._suppressions.is_suppressed(address)
            if suppression is not None:
                found[index] = f"{suppression.reason.value} ({suppression.source})"
        if found and not include_suppressed:
            which = ", ".join(f"to[{i}] ({reason})" for i, reason in found.items())
            raise ConflictingRequestError(
                f"suppressed, so nothing was sent: {which}; include_suppressed (--include-suppressed) sends to it anyway"
            )
        return found

    def _email(
        self,
        campaign: Campaign,
        content: CompiledContent,
        recipient: Recipient,
        test_send_id: str,
        index: int,
        *,
        variant: str | None = None,
    ) -> OutboundEmail:
        key = f"{TEST_KEY_PREFIX}:{campaign.campaign_id}:{test_send_id}-{index}"
        email = compose(
            campaign, content, recipient, key, self._unsubscribe, feedback_id=self._feedback_id, variant=variant
        )
        # No recipient_id tag: a provider event about a test matches no delivery in the ledger.
        return email.model_copy(
            update={
                "subject": TEST_SUBJECT_PREFIX + email.subject,
                "headers": {**email.headers, TEST_HEADER: "1"},
                "tags": {
                    "campaign_id": campaign.campaign_id,
                    "test_send_id": test_send_id,
                    **({"variant": variant} if variant is not None else {}),
                },
            }
        )

    def _send_one(self, provider: EmailProvider, email: OutboundEmail, suppressed: str | None) -> TestSendOutcome:
        outcome = TestSendOutcome(email_fingerprint=email_fingerprint(email.to), suppressed=suppressed)
        attempt = 0
        while True:
            if self._limiter is not None and not self._limiter.acquire(
                provider.name, deadline=self._clock() + RATE_WAIT_S
            ):
                return outcome.model_copy(
                    update={"error": f"no place in the shared send rate within {RATE_WAIT_S:.0f} s"}
                )
            try:
                receipt = provider.send(email)
            except RetryableProviderError as exc:
                if exc.throttled and self._limiter is not None:
                    self._limiter.throttled(provider.name)
                if attempt >= THROTTLE_RETRIES:
                    return outcome.model_copy(update={"error": f"{exc.error_class}: {exc.reason}"})
                self._sleep(min(8.0, exc.retry_after or 0.5 * 2**attempt))
                attempt += 1
                continue
            except ProviderError as exc:  # the reason is redacted by ProviderError
                return outcome.model_copy(update={"error": f"{exc.error_class}: {exc.reason}"})
            return outcome.model_copy(update={"provider_message_id": receipt.provider_message_id})
