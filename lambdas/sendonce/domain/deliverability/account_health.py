"""The sending account's own health (issue 32, item 4): read on a schedule, acted on at once.

A provider can stop a whole account, not one campaign: SES puts an account on probation
when its bounce or complaint rate stays high, and shuts it down (or its owner disables
sending) when they do not come down. A sender used to learn of it from the console or from
recipient after recipient failing. A scheduled function reads the account every few
minutes instead (SES: `GetAccount`'s `SendingEnabled` and `EnforcementStatus`) and:

- on probation, pauses nothing: the handler's metric raises an alarm (warning);
- when sending is disabled or the account is shut down, pauses every campaign of that
  provider that is sending, with the reason (the lifecycle's `halt`, as when a send is
  refused for the same cause), and pages on-call;
- records what it saw and since when, and when the account came back: resuming stays the
  operator's call (a halted campaign is resumed by `campaign resume`, never automatically).

A campaign that starts sending while the account is stopped is halted by its first refused
send (SES `SendingPausedException` / `AccountSuspendedException` are *halt* errors).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.deliverability.ports import (
    AccountState,
    HealthRecord,
    HealthRecords,
    ProviderAccount,
    SendingCampaigns,
    Verdict,
)
from sendonce.domain.errors import IllegalTransitionError
from sendonce.domain.models import CampaignState

logger = logging.getLogger(__name__)

# Who pauses a campaign for its account (the campaign's `state_by`).
AUTOMATIC_ACCOUNT = "sendonce (account health)"


def next_record(previous: HealthRecord | None, state: AccountState, now_ms: int) -> HealthRecord:
    """The record after a check that saw `state` at `now_ms`."""
    verdict = state.verdict
    if previous is None:
        return HealthRecord(
            provider=state.provider,
            verdict=verdict,
            reason=state.reason,
            since_ms=now_ms,
            checked_ms=now_ms,
            stopped_at_ms=now_ms if verdict is Verdict.STOPPED else None,
        )
    record = replace(previous, reason=state.reason, checked_ms=now_ms)
    if verdict is previous.verdict:
        return record
    record = replace(record, verdict=verdict, since_ms=now_ms)
    if verdict is Verdict.STOPPED:
        return replace(record, stopped_at_ms=now_ms, back_at_ms=None)
    if previous.verdict is Verdict.STOPPED:
        return replace(record, back_at_ms=now_ms)
    return record


@dataclass(frozen=True)
class HealthCheck:
    """One check: what was read, the campaigns it paused, and the record it left."""

    state: AccountState
    record: HealthRecord
    paused: tuple[str, ...] = ()
    came_back: bool = False  # stopped at the previous check, able to send now

    @property
    def verdict(self) -> Verdict:
        return self.state.verdict

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.state.provider,
            "verdict": self.verdict.value,
            "sending_enabled": self.state.sending_enabled,
            "enforcement": self.state.enforcement,
            "paused": list(self.paused),
            "came_back": self.came_back,
            "record": self.record.as_dict(),
        }


class AccountHealthService:
    def __init__(
        self,
        *,
        account: ProviderAccount,
        records: HealthRecords,
        campaigns: SendingCampaigns,
        clock_ms: Callable[[], int],
    ):
        self._account = account
        self._records = records
        self._campaigns = campaigns
        self._clock_ms = clock_ms

    def check(self) -> HealthCheck:
        """Read the account; when it cannot send, pause every campaign of its provider that
        is sending (a campaign that left `sending` meanwhile is left as it is). Then record
        what was seen. A repeat pauses what started sending since, nothing twice."""
        state = self._account.state()
        now_ms = self._clock_ms()
        previous = self._records.last(state.provider)
        paused: list[str] = []
        if state.verdict is Verdict.STOPPED:
            paused = self._pause_sending(state)
        record = next_record(previous, state, now_ms)
        self._records.record(record)
        came_back = (
            previous is not None and previous.verdict is Verdict.STOPPED and state.verdict is not Verdict.STOPPED
        )
        if came_back:
            logger.warning(
                "account can send again; campaigns it paused wait for an operator's resume",
                extra={"provider": state.provider, "reason": state.reason},
            )
        return HealthCheck(state=state, record=record, paused=tuple(paused), came_back=came_back)

    def _pause_sending(self, state: AccountState) -> list[str]:
        paused = []
        for campaign in self._campaigns.list(CampaignState.SENDING):
            if campaign.provider != state.provider:
                continue
            try:
                lifecycle.apply(
                    self._campaigns, campaign.campaign_id, CampaignEvent.HALT, by=AUTOMATIC_ACCOUNT, reason=state.reason
                )
            except IllegalTransitionError:
                continue  # paused, cancelled or completed since it was listed
            paused.append(campaign.campaign_id)
            logger.error(
                "account cannot send; campaign paused",
                extra={"campaign_id": campaign.campaign_id, "reason": state.reason},
            )
        return paused
