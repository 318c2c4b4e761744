"""What the operator sees of campaigns sharing a provider's rate (domain/sending/sending_now.py),
from a window of the limiter's slot items held in memory: rates, shares, the share the
sharing rules give, dwell and ETA, each figure worked out by hand in the test."""

from __future__ import annotations

import pytest

from sendonce.adapters.dynamodb.limiter_slots import slot_usage
from sendonce.domain.campaigns.status import DeliveryStatus
from sendonce.domain.errors import CampaignNotFoundError
from sendonce.domain.models import Campaign, CampaignState
from sendonce.domain.sending.sending_now import SendingNow, SlotUsage
from sendonce.domain.sending.shares import Claimant

NOW = 1_000_100.5  # the current second is 1_000_100: a 10 s window is 1_000_090..1_000_099


class FakeSlots:
    def __init__(self, slots: dict[str, list[SlotUsage]], rates: dict[str, float]):
        self._slots = slots
        self._rates = rates
        self.reads: list[tuple[str, int, int]] = []
        self.rates_read: list[str] = []

    def read(self, provider: str, *, first: int, last: int) -> list[SlotUsage]:
        self.reads.append((provider, first, last))
        return [s for s in self._slots.get(provider, []) if first <= s.slot <= last]

    def rate(self, provider: str) -> float | None:
        self.rates_read.append(provider)
        return self._rates.get(provider)


class FakeCampaigns:
    def __init__(self, campaigns: dict[str, tuple[Campaign, DeliveryStatus]]):
        self._campaigns = campaigns

    def get(self, campaign_id: str) -> Campaign:
        if campaign_id not in self._campaigns:
            raise CampaignNotFoundError(campaign_id)
        return self._campaigns[campaign_id][0]

    def status(self, campaign_id: str) -> DeliveryStatus:
        if campaign_id not in self._campaigns:
            raise CampaignNotFoundError(campaign_id)
        return self._campaigns[campaign_id][1]


def campaign(campaign_id: str, *, mode: str = "single", provider: str = "resend") -> Campaign:
    return Campaign(
        campaign_id=campaign_id,
        name=campaign_id,
        provider=provider,
        sender="news@example.com",
        delivery_mode=mode,
        state=CampaignState.SENDING,
    )


def status(campaign_id: str, *, pending: int, in_progress: int, dead_lettered: int = 0) -> DeliveryStatus:
    return DeliveryStatus(
        campaign_id=campaign_id,
        state=CampaignState.SENDING,
        total=pending + in_progress + dead_lettered + 50,
        pending=pending,
        in_progress=in_progress,
        sent=50,
        failed=0,
        suppressed=0,
        unknown=0,
        cancelled=0,
        dead_lettered=dead_lettered,
    )


def slot(second: int, used: int, places=None, claimants=(), dwell=None) -> SlotUsage:
    return SlotUsage(
        slot=second,
        used=used,
        places=dict(places or {}),
        claimants={c.campaign_id: c for c in claimants},
        dwell_ms=dict(dwell or {}),
    )


A = Claimant("a", weight=2)
B = Claimant("b", weight=1, max_rate=5)


def two_campaigns() -> list[SlotUsage]:
    """Ten seconds at 10 places each: a takes 6, b takes 3, an audit's listing 1."""
    slots = [slot(1_000_090 + k, 10, {"a": 6, "b": 3}, (A, B)) for k in range(10)]
    slots[1] = slot(1_000_091, 10, {"a": 6, "b": 3}, (A, B), {"a": 5_000})
    slots[5] = slot(1_000_095, 10, {"a": 6, "b": 3}, (A, B), {"b": 800})
    slots[9] = slot(1_000_099, 10, {"a": 6, "b": 3}, (A, B), {"a": 1_200})
    # Outside the window: the second before it, and the current one (still filling).
    return [slot(1_000_089, 50, {"a": 50}, (A,)), *slots, slot(1_000_100, 9, {"b": 9}, (B,))]


def service(slots, rates, campaigns, batch_sizes=None) -> SendingNow:
    return SendingNow(
        slots=slots,
        campaigns=FakeCampaigns(campaigns),
        batch_sizes=batch_sizes or {"ses": 1, "resend": 100},
        clock=lambda: NOW,
    )


