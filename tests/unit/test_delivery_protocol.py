"""The delivery protocol's tables: complete, as documented, and with the window counted from the first attempt."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from sendonce.domain.campaigns import lifecycle as campaign_lifecycle
from sendonce.domain.models import DeliveryRecord, DeliveryState
from sendonce.domain.sending import delivery_tables
from sendonce.domain.sending.delivery_tables import (
    IDEMPOTENCY_WINDOW_MS,
    Event,
    Facts,
    Group,
    Lease,
    MaybeSent,
    Verdict,
    classify,
)

NOW = 1_800_000_000_000
DOCS = Path(__file__).resolve().parents[2] / "docs"
S = DeliveryState


def rec(state, **kw) -> DeliveryRecord:
    return DeliveryRecord(campaign_id="c", recipient_id="r", state=state, payload_hash="h", **kw)


def every_facts():
    states = [None, *DeliveryState]
    for state, same, lease, maybe, group, keyed in itertools.product(
        states, (True, False), Lease, MaybeSent, Group, (True, False)
    ):
        if state is None and (
            not same or lease is not Lease.NONE or maybe is not MaybeSent.NO or group is not Group.NONE
        ):
            continue
        if (state in delivery_tables.HELD) != (lease is not Lease.NONE):
            continue
        if group is Group.OTHER and maybe is MaybeSent.NO:
            continue
        yield Facts(state=state, same_payload=same, lease=lease, maybe_sent=maybe, group=group, keyed=keyed)


def test_every_combination_of_facts_has_a_rule():
    combos = list(every_facts())
    assert len(combos) > 200
    for f in combos:
        delivery_tables.rule_for(f)  # raises on a hole in the table


def test_every_rule_is_reachable():
    used = {id(delivery_tables.rule_for(f)) for f in every_facts()}
    assert [r.why for r in delivery_tables.CLAIM_RULES if id(r) not in used] == []


@pytest.mark.parametrize(
    "record, keyed, expected",
    [
        (None, False, Verdict.CLAIM),
        (rec(S.PENDING), False, Verdict.CLAIM),
        (rec(S.SENT), True, Verdict.FINAL),
        (rec(S.CLAIMED, lease_until_ms=NOW + 1, maybe_sent_at_ms=NOW - 5), True, Verdict.HELD),
        (rec(S.CLAIMED, lease_until_ms=NOW - 1), False, Verdict.CLAIM),
        (rec(S.IN_FLIGHT, lease_until_ms=NOW - 1, maybe_sent_at_ms=NOW - 5), False, Verdict.STALE),
        (rec(S.CLAIMED, lease_until_ms=NOW - 1, maybe_sent_at_ms=NOW - 10), True, Verdict.CLAIM),
        (rec(S.PENDING, maybe_sent_at_ms=NOW - 10), True, Verdict.CLAIM),
        (rec(S.PENDING, maybe_sent_at_ms=NOW - IDEMPOTENCY_WINDOW_MS - 1), True, Verdict.STALE),
        (rec(S.DEAD_LETTERED, maybe_sent_at_ms=NOW - IDEMPOTENCY_WINDOW_MS - 1), True, Verdict.STALE),
        (rec(S.DEAD_LETTERED), False, Verdict.CLAIM),
        (rec(S.PENDING, maybe_sent_at_ms=NOW - 10, group_key="sendonce:c:group:b-g1"), True, Verdict.GROUPED),
        (rec(S.PENDING, group_key="sendonce:c:group:b-g1"), True, Verdict.CLAIM),  # refused group: no mark, no hold
    ],
)
def test_claim_rules(record, keyed, expected):
    assert classify(record, payload_hash="h", provider_idempotent=keyed, now_ms=NOW) is expected


def test_a_different_payload_is_a_conflict_even_when_sent():
    assert classify(rec(S.SENT), payload_hash="other", provider_idempotent=True, now_ms=NOW) is Verdict.CONFLICT


def test_the_window_counts_from_the_first_attempt_not_the_last_claim():
    """Issue 10, defect 2: a chain of takeovers must not stretch the 24 h key past its life."""
    # Given the first attempt that may have reached Resend 23 h ago, and a later takeover
    # whose lease ran out a moment ago
    first = NOW - IDEMPOTENCY_WINDOW_MS - 1
    record = rec(S.CLAIMED, lease_until_ms=NOW - 1, maybe_sent_at_ms=first)
    # Then the next claim may not repeat it: it is closed as unknown
    assert classify(record, payload_hash="h", provider_idempotent=True, now_ms=NOW) is Verdict.STALE


def test_a_group_claim_does_not_take_a_delivery_sent_under_its_own_key():
    record = rec(S.PENDING, maybe_sent_at_ms=NOW - 10)  # an ambiguous one-by-one attempt
    assert classify(record, payload_hash="h", provider_idempotent=True, now_ms=NOW, group_key="g") is Verdict.GROUPED
    assert classify(record, payload_hash="h", provider_idempotent=True, now_ms=NOW) is Verdict.CLAIM


@pytest.mark.parametrize(
    "record, expected",
    [
        (None, Event.CLOSE_CANCELLED),
        (rec(S.PENDING), Event.CLOSE_CANCELLED),
        (rec(S.PENDING, maybe_sent_at_ms=NOW - 10), Event.CLOSE_CANCELLED_MAYBE_SENT),
        (rec(S.CLAIMED, lease_until_ms=NOW - 1, maybe_sent_at_ms=NOW - 10), Event.CLOSE_CANCELLED_MAYBE_SENT),
        (rec(S.CLAIMED, lease_until_ms=NOW - 1), Event.CLOSE_CANCELLED),
        (rec(S.IN_FLIGHT, lease_until_ms=NOW - 1, maybe_sent_at_ms=NOW - 10), Event.CLOSE_CANCELLED_MAYBE_SENT),
        (rec(S.CLAIMED, lease_until_ms=NOW + 1), None),
        (rec(S.SENT), None),
    ],
)
def test_what_a_cancelled_campaign_does_to_a_delivery(record, expected):
    assert delivery_tables.cancel_event(record, now_ms=NOW) is expected


def test_every_cancel_event_starts_from_its_states():
    for event in (Event.CLOSE_CANCELLED, Event.CLOSE_CANCELLED_MAYBE_SENT):
        assert {S.PENDING, S.CLAIMED} <= set(delivery_tables.transition(event).sources)


def _block(text: str, name: str) -> str:
    start = text.index(f"<!-- generated: {name} -->") + len(f"<!-- generated: {name} -->")
    return text[start : text.index(f"<!-- end: {name} -->")].strip()


def test_the_ledger_doc_states_the_tables_the_code_uses():
    text = (DOCS / "ledger.md").read_text()
    assert _block(text, "delivery diagram") == f"```mermaid\n{delivery_tables.mermaid()}\n```"
    assert _block(text, "claim rules") == delivery_tables.claim_table()
    assert _block(text, "transitions") == delivery_tables.transition_table()


def test_the_campaign_doc_states_the_lifecycle_the_code_uses():
    text = (DOCS / "operations-campaigns.md").read_text()
    assert _block(text, "campaign diagram") == f"```mermaid\n{campaign_lifecycle.mermaid()}\n```"
    assert _block(text, "campaign transitions") == campaign_lifecycle.table()


def test_the_campaign_lifecycle_never_leaves_a_final_state_but_by_its_rows():
    from sendonce.domain.models import CampaignState as C

    leaving = {(t.source, t.event) for t in campaign_lifecycle.TRANSITIONS if t.source in (C.COMPLETED, C.CANCELLED)}
    assert leaving == {
        (C.COMPLETED, campaign_lifecycle.CampaignEvent.PUBLISH),
        (C.COMPLETED, campaign_lifecycle.CampaignEvent.REOPEN_UNKNOWN),
    }
