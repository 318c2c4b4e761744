"""The model's many-campaigns rules (family "sharing", issue 31): beside c1, a large campaign
n1 and a small one n2 share the queue and the consumers. n1's batches are published first,
then n2's behind them; the model's consumers (its own rules, in any order, with crashes) take
any campaign's messages; an operator pauses, resumes and cancels either.

Checked: no email of n1 or n2 is accepted twice (with c1's, by the model's invariants); after
the fault-free drain every recipient of a campaign that is not paused has ended; and
liveness — during the drain, a campaign with messages waiting is served within
2 x (campaigns waiting) + 1 receives, not counting those the fair queue's measures gave a
tenant it ranks first (QueueModel.receive_fair, `starved`). The drain receives
as a fair queue does, from the groups the publisher put on the messages
(sqs_queue.batch_entries): with the groups reverted (mutant 13) every message is a tenant of
its own and n2 waits behind all of n1's batches.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import rule

from sendonce.domain.errors import IllegalTransitionError, InvalidCampaignError
from sendonce.domain.models import Campaign, CampaignState, Content, Recipient
from sendonce.domain.sending.delivery_tables import FINAL
from tests.model.edges import family

SHARING = ("n1", "n2")
N1_RECIPIENTS = 24  # 12 batches of 2: more than the liveness bound of any drain
BATCH = 2


class SharingRules:
    """Mixed into the model (tests/model/test_delivery_model.py), which provides the rig."""

    store: Any
    operator: Any
    ledger: Any
    queue: Any
    rig: Any
    provider_name: str
    mode: str
    _step: Any

    def _sharing(self, campaign_id: str) -> Campaign:
        if not hasattr(self, "shared_published"):
            self.shared_published: dict[str, set[str]] = {c: set() for c in SHARING}
        try:
            return self.store.get(campaign_id)
        except Exception:  # noqa: BLE001 - CampaignNotFoundError: created on first use
            return self.operator.create(
                Campaign(
                    campaign_id=campaign_id,
                    name=f"sharing {campaign_id}",
                    provider=self.provider_name,
                    sender="news@example.com",
                    delivery_mode=self.mode,
                    ledger_shards=2,
                    content=Content(subject="Hi {{ name }}", text="Hello {{ name }}"),
                )
            )

    @staticmethod
    def _people(campaign_id: str, count: int) -> list[Recipient]:
        return [
            Recipient(
                recipient_id=f"{campaign_id}r{i}", email=f"{campaign_id}u{i}@example.com", variables={"name": "N"}
            )
            for i in range(count)
        ]

    @family("sharing")
    @rule(small=st.integers(1, 4))
    def a_small_campaign_published_behind_a_large_one(self, small):
        self._step("sharing_publish")
        for campaign_id, size in (("n1", N1_RECIPIENTS), ("n2", small)):
            self._sharing(campaign_id)
            try:
                self.operator.publish(campaign_id, self._people(campaign_id, size), batch_size=BATCH)
            except (IllegalTransitionError, InvalidCampaignError):
                continue
            people = self._people(campaign_id, size)
            self.shared_published[campaign_id].update(r.recipient_id for r in people)
            self.rig.other_emails.update({r.recipient_id: r.email for r in people})

    @family("sharing")
    @rule(which=st.sampled_from(SHARING), verb=st.sampled_from(["pause", "resume", "cancel"]))
    def sharing_operator(self, which, verb):
        self._step(f"sharing_{verb}")
        if not getattr(self, "shared_published", {}).get(which):
            return
        try:
            getattr(self.operator, verb)(which)
        except (IllegalTransitionError, InvalidCampaignError):
            pass

    def check_sharing_after_drain(self) -> None:
        """After the fault-free drain: no campaign starved while it had messages waiting, and
        every recipient of n1 and n2 ended unless their campaign is paused."""
        assert not self.queue.starved, f"a campaign waited past the bound during the drain: {self.queue.starved[:3]}"
        for campaign_id, published in getattr(self, "shared_published", {}).items():
            if not published or self.store.get(campaign_id).state in (CampaignState.PAUSED, CampaignState.DRAFT):
                continue
            records = {r.recipient_id: r for r in self.ledger.records(campaign_id)}
            stuck = sorted(rid for rid in published if rid not in records or records[rid].state not in FINAL)
            assert not stuck, f"{campaign_id} after a fault-free drain: {stuck}"
