"""The model's send-window rules (family "window"): campaign w1 may send only inside its
window; time jumps across its openings and closings, the consumers (the model's own rules)
pause it when they read it outside, an operator pauses and resumes it, and the openings'
firings arrive (perhaps several times, perhaps for an earlier opening, perhaps after an
operator's pause). Checked: nobody of w1 is accepted while its window is closed, and a
firing resumes exactly the window's own pause for exactly that opening, once.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from sendonce.domain.campaigns.scheduling import Firing
from sendonce.domain.campaigns.windows import PAUSE_REASON_PREFIX, SendWindow
from sendonce.domain.errors import IllegalTransitionError
from sendonce.domain.models import Campaign, CampaignState, Content
from tests.model.edges import LEASE_MS, family, watch_requests

W1_WINDOW = SendWindow.model_validate(
    {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "to": "17:00", "tz": "Europe/Berlin"}
)


def _waits_for(reason: str | None) -> int | None:
    """The opening a window pause waits for, from its reason."""
    if not reason or not reason.startswith(PAUSE_REASON_PREFIX):
        return None
    return int(dt.datetime.fromisoformat(reason.removeprefix(PAUSE_REASON_PREFIX)).timestamp() * 1000)


class WindowRules:
    """Mixed into the model (tests/model/test_delivery_model.py), which provides the rig."""

    clock: Any
    store: Any
    operator: Any
    provider: Any
    provider_name: str
    queue: Any
    consumer: Any
    people: list
    _step: Any

    def _w1(self) -> Campaign:
        if not hasattr(self, "w1_openings"):
            self.w1_openings: list[int] = []  # every opening a window pause of w1 waited for
            self.w1_sent_outside: list[int] = []  # when a request for w1 reached the provider, window closed
            self._watch_w1_requests()
        try:
            return self.store.get("w1")
        except Exception:  # noqa: BLE001 - CampaignNotFoundError: created on first use
            return self.operator.create(
                Campaign(
                    campaign_id="w1",
                    name="windowed",
                    provider=self.provider_name,
                    sender="news@example.com",
                    ledger_shards=2,
                    content=Content(subject="Hi {{ name }}", text="Hello {{ name }}"),
                    window=W1_WINDOW,
                )
            )

    @family("window")
    @rule(size=st.integers(1, 5))
    def w1_publish(self, size):
        self._step("w1_publish")
        self._w1()
        try:
            self.operator.publish("w1", self.people[:size], batch_size=2)
        except IllegalTransitionError:
            pass

    @family("window")
    @rule(to=st.sampled_from(["opening", "closing"]), past=st.sampled_from([0, 1, 60_000]))
    def w1_time_jumps(self, to, past):
        """To the window's next opening or closing (or just past it)."""
        self._step("w1_time")
        now = self.clock()
        closing = W1_WINDOW.closing_after(now)
        target = closing if to == "closing" and closing is not None else W1_WINDOW.next_opening(now)
        if target > now:
            self.clock.advance(target - now)
        self.clock.advance(past)

    @family("window")
    @rule(verb=st.sampled_from(["pause", "resume"]))
    def w1_operator(self, verb):
        self._step(f"w1_{verb}")
        self._w1()
        try:
            getattr(self.operator, verb)("w1", reason=f"operator {verb}")
        except IllegalTransitionError:
            pass

    @family("window")
    @rule(which=st.integers(0, 2), times=st.integers(1, 3))
    def w1_opening_fires(self, which, times):
        """A firing for the opening the pause waits for (which=0) or an earlier one, at or
        after that instant, perhaps several times (EventBridge Scheduler retries)."""
        self._step("w1_fires")
        self._note_w1_opening()
        if not getattr(self, "w1_openings", None):
            return
        instant = self.w1_openings[-1 - which % len(self.w1_openings)]
        if self.clock() < instant:
            self.clock.advance(instant - self.clock())
        campaign = self.store.get("w1")
        expected = campaign.state is CampaignState.PAUSED and campaign.state_reason == W1_WINDOW.pause_reason(instant)
        results = [self.operator.open_window(Firing("w1", instant, window_opening=True)) for _ in range(times)]
        assert [r.started for r in results] == [expected] + [False] * (times - 1), (
            f"w1 {campaign.state.value} ({campaign.state_reason}); firings for {instant}: {[r.reason for r in results]}"
        )
        if not expected:
            assert (self.store.get("w1").state, self.store.get("w1").state_reason) == (
                campaign.state,
                campaign.state_reason,
            ), "a firing that resumed nothing changed the campaign"

    @family("window")
    @rule(operator_pauses=st.booleans(), times=st.integers(1, 2))
    def w1_paused_by_its_window_then_perhaps_by_an_operator(self, operator_pauses, times):
        """w1 sending, its window closes, a consumer reads one of its batches (and pauses it);
        an operator perhaps pauses it too (taking the pause over); then the opening fires."""
        self._step("w1_window_pause")
        if self._w1().state is not CampaignState.SENDING:
            try:
                self.operator.publish("w1", self.people[:2], batch_size=2)
            except IllegalTransitionError:
                return
        if self.store.get("w1").state is not CampaignState.SENDING:
            return
        closing = W1_WINDOW.closing_after(self.clock())
        if closing is not None:
            self.clock.advance(closing - self.clock())
        [body, *_] = [m.body for m in self.queue.messages if '"campaign_id":"w1"' in m.body] or [None]
        if body is None:
            return
        self.consumer.process(body, receive_count=1, remaining_ms=lambda: LEASE_MS)  # SQS may deliver twice
        self._note_w1_opening()
        if operator_pauses:
            self.operator.pause("w1", reason="operator holds it")
        self.w1_opening_fires(which=0, times=times)

    def _note_w1_opening(self) -> None:
        if not hasattr(self, "w1_openings"):
            return
        opening = _waits_for(self.store.get("w1").state_reason) if self._has_w1() else None
        if opening is not None and opening not in self.w1_openings:
            self.w1_openings.append(opening)

    def _has_w1(self) -> bool:
        try:
            self.store.get("w1")
        except Exception:  # noqa: BLE001 - not created yet
            return False
        return True

    def _watch_w1_requests(self) -> None:
        """Note, at the moment of each provider request, whether it asks to send w1 while its
        window is closed (a rule may consume and then move the clock: checked when it happens)."""

        def note(emails: list) -> None:
            if any(e.tags.get("campaign_id") == "w1" for e in emails) and not W1_WINDOW.is_open(self.clock()):
                self.w1_sent_outside.append(self.clock())

        watch_requests(self.provider, note)

    @invariant()
    def nobody_of_w1_is_sent_outside_its_window(self):
        if not hasattr(self, "w1_openings"):
            return
        self._note_w1_opening()
        assert not self.w1_sent_outside, f"w1 sent while its window is closed, at {self.w1_sent_outside}"