def test_two_campaigns_rates_shares_dwell_and_eta_over_the_windows_whole_seconds():
    # Given a (single mode, 120 to send, 5 dead-lettered) and b (batch mode on Resend, 2,100 to send)
    slots = FakeSlots({"resend": two_campaigns()}, {"resend": 9.0})
    now = service(
        slots,
        {"resend": 9.0},
        {
            "a": (campaign("a"), status("a", pending=100, in_progress=20, dead_lettered=5)),
            "b": (campaign("b", mode="batch"), status("b", pending=2_000, in_progress=100)),
        },
    )

    # When the last 10 seconds are read
    [resend] = now.providers(window_s=10)

    # Then one Query per registered provider over 1_000_090..1_000_099, one rate read where someone sent
    assert slots.reads == [("ses", 1_000_090, 1_000_099), ("resend", 1_000_090, 1_000_099)]
    assert slots.rates_read == ["resend"]
    assert (resend.provider, resend.places, resend.rate, resend.rate_in_force) == ("resend", 100, 10.0, 9.0)
    a, b = resend.campaigns  # most places first
    # a: 60 places in 10 s; 60 of the 100 places; weights 2:1 of 9/s give it 6/s;
    # its latest dwell 1.2 s; 120 to send (dead-lettered ones wait for a redrive) at 6 a second
    assert (a.campaign_id, a.places, a.rate, a.share, a.assigned_rate) == ("a", 60, 6.0, 0.6, 6.0)
    assert (a.dwell_s, a.seen_s_ago, a.to_send, a.recipients_per_request, a.eta_s) == (1.2, 1, 120, 1, 20.0)
    # b: 30 places, 3/s, 30 %, given 3/s (under its cap of 5); a batch carries up to 100:
    # 2,100 / (3 x 100) = 7 s
    assert (b.campaign_id, b.places, b.rate, b.share, b.assigned_rate) == ("b", 30, 3.0, 0.3, 3.0)
    assert (b.dwell_s, b.to_send, b.recipients_per_request, b.eta_s) == (0.8, 2_100, 100, 7.0)
    assert b.as_dict() == {
        "campaign_id": "b",
        "provider": "resend",
        "weight": 1,
        "priority": "normal",
        "max_rate": 5.0,
        "window_s": 10,
        "places": 30,
        "rate": 3.0,
        "share": 0.3,
        "assigned_rate": 3.0,
        "dwell_s": 0.8,
        "seen_s_ago": 1,
        "to_send": 2_100,
        "recipients_per_request": 100,
        "eta_s": 7.0,
    }


def test_a_campaign_present_without_a_place_has_no_rate_and_no_eta_but_counts_in_the_division():
    c = Claimant("c")  # weight 1: a, b, c at weights 2, 1, 1 of 9/s
    slots = two_campaigns()[1:-1]
    slots[8] = slot(1_000_098, 10, {"a": 6, "b": 3}, (A, B, c))
    now = service(
        FakeSlots({"resend": slots}, {"resend": 9.0}),
        {"resend": 9.0},
        {
            "a": (campaign("a"), status("a", pending=10, in_progress=0)),
            "b": (campaign("b"), status("b", pending=10, in_progress=0)),
            "c": (campaign("c"), status("c", pending=10, in_progress=0)),
        },
    )

    [resend] = now.providers(window_s=10)

    shown = {s.campaign_id: s for s in resend.campaigns}
    assert [s.campaign_id for s in resend.campaigns] == ["a", "b", "c"]
    assert (shown["c"].places, shown["c"].rate, shown["c"].share, shown["c"].eta_s) == (0, 0.0, 0.0, None)
    assert (shown["c"].seen_s_ago, shown["c"].to_send) == (2, 10)
    assert {k: s.assigned_rate for k, s in shown.items()} == {"a": 4.5, "b": 2.25, "c": 2.25}


