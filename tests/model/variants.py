"""The model's A/B rules (family "variants", issue 33): campaign v1 tests variants A and B on
half its recipients (each recipient's variant from its id), the rest waiting for the winner.
The model's consumers (its own rules, with crashes, takeovers and lost acknowledgements) take
v1's messages with everyone else's; the winner is picked by hand, by the test's figures, or by
the test's end firing (perhaps twice, perhaps racing an operator's pause, resume or cancel).

Checked after every step: each recipient of v1 is sent at most one email, of one variant,
and that variant is its own — its test variant (from its id) or, for the rest, the recorded
winner, never sent before the winner was recorded; the ledger's recorded variant agrees.
After the fault-free drain, a v1 that is still sending without a winner gets its scheduled
pick, and then everyone of it has ended (mutant 15: the variant chosen from the campaign's
state at send time, not from the recipient).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from sendonce.domain.campaigns.scheduling import Firing
from sendonce.domain.campaigns.variants import AbTest, Variant, VariantFigures, assign
from sendonce.domain.errors import IllegalTransitionError, InvalidCampaignError
from sendonce.domain.models import Campaign, CampaignState, Content, Recipient
from sendonce.domain.sending.delivery_tables import FINAL
from tests.model.edges import family

V1_RECIPIENTS = 8  # v1r0-v1r4 in the test (A, B, A, A, B), v1r5-v1r7 the rest
V1_TEST = AbTest(variants=("A", "B"), share=0.5, pick_by="opens", after_s=3_600)
# The figures the report would hold at the pick: B opens more, or too few to say.
FIGURES = {
    "b_wins": {"A": VariantFigures(sent=3, opened=4), "B": VariantFigures(sent=3, opened=9)},
    "too_few": {"A": VariantFigures(sent=3, opened=1), "B": VariantFigures(sent=3, opened=2)},
}


class VariantRules:
    """Mixed into the model (tests/model/test_delivery_model.py), which provides the rig."""

    clock: Any
    store: Any
    operator: Any
    ledger: Any
    queue: Any
    rig: Any
    provider: Any
    _process: Any
    provider_name: str
    mode: str
    _step: Any

    def _v1(self) -> Campaign:
        if not hasattr(self, "v1_published"):
            self.v1_published: set[str] = set()
            self.v1_decided: str | None = None
        try:
            return self.store.get("v1")
        except Exception:  # noqa: BLE001 - CampaignNotFoundError: created on first use
            return self.operator.create(
                Campaign(
                    campaign_id="v1",
                    name="a/b",
                    provider=self.provider_name,
                    sender="news@example.com",
                    delivery_mode=self.mode,
                    ledger_shards=2,
                    content=Content(
                        subject="Hi {{ name }}",
                        text="Hello {{ name }}",
                        variants=(Variant(id="A", subject="A: hi {{ name }}"), Variant(id="B", subject="B: hi")),
                    ),
                    ab_test=V1_TEST,
                )
            )

    @family("variants")
    @rule(start=st.integers(0, V1_RECIPIENTS - 1), size=st.integers(1, V1_RECIPIENTS))
    def v1_publish(self, start, size):
        self._step("v1_publish")
        self._v1()
        people = [
            Recipient(recipient_id=f"v1r{i}", email=f"v1u{i}@example.com", variables={"name": "V"})
            for i in range(start, min(start + size, V1_RECIPIENTS))
        ]
        try:
            self.operator.publish("v1", people, batch_size=2)
        except (IllegalTransitionError, InvalidCampaignError):
            return
        self.v1_published.update(r.recipient_id for r in people)
        self.rig.other_emails.update({r.recipient_id: r.email for r in people})

    @family("variants")
    @rule(
        how=st.sampled_from(["A", "B", "b_wins", "too_few", "schedule"]),
        times=st.integers(1, 2),
        operator=st.sampled_from([None, "pause", "resume", "cancel"]),
        before=st.booleans(),
        consume=st.integers(0, 3),
    )
    def v1_pick(self, how, times, operator, before, consume=0):
        """The winner: by hand, by the figures, or the test's end firing (EventBridge may
        deliver it twice); an operator's pause, resume or cancel just before or after it; then
        `consume` messages taken at once (a bundle: the sends right after a pick, where a
        variant read from the campaign's state would show, are common, not rare)."""
        self._step("v1_pick")
        if not hasattr(self, "v1_published"):
            return
        if before and operator:
            self._v1_operator(operator)
        if how in FIGURES:
            self.rig.variant_figures["v1"] = FIGURES[how]
        for _ in range(times):
            try:
                if how == "schedule":
                    self.clock.advance(V1_TEST.after_s * 1000)
                    self.operator.pick_on_schedule(Firing("v1", self.clock(), variant_pick=True))
                else:
                    self.operator.pick("v1", how if how in V1_TEST.variants else None)
            except IllegalTransitionError:
                assert self.store.get("v1").state in (CampaignState.DRAFT, CampaignState.CANCELLED)
        decision = self.store.get("v1").decision
        if decision is not None:
            assert self.v1_decided in (None, decision.variant), f"v1's winner moved: {self.v1_decided} -> {decision}"
            self.v1_decided = decision.variant
        if not before and operator:
            self._v1_operator(operator)
        for _ in range(consume):
            message = self.queue.receive(0)
            if message is not None:
                self._process(message)

    def _v1_operator(self, action: str) -> None:
        try:
            getattr(self.operator, action)("v1", reason=f"operator {action}")
        except (IllegalTransitionError, InvalidCampaignError):
            pass

    def _v1_expected(self, recipient_id: str) -> str | None:
        """The variant the recipient must get: its test variant, or the winner (None: none yet)."""
        return assign("v1", recipient_id, V1_TEST) or self.v1_decided

    @invariant()
    def each_of_v1_gets_one_email_of_its_own_variant(self):
        if not getattr(self, "v1_published", None):
            return
        decision = self.store.get("v1").decision
        decided = decision.variant if decision is not None else None
        assert decided == self.v1_decided or self.v1_decided is None, (
            f"v1's winner moved: {self.v1_decided} -> {decided}"
        )
        for (campaign, rid), variants in self.provider.accepted_variants.items():
            if campaign != "v1":
                continue
            assert len(variants) <= 1, f"v1: {rid} was sent {len(variants)} emails: {variants}"
            expected = assign("v1", rid, V1_TEST) or decided
            assert expected is not None, f"v1: {rid} of the rest was sent {variants} before the winner was recorded"
            assert variants == [expected], f"v1: {rid} was sent variant {variants}, its own is {expected}"
        for record in self.ledger.records("v1"):
            if record.variant is not None:
                expected = assign("v1", record.recipient_id, V1_TEST) or decided
                assert record.variant == expected, f"v1: the ledger records {record.variant} for {record.recipient_id}"

    def check_variants_after_drain(self) -> None:
        """After the fault-free drain: a v1 still sending without a winner gets the test's end
        (fault-free); then everyone of it has ended, each with its own variant."""
        if not getattr(self, "v1_published", None):
            return
        campaign = self.store.get("v1")
        if campaign.decision is None and campaign.state is CampaignState.SENDING:
            self.clock.advance(V1_TEST.after_s * 1000)
            self.operator.pick_on_schedule(Firing("v1", self.clock(), variant_pick=True))
            self.v1_decided = self.store.get("v1").decision.variant
            self.rig.drain()
        self.each_of_v1_gets_one_email_of_its_own_variant()
        campaign = self.store.get("v1")
        if campaign.state in (CampaignState.PAUSED, CampaignState.DRAFT):
            return
        records = {r.recipient_id: r for r in self.ledger.records("v1")}
        stuck = sorted(rid for rid in self.v1_published if rid not in records or records[rid].state not in FINAL)
        assert not stuck, f"v1 ({campaign.state.value}) after its pick and a fault-free drain: {stuck}"
