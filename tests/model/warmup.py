"""The model's warm-up rules (family "warmup", issue 32 item 2): campaign u1 sends as
news@warm.example, a domain warming up by WARM_DAILY (2 the first day, 3 the next, then no cap);
the model's consumers (its own rules, with crashes) take its messages with everyone else's,
the day's cap pauses it, time jumps past midnight (UTC), and the next day's opening fires
(perhaps several times, perhaps after an operator's pause or resume).

Checked: no email of u1 is accepted twice (the model's invariants); no day takes more of u1
than its cap; while u1 is sending, nobody of it is pending without a message to bring them
(a cap that stopped a batch without pausing the campaign would leave them behind: mutant
14); and after the fault-free drain, the days opening one after another send everyone.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from sendonce.domain.campaigns.scheduling import Firing
from sendonce.domain.deliverability import warmup
from sendonce.domain.errors import IllegalTransitionError, InvalidCampaignError
from sendonce.domain.models import Campaign, CampaignState, Content, DeliveryState, Recipient
from sendonce.domain.sending.delivery_tables import FINAL
from tests.model.edges import family, watch_requests

WARM_DOMAIN = "warm.example"
WARM_DAILY = (2, 3)
U1_RECIPIENTS = 7


def warm_schedule(start_ms: int) -> warmup.Warmup:
    """The rig's warm-up: WARM_DOMAIN from the day of `start_ms`."""
    return warmup.Warmup({WARM_DOMAIN: warmup.WarmupSchedule(warmup.day_of(start_ms), WARM_DAILY)})


