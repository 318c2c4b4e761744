"""An A/B campaign's figures per variant (issue 33): counted in the report's increments as the
ledger's stream shows sends, read back as each variant's figures and the rest's, and shown
by the status and the report beside the decision (or that the winner is awaited)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from sendonce.adapters.dynamodb.stream_records import change_of
from sendonce.domain.campaigns.ab_results import ab_results, variant_figures_of
from sendonce.domain.campaigns.counters import CounterAggregator, DeliveryChange, StreamPosition
from sendonce.domain.campaigns.report import build_report
from sendonce.domain.campaigns.report_data import (
    REST,
    LedgerChange,
    ReportAggregates,
    group_count,
    group_count_of,
    increments_of,
    variant_count,
    variant_count_of,
    variant_key,
)
from sendonce.domain.campaigns.service import CampaignService, DeliveryStatus
from sendonce.domain.campaigns.variants import (
    VARIANT_ID_PATTERN,
    AbTest,
    Decision,
    Variant,
    VariantFigures,
    assign,
    decide,
)
from sendonce.domain.models import Campaign, CampaignState, Content, DeliveryState
from tests.fakes import FakeCampaignStore, FakeCounters, FakeLedger, FakeQueue

T0 = 1_764_633_600_000
TEST = AbTest(variants=("A", "B"), share=0.5, pick_by="opens", after_s=3_600)
S = DeliveryState


def ab_campaign(campaign_id: str = "ab", decision: Decision | None = None) -> Campaign:
    return Campaign(
        campaign_id=campaign_id,
        name="a/b",
        provider="ses",
        sender="news@example.com",
        content=Content(
            subject="Hi",
            text="Hello",
            variants=(Variant(id="A", subject="A: hi"), Variant(id="B", subject="B: hi")),
        ),
        ab_test=TEST,
        decision=decision,
        state=CampaignState.SENDING,
    )


def in_test(campaign_id: str, variant: str | None, n: int = 1) -> list[str]:
    """The first `n` recipient ids of the campaign whose test variant is `variant` (None: the rest)."""
    found = [r for r in (f"r{i}" for i in range(1000)) if assign(campaign_id, r, TEST) == variant]
    return found[:n]


# --- the names the counts are kept under --------------------------------------------------


def test_a_variant_count_name_reads_back_and_no_other_name_is_taken_for_one():
    assert variant_count_of(variant_count("A", "sent")) == ("A", "sent")
    assert variant_count_of(variant_count("with:colon", "opened")) == ("with:colon", "opened")
    assert variant_count_of(variant_count(REST, "clicked")) == (REST, "clicked")
    for name in ("sent", "opened", group_count("google", "sent"), "v:A:held", "v::sent", "prevented"):
        assert variant_count_of(name) is None
    assert group_count_of(variant_count("A", "sent")) is None
    assert not re.match(VARIANT_ID_PATTERN, REST)  # the rest's key is never a variant's id


def test_a_recipient_counts_under_its_test_variant_and_one_of_the_rest_under_rest():
    [a], [b], [rest] = in_test("ab", "A"), in_test("ab", "B"), in_test("ab", None)

    assert variant_key("ab", a, TEST) == "A" and variant_key("ab", a, TEST, "A") == "A"
    assert variant_key("ab", b, TEST, "B") == "B"
    assert variant_key("ab", rest, TEST) == REST
    assert variant_key("ab", rest, TEST, "B") == REST  # it was sent the winner
    # A claim that recorded another variant than the recipient's own is no test email of either.
    assert variant_key("ab", a, TEST, "B") == REST


# --- counted as the stream shows sends ----------------------------------------------------


def test_a_send_counts_for_its_variant_once_in_the_minute_it_ended_and_nothing_else_does():
    changes = [
        LedgerChange(None, "claimed", T0, variant="A"),
        LedgerChange("claimed", "sent", T0 + 1_000, variant="A"),
        LedgerChange("sent", "sent", T0 + 2_000, new_events=(("delivered", "a.example"),), variant="A"),
        LedgerChange("claimed", "unknown", T0 + 3_000, variant="B"),
        LedgerChange("unknown", "sent", T0 + 61_000, variant="B"),  # settled: sent after all
        LedgerChange("claimed", "failed", T0 + 4_000, variant="B"),
        LedgerChange("claimed", "sent", T0 + 5_000, variant=REST),
        LedgerChange("claimed", "sent", T0 + 6_000),  # no A/B test
    ]

    increments = increments_of(changes)

    by_variant = {
        (m, variant_count_of(name)): n for (m, name), n in increments.outcomes.items() if variant_count_of(name)
    }
    assert by_variant == {
        (T0, ("A", "sent")): 1,
        (T0 + 60_000, ("B", "sent")): 1,
        (T0, (REST, "sent")): 1,
    }
    assert increments.outcomes[(T0, "sent")] == 3  # the totals as before


def test_the_stream_record_of_a_delivery_carries_its_recipient_and_the_variant_its_claim_recorded():
    record = {
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"campaign_id": {"S": "ab#3"}, "recipient_id": {"S": "r9"}},
            "SequenceNumber": "12",
            "OldImage": {"state": {"S": "claimed"}, "variant": {"S": "B"}},
            "NewImage": {"state": {"S": "sent"}, "variant": {"S": "B"}},
        },
    }

    change = change_of(record)

    assert change is not None and (change.recipient_id, change.variant) == ("r9", "B")
    del record["dynamodb"]["NewImage"]["variant"], record["dynamodb"]["OldImage"]["variant"]
    assert change_of(record).variant is None


class CountingStore(FakeCampaignStore):
    def __init__(self):
        super().__init__()
        self.reads: list[str] = []

    def get(self, campaign_id: str) -> Campaign:
        self.reads.append(campaign_id)
        return super().get(campaign_id)


def sent(seq: int, campaign_id: str, recipient_id: str, variant: str | None) -> DeliveryChange:
    return DeliveryChange(
        campaign_id=campaign_id,
        position=StreamPosition("ledger", f"{campaign_id}#{seq % 2}", seq),
        old=S.CLAIMED,
        new=S.SENT,
        at_ms=T0,
        recipient_id=recipient_id,
        variant=variant,
    )


def test_the_aggregator_counts_test_emails_per_variant_and_the_rest_apart_reading_each_test_once():
    # Given an A/B campaign and a plain one, each counted, each with a batch open (not complete)
    campaigns, counters = CountingStore(), FakeCounters()
    campaigns.create(ab_campaign("ab").model_copy(update={"open_batches": 1}))
    campaigns.create(
        ab_campaign("plain").model_copy(
            update={"ab_test": None, "content": Content(subject="s", text="t"), "open_batches": 1}
        )
    )
    for campaign_id in ("ab", "plain"):
        counters.count_from_creation(campaign_id)
    aggregator = CounterAggregator(counters=counters, campaigns=campaigns, clock_ms=lambda: T0)
    a, b, rest = in_test("ab", "A", 3), in_test("ab", "B", 2), in_test("ab", None, 4)

    # When their sends come through the stream, in two batches
    changes = [sent(i, "ab", r, "A") for i, r in enumerate(a, 1)]
    changes += [sent(i, "ab", r, "B") for i, r in enumerate(b, 10)]
    changes += [sent(i, "ab", r, "B") for i, r in enumerate(rest, 20)]  # the winner, B, to the rest
    aggregator.apply(changes[:4])
    aggregator.apply(changes[4:] + [sent(1, "plain", "r1", None)])

    # Then each test variant counts its test emails, the rest theirs apart
    totals: dict[tuple[str, str], int] = {}
    for campaign_id, reports in counters.reports.items():
        for report in reports:
            for (_, name), n in report.outcomes.items():
                if variant_count_of(name):
                    totals[(campaign_id, name)] = totals.get((campaign_id, name), 0) + n
    assert totals == {
        ("ab", variant_count("A", "sent")): 3,
        ("ab", variant_count("B", "sent")): 2,
        ("ab", variant_count(REST, "sent")): 4,
    }
    # The A/B test is read once per process; a delivery without a variant reads none. (Beside
    # it, each batch reads each campaign it applied once, to see whether it completed.)
    assert (campaigns.reads.count("ab"), campaigns.reads.count("plain")) == (1 + 2, 0 + 1)


# --- shown ---------------------------------------------------------------------------------


class FakeAggregates:
    def __init__(self, aggregates: dict[str, ReportAggregates]):
        self._aggregates = aggregates
        self.reads: list[str] = []

    def aggregates(self, campaign_id: str) -> ReportAggregates:
        self.reads.append(campaign_id)
        return self._aggregates.get(campaign_id, ReportAggregates())

    def add_counts(self, campaign_id, *, at_ms, counts, writer) -> None:  # pragma: no cover - not read here
        raise AssertionError("not written here")


FIGURES = {
    "A": VariantFigures(sent=40, opened=10, clicked=2),
    "B": VariantFigures(sent=40, opened=16, clicked=1),
    REST: VariantFigures(sent=120, opened=50, clicked=4),
}


def test_the_figures_function_reads_the_aggregates_and_the_pick_reads_the_test_variants_only():
    store = FakeAggregates({"ab": ReportAggregates(variants=FIGURES)})
    figures_of = variant_figures_of(store)

    figures = figures_of(ab_campaign())

    assert figures == FIGURES and store.reads == ["ab"]
    decision = decide(TEST, figures, by="test", at_ms=T0)
    assert decision.variant == "B" and set(decision.figures) == {"A", "B"}


def test_results_give_each_variant_its_rates_in_the_tests_order_the_rest_and_the_decision():
    results = ab_results(ab_campaign(), {"B": FIGURES["B"], "A": FIGURES["A"], REST: FIGURES[REST]})

    assert results is not None and results.awaiting_winner
    assert [v.variant for v in results.variants] == ["A", "B"]
    assert results.variants[0].open_rate == 0.25 and results.variants[1].click_rate == 1 / 40
    assert results.rest.figures == FIGURES[REST]
    assert results.as_dict()["variants"]["B"] == {
        "sent": 40,
        "opened": 16,
        "clicked": 1,
        "open_rate": 0.4,
        "click_rate": 0.025,
    }
    assert results.as_dict()["decision"] is None and results.as_dict()["awaiting_winner"] is True

    decided = Decision(variant="B", by="operator", at_ms=T0, reason="picked by hand")
    after = ab_results(ab_campaign(decision=decided), {})
    assert after is not None and not after.awaiting_winner and after.as_dict()["decision"]["variant"] == "B"
    assert after.variants[0].open_rate is None  # nothing sent: no rate
    assert ab_results(SimpleNamespace(campaign_id="plain", ab_test=None), FIGURES) is None


def service_with(store: FakeAggregates | None) -> tuple[CampaignService, FakeCampaignStore]:
    campaigns = FakeCampaignStore()
    campaigns.create(ab_campaign("ab"))
    campaigns.create(
        ab_campaign("plain").model_copy(update={"ab_test": None, "content": Content(subject="s", text="t")})
    )
    service = CampaignService(
        campaigns=campaigns,
        ledger=FakeLedger(),
        queue=FakeQueue(),
        provider_names=["ses"],
        counters=FakeCounters(),
        variant_figures=variant_figures_of(store) if store is not None else None,
    )
    return service, campaigns


def test_the_status_of_an_ab_campaign_gives_its_variants_figures_from_one_read_of_the_aggregates():
    store = FakeAggregates({"ab": ReportAggregates(variants=FIGURES)})
    service, campaigns = service_with(store)

    results = service.ab_results("ab")

    assert results is not None and results.counted and results.awaiting_winner
    assert {v.variant: v.figures for v in results.variants} == {"A": FIGURES["A"], "B": FIGURES["B"]}
    assert store.reads == ["ab"]
    # A campaign without a test reads no aggregates.
    assert service.ab_results("plain") is None and store.reads == ["ab"]
    # Picked: the decision that stands.
    campaigns.record_decision("ab", Decision(variant="A", by="operator", at_ms=T0, reason="by hand"))
    assert service.ab_results("ab").decision.variant == "A"


def test_without_figures_kept_the_status_says_so_and_still_gives_the_decision():
    service, _ = service_with(None)

    results = service.ab_results("ab")

    assert results is not None and not results.counted and results.variants[0].figures == VariantFigures()


@pytest.mark.parametrize("decision", [None, Decision(variant="B", by="schedule", at_ms=T0, reason="highest rate")])
def test_the_report_of_an_ab_campaign_carries_its_variants_and_the_decision(decision):
    status = DeliveryStatus(
        campaign_id="ab",
        state=CampaignState.SENDING,
        total=200,
        pending=0,
        in_progress=0,
        sent=200,
        failed=0,
        suppressed=0,
        unknown=0,
        cancelled=0,
        dead_lettered=0,
    )
    report = build_report(
        campaign=ab_campaign(decision=decision),
        status=status,
        aggregates=ReportAggregates(variants=FIGURES),
        now_ms=T0,
    )

    assert report.variants is not None and report.variants.decision == decision
    assert [v.figures for v in report.variants.variants] == [FIGURES["A"], FIGURES["B"]]
    assert report.variants.rest.figures == FIGURES[REST]
    plain = build_report(
        campaign=SimpleNamespace(
            campaign_id="p", name="p", subject="s", provider="ses", delivery_mode="single", tracking=None
        ),
        status=status,
        aggregates=ReportAggregates(),
        now_ms=T0,
    )
    assert plain.variants is None