def test_a_high_priority_campaign_is_given_all_but_the_normal_floor_and_the_latest_claimant_counts():
    # h said weight 1 normal, then high: the latest slot's word is what shows
    early, late = Claimant("h"), Claimant("h", priority="high")
    n = Claimant("n")
    slots = [slot(1_000_095, 4, {"h": 2, "n": 2}, (early, n)), slot(1_000_099, 10, {"h": 9, "n": 1}, (late, n))]
    now = service(FakeSlots({"ses": slots}, {"ses": 10.0}), {"ses": 10.0}, {})

    [ses] = now.providers(window_s=10)

    h, n_ = ses.campaigns
    assert (h.campaign_id, h.claimant.priority, h.places, h.share, h.assigned_rate) == ("h", "high", 11, 11 / 14, 9.0)
    assert (n_.campaign_id, n_.places, n_.share, n_.assigned_rate) == ("n", 3, 3 / 14, pytest.approx(1.0))
    assert (h.rate, h.dwell_s) == (1.1, None)
    # Neither campaign is found (another deployment's, on the same table): no ETA, still listed
    assert (h.to_send, h.eta_s) == (None, None)


def test_one_campaigns_view_reads_only_its_provider_and_says_when_it_is_not_sending():
    slots = FakeSlots({"resend": two_campaigns()}, {"resend": 9.0})
    now = service(slots, {"resend": 9.0}, {})
    a_status = status("a", pending=0, in_progress=0)

    shown = now.campaign(campaign("a"), a_status, window_s=10)
    absent = now.campaign(campaign("z"), status("z", pending=5, in_progress=0), window_s=10)
    on_ses = now.campaign(campaign("a", provider="ses"), a_status, window_s=10)

    assert shown is not None and (shown.rate, shown.share, shown.assigned_rate) == (6.0, 0.6, 6.0)
    assert (shown.to_send, shown.eta_s) == (0, 0.0)  # nothing left: done now
    assert absent is None and on_ses is None
    assert [r[0] for r in slots.reads] == ["resend", "resend", "ses"]
    assert slots.rates_read == ["resend"]  # no rate read for a campaign that is not there


def test_the_window_is_the_whole_seconds_before_now_and_is_bounded():
    slots = FakeSlots({"resend": two_campaigns()}, {"resend": 9.0})
    now = service(slots, {"resend": 9.0}, {})

    [one] = now.providers(window_s=1)

    assert slots.reads[-1] == ("resend", 1_000_099, 1_000_099)
    assert [(c.campaign_id, c.rate, c.dwell_s) for c in one.campaigns] == [("a", 6.0, 1.2), ("b", 3.0, None)]
    for bad in (0, 3601):
        with pytest.raises(ValueError, match="window must be 1..3600 seconds"):
            now.providers(window_s=bad)


def test_a_batch_request_carries_at_most_one_sqs_message_and_single_mode_one_recipient():
    slots = [slot(1_000_099, 4, {"x": 2, "y": 2}, (Claimant("x"), Claimant("y")))]
    now = service(
        FakeSlots({"big": slots}, {"big": 4.0}),
        {"big": 4.0},
        {
            "x": (campaign("x", mode="batch", provider="big"), status("x", pending=1_000, in_progress=0)),
            "y": (campaign("y", provider="big"), status("y", pending=1_000, in_progress=0)),
        },
        batch_sizes={"big": 500},
    )

    [big] = now.providers(window_s=10)

    x, y = big.campaigns
    assert (x.rate, x.recipients_per_request, x.eta_s) == (0.2, 100, 50.0)  # 1,000 / (0.2 x 100)
    assert (y.rate, y.recipients_per_request, y.eta_s) == (0.2, 1, 5_000.0)


def test_a_slot_item_reads_as_places_claimants_and_dwell_per_campaign():
    item = {
        "pk": {"S": "limiter#resend"},
        "sk": {"S": "slot#1000000099"},
        "used": {"N": "7"},
        "expires_at": {"N": "1000003699"},
        "n#spring": {"N": "4"},
        "w#spring": {"S": "3:high:2.5"},
        "d#spring": {"N": "1500"},
        "n#autumn": {"N": "2"},
        "w#autumn": {"S": "1:normal:"},
        "w#late": {"S": "2:normal:"},  # present, without a place
    }

    usage = slot_usage(item)

    assert usage == SlotUsage(
        slot=1_000_000_099,
        used=7,
        places={"spring": 4, "autumn": 2},
        claimants={
            "spring": Claimant("spring", weight=3, priority="high", max_rate=2.5),
            "autumn": Claimant("autumn"),
            "late": Claimant("late", weight=2),
        },
        dwell_ms={"spring": 1_500},
    )