class WarmupRules:
    """Mixed into the model (tests/model/test_delivery_model.py), which provides the rig."""

    clock: Any
    store: Any
    operator: Any
    ledger: Any
    queue: Any
    rig: Any
    provider: Any
    provider_name: str
    mode: str
    _step: Any

    def _u1(self) -> Campaign:
        if not hasattr(self, "u1_published"):
            self.u1_published: set[str] = set()
            self.u1_sent_by_day: Counter[str] = Counter()
            self._watch_u1_requests()
        try:
            return self.store.get("u1")
        except Exception:  # noqa: BLE001 - CampaignNotFoundError: created on first use
            return self.operator.create(
                Campaign(
                    campaign_id="u1",
                    name="warming up",
                    provider=self.provider_name,
                    sender=f"News <news@{WARM_DOMAIN}>",
                    delivery_mode=self.mode,
                    ledger_shards=2,
                    content=Content(subject="Hi {{ name }}", text="Hello {{ name }}"),
                )
            )

    @staticmethod
    def _u1_people(count: int) -> list[Recipient]:
        return [
            Recipient(recipient_id=f"u1r{i}", email=f"u1u{i}@example.com", variables={"name": "U"})
            for i in range(count)
        ]

    def _watch_u1_requests(self) -> None:
        """Count u1's emails the provider is asked for, by the UTC day the request is made in
        (a request the provider refuses counts too: its places were taken). A throttle retry
        within one provider call asks again for the same email object, on the place already
        taken: it is one email, counted once (a deep run counted each ask and failed a day
        whose item said 2 of 2; tests/model/test_warmup_model.py replays it)."""
        asked: dict[int, object] = {}  # id -> email; the email is kept so its id is never reused

        def note(emails: list) -> None:
            fresh = [e for e in emails if e.tags.get("campaign_id") == "u1" and id(e) not in asked]
            asked.update((id(e), e) for e in fresh)
            if fresh:
                self.u1_sent_by_day[warmup.day_of(self.clock()).isoformat()] += len(fresh)

        watch_requests(self.provider, note)

    @family("warmup")
    @rule(size=st.integers(1, U1_RECIPIENTS))
    def u1_publish(self, size):
        self._step("u1_publish")
        self._u1()
        people = self._u1_people(size)
        try:
            self.operator.publish("u1", people, batch_size=2)
        except (IllegalTransitionError, InvalidCampaignError):
            return
        self.u1_published.update(r.recipient_id for r in people)
        self.rig.other_emails.update({r.recipient_id: r.email for r in people})

    @family("warmup")
    @rule(
        past=st.sampled_from([0, 1, 3_600_000]),
        times=st.integers(1, 2),
        operator=st.sampled_from([None, "pause", "resume"]),
    )
    def u1_next_day_opens(self, past, times, operator):
        """Time jumps past the next UTC midnight; perhaps an operator pauses or resumes u1; the
        opening u1's pause waits for fires (EventBridge may deliver it more than once)."""
        self._step("u1_next_day")
        if not hasattr(self, "u1_published"):
            return
        opening = warmup.next_day_ms(self.clock())
        self.clock.advance(opening - self.clock() + past)
        if operator is not None:
            try:
                getattr(self.operator, operator)("u1", reason=f"operator {operator}")
            except (IllegalTransitionError, InvalidCampaignError):
                pass
        self._u1_openings_fire(times)

    def _u1_openings_fire(self, times: int = 1) -> None:
        """Every opening set for u1 so far, each `times` times: only the one its pause waits
        for resumes it, once."""
        for opening in sorted(self.rig.scheduler.openings.get("u1", ())):
            before = self.store.get("u1")
            expected = before.state is CampaignState.PAUSED and warmup.waits_for(before.state_reason, opening)
            results = [self.operator.open_window(Firing("u1", opening, window_opening=True)) for _ in range(times)]
            assert [r.started for r in results] == [expected] + [False] * (times - 1), (
                f"u1 {before.state.value} ({before.state_reason}); firings for {opening}: {[r.reason for r in results]}"
            )

    @invariant()
    def no_day_sends_more_of_u1_than_its_cap(self):
        if not hasattr(self, "u1_published"):
            return
        start = warmup.day_of(self.rig.warmup_start_ms)
        for day, sent in self.u1_sent_by_day.items():
            n = (warmup.dt.date.fromisoformat(day) - start).days
            cap = WARM_DAILY[n] if n < len(WARM_DAILY) else None
            assert cap is None or sent <= cap, f"u1: {sent} emails asked of the provider on {day}, cap {cap}"

    @invariant()
    def nobody_of_u1_is_left_pending_while_it_sends(self):
        if not getattr(self, "u1_published", None):
            return
        if self.store.get("u1").state is not CampaignState.SENDING:
            return
        records = {r.recipient_id: r for r in self.ledger.records("u1")}
        carriers = [*self.queue.messages, *(m for m in self.queue.dlq if m.last_receive_died_unwritten)]
        carried = {r["recipient_id"] for m in carriers if '"campaign_id":"u1"' in m.body for r in _recipients(m)}
        hidden = {
            rid for rid in self.u1_published if rid not in records or records[rid].state is DeliveryState.PENDING
        } - carried
        assert not hidden, f"u1 sending with nobody to bring {sorted(hidden)}"

    def check_warmup_after_drain(self) -> None:
        """After the fault-free drain: the days open one after another (fault-free) until u1
        is no longer waiting for one; then everyone of u1 has ended, unless an operator holds it."""
        if not getattr(self, "u1_published", None):
            return
        for _ in range(len(WARM_DAILY) + 2):
            campaign = self.store.get("u1")
            if not (
                campaign.state is CampaignState.PAUSED
                and (campaign.state_reason or "").startswith(warmup.REASON_PREFIX)
            ):
                break
            self.clock.advance(warmup.next_day_ms(self.clock()) - self.clock())
            self._u1_openings_fire()
            self.rig.drain()
        if self.store.get("u1").state in (CampaignState.PAUSED, CampaignState.DRAFT):
            return
        records = {r.recipient_id: r for r in self.ledger.records("u1")}
        stuck = sorted(rid for rid in self.u1_published if rid not in records or records[rid].state not in FINAL)
        assert not stuck, f"u1 after the days opened and a fault-free drain: {stuck}"


def _recipients(message) -> list[dict]:
    import json

    return json.loads(message.body)["recipients"]
