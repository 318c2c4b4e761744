"""What both send paths (one by one, and batch-mode groups) do around the provider: compose
the email, check the suppression list, and call the provider within the shared send rate,
backing off on answers that prove the email was not accepted."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from sendonce.domain.deliverability.feedback_id import FeedbackId
from sendonce.domain.deliverability.group_caps import GroupPacing
from sendonce.domain.deliverability.ports import GroupCaps, GroupPlaces, Suppressions, WarmupBudget
from sendonce.domain.deliverability.unsubscribe import UnsubscribeLinks
from sendonce.domain.deliverability.warmup import DayCapReachedError, Warmup, day_of, next_day_ms, pause_reason
from sendonce.domain.errors import RetryableProviderError
from sendonce.domain.models import Campaign, OutboundEmail, Recipient, email_fingerprint
from sendonce.domain.sending.batch_run import BatchRun
from sendonce.domain.sending.ports import RateLimiter
from sendonce.domain.sending.rendering import CompiledContent, RenderError
from sendonce.domain.sending.shares import Claimant

T = TypeVar("T")


def claimant_of(campaign: Campaign) -> Claimant:
    """How a campaign shares the provider's rate with the others sending (its spec's fields)."""
    return Claimant(
        campaign_id=campaign.campaign_id,
        weight=campaign.weight,
        priority=campaign.priority,
        max_rate=campaign.max_rate,
    )


def compose(
    campaign: Campaign,
    content: CompiledContent,
    recipient: Recipient,
    idempotency_key: str,
    unsubscribe: UnsubscribeLinks | None,
    *,
    feedback_id: FeedbackId | None = None,
    variant: str | None = None,
) -> OutboundEmail:
    """The email a recipient gets (raises RenderError). Deterministic for a recipient: batch
    mode relies on it, and preview and test sends show exactly this. `feedback_id`: the
    deployment's Feedback-ID, one header of the campaign's, never the recipient's."""
    rendered = content.render(recipient.variables, variant)
    headers = {}
    if unsubscribe is not None:
        headers = unsubscribe.headers(campaign.campaign_id, recipient.recipient_id, recipient.email)
    if feedback_id is not None:
        name, value = feedback_id.header(campaign.campaign_id)
        headers[name] = value
    return OutboundEmail(
        idempotency_key=idempotency_key,
        sender=campaign.sender,
        to=recipient.email,
        reply_to=campaign.reply_to,
        subject=rendered.subject,
        html=rendered.html,
        text=rendered.text,
        headers=headers,
        tags={"campaign_id": campaign.campaign_id, "recipient_id": recipient.recipient_id}
        | ({"variant": variant} if variant is not None else {}),
        tracked=campaign.tracking is not None,
    )


class Sender:
    def __init__(
        self,
        *,
        limiter: RateLimiter | None,
        suppressions: Suppressions | None,
        unsubscribe: UnsubscribeLinks | None,
        safety_margin_ms: int,
        throttle_retries: int,
        sleep: Callable[[float], None],
        feedback_id: FeedbackId | None = None,
        group_caps: GroupCaps | None = None,
        pacing: GroupPacing | None = None,
        warmup: Warmup | None = None,
        warmup_budget: WarmupBudget | None = None,
        day_clock_ms: Callable[[], int] | None = None,
    ):
        self._limiter = limiter
        self._warmup = warmup or Warmup()
        self._warmup_budget = warmup_budget
        # What day it is for warm-up: the send windows' clock (a local stack may move it).
        self._day_clock_ms = day_clock_ms or (lambda: int(time.time() * 1000))
        self._group_caps = group_caps
        self.pacing = pacing or GroupPacing()
        self._suppressions = suppressions
        self._unsubscribe = unsubscribe
        self._feedback_id = feedback_id
        self.safety_margin_ms = safety_margin_ms
        self._throttle_retries = throttle_retries
        self._sleep = sleep

    def suppression(self, run: BatchRun, recipient: Recipient) -> str | None:
        """Why the address must not be sent to, or None. The batch's addresses are read in
        one request, by the first send of the message that asks."""
        if self._suppressions is None:
            return None
        with run.suppressed_lock:
            if run.suppressed is None:
                run.suppressed = self._suppressions.suppressed_among(r.email for r in run.batch.recipients)
        found = run.suppressed.get(email_fingerprint(recipient.email))
        return f"address suppressed ({found.reason.value}, {found.source})" if found else None

    @staticmethod
    def renders(run: BatchRun, recipient: Recipient) -> bool:
        try:
            run.content.render(recipient.variables, run.variant_of(recipient.recipient_id))
            return True
        except RenderError:
            return False

    def email(self, run: BatchRun, recipient: Recipient, idempotency_key: str) -> OutboundEmail:
        """The rendered email (`compose`)."""
        return compose(
            run.campaign,
            run.content,
            recipient,
            idempotency_key,
            self._unsubscribe,
            feedback_id=self._feedback_id,
            variant=run.variant_of(recipient.recipient_id),
        )

    def places(self, run: BatchRun, addresses: Sequence[str]) -> GroupPlaces | None:
        """What a request to `addresses` (one mailbox group's: a send group never mixes
        them when any is capped) takes of its group's caps; None: the group is uncapped."""
        if self._group_caps is None or not addresses or not self.pacing.capped(run.campaign.pacing):
            return None
        group = self.pacing.group_of(addresses[0])
        cap, own = self.pacing.caps.get(group), run.campaign.pacing.get(group)
        if cap is None and own is None:
            return None
        return GroupPlaces(
            group=group, count=len(addresses), campaign_id=run.campaign.campaign_id, cap=cap, campaign_cap=own
        )

    def deferred(self, run: BatchRun, places: GroupPlaces | None) -> None:
        """The provider said "too fast" to a request to a capped group: slow that group too."""
        if places is not None and self._group_caps is not None:
            self._group_caps.deferred(places.group)

    def warm_up(self, run: BatchRun, emails: int, *, whole: bool = True) -> int:
        """Take `emails` places of today's warm-up cap of the campaign's sending domain (all of
        them when it is not warming up), or with `whole` False as many as are left; raise
        DayCapReachedError when none (or, `whole`, not all) are."""
        if self._warmup_budget is None:
            return emails
        now_ms = self._day_clock_ms()
        found = self._warmup.cap(run.campaign.sender, now_ms)
        if found is None:
            return emails
        domain, cap = found
        taken = self._warmup_budget.take(domain, day_of(now_ms).isoformat(), emails, cap, whole=whole)
        if taken == 0:
            raise self.day_cap_reached(run)
        return taken

    def day_cap_reached(self, run: BatchRun) -> DayCapReachedError:
        """The error that pauses the campaign until tomorrow: today's cap of its sending domain
        is taken (`warm_up` gave fewer places than asked)."""
        now_ms = self._day_clock_ms()
        found = self._warmup.cap(run.campaign.sender, now_ms)
        domain, cap = found if found is not None else (run.campaign.sender, 0)
        opens_at_ms = next_day_ms(now_ms)
        return DayCapReachedError(pause_reason(domain, cap, opens_at_ms), opens_at_ms=opens_at_ms)

    def call(self, run: BatchRun, call: Callable[[], T], places: GroupPlaces | None = None, *, emails: int = 1) -> T:
        """`call` within the sending domain's warm-up cap for today (`emails` places), the
        shared send rate (and `places` within its mailbox group's caps), repeated while the
        provider says it did not accept (throttled, busy) and time remains. `emails` 0: the
        warm-up places were taken before (`warm_up`)."""
        if emails:
            self.warm_up(run, emails)
        attempt = 0
        refused_all = True  # every answer so far said "not accepted"
        while True:
            deadline = time.time() + (run.remaining_ms() - self.safety_margin_ms) / 1000
            granted_in = None
            if places is not None and self._group_caps is not None:
                taken = self._group_caps.take(places, deadline=deadline)
                if taken is None:
                    raise RetryableProviderError(
                        f"no place under mailbox group {places.group!r}'s cap before the time budget ends",
                        proves_not_accepted=refused_all,
                    )
                if taken.held_s > 0:
                    run.held_by_cap(places.group, places.count)
                granted_in = int(time.time())
            if self._limiter is not None:
                if not self._limiter.acquire(
                    run.provider.name, deadline=deadline, claimant=claimant_of(run.campaign), dwell_ms=run.dwell_ms
                ):
                    raise RetryableProviderError(
                        "no slot in the shared send rate before the time budget ends", proves_not_accepted=refused_all
                    )
            if granted_in is not None and int(time.time()) != granted_in:
                # The provider's place came in a later second than the group's: sent now, the
                # request would count in a second whose places others hold. Its places go unused.
                continue
            try:
                return call()
            except RetryableProviderError as exc:
                refused_all = refused_all and exc.proves_not_accepted
                exc.proves_not_accepted = refused_all
                if exc.throttled and self._limiter is not None:
                    self._limiter.throttled(run.provider.name)
                if exc.throttled:
                    self.deferred(run, places)
                # Throttled or busy means not accepted, so trying again cannot duplicate.
                delay = min(8.0, exc.retry_after if exc.retry_after else 0.2 * 2**attempt) * random.uniform(0.8, 1.2)
                out_of_time = run.remaining_ms() - delay * 1000 < self.safety_margin_ms
                if attempt >= self._throttle_retries or out_of_time or run.halt.is_set():
                    raise
                attempt += 1
                self._sleep(delay)
