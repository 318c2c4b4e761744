"""Every row of the claim table, through both the pure rules and the DynamoDB ledger on moto.

The claim condition is derived from `delivery_protocol.CLAIM_RULES`; this test holds the
derivation to the table: for every combination of facts a record can have, a claim on
moto succeeds exactly when `classify` says claim, and a failed claim is classified alike.
"""

from __future__ import annotations

import uuid

import boto3
import pytest
from boto3.dynamodb.types import TypeSerializer

from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.ledger_keys import one_shard
from sendonce.domain.errors import LeaseLostError
from sendonce.domain.models import (
    DeliveryKey,
    DeliveryRecord,
    DeliveryRequest,
    DeliveryState,
    Receipt,
    Recipient,
    SendGroup,
)
from sendonce.domain.sending import delivery_tables
from sendonce.domain.sending.delivery_tables import IDEMPOTENCY_WINDOW_MS, Group, Verdict, classify
from sendonce.domain.sending.ports import ClaimStatus
from sendonce_local.resources import create_tables

pytestmark = pytest.mark.integration

NOW = 1_900_000_000_000
GROUP = "sendonce:c1:group:b1-g1"
_ser = TypeSerializer()


def records_for(state: DeliveryState | None, caller_group: str | None):
    """Representative records for every combination of facts of `state`."""
    if state is None:
        yield None
        return
    leases = [None] if state not in delivery_tables.HELD else [NOW + 60_000, NOW - 1, None]
    marks = [None, NOW - 10, NOW - IDEMPOTENCY_WINDOW_MS - 5]
    group_keys = [None, GROUP, "sendonce:c1:group:other-g1"]
    for payload in ("h", "other", None):
        for lease in leases:
            for mark in marks:
                for group_key in group_keys:
                    yield DeliveryRecord(
                        campaign_id="c1",
                        recipient_id="r",
                        state=state,
                        owner="old-owner",
                        lease_until_ms=lease,
                        payload_hash=payload,
                        maybe_sent_at_ms=mark,
                        maybe_sent_by="old-owner" if mark else None,
                        group_key=group_key,
                    )


def put(client, table: str, record: DeliveryRecord, recipient_id: str) -> None:
    item = {"campaign_id": "c1", "recipient_id": recipient_id, "state": record.state.value, "owner": record.owner}
    for name in ("lease_until_ms", "payload_hash", "maybe_sent_at_ms", "maybe_sent_by", "group_key"):
        if getattr(record, name) is not None:
            item[name] = getattr(record, name)
    client.put_item(TableName=table, Item={k: _ser.serialize(v) for k, v in item.items()})  # test setup only


@pytest.fixture
def ledger(aws_env):
    name = f"ledger-{uuid.uuid4().hex[:8]}"
    client = boto3.client("dynamodb")
    create_tables(client, ledger_table=name, campaigns_table=name + "-c")
    return DynamoDBLedger(client=client, table_name=name, shards_of=one_shard), client, name


@pytest.mark.parametrize("keyed", [True, False], ids=["resend", "ses"])
def test_every_claim_rule_gives_the_same_verdict_on_dynamodb(ledger, keyed):
    adapter, client, table = ledger
    cases = [(state, record) for state in [None, *DeliveryState] for record in records_for(state, None)]
    facts_seen = set()
    for i, (_state, record) in enumerate(cases):
        rid = f"r{i}"
        if record is not None:
            put(client, table, record, rid)
        stored = record.model_copy(update={"recipient_id": rid}) if record else None
        expected = classify(stored, payload_hash="h", provider_idempotent=keyed, now_ms=NOW)
        facts_seen.add(delivery_tables.facts(stored, payload_hash="h", provider_idempotent=keyed, now_ms=NOW))
        request = DeliveryRequest(
            campaign_id="c1",
            recipient_id=rid,
            batch_id="b1",
            email="a@example.com",
            variables={},
            provider="resend" if keyed else "ses",
            provider_idempotent=keyed,
            owner="new-owner",
        )
        result = adapter.claim(request, payload_hash="h", lease_until_ms=NOW + 60_000, now_ms=NOW)
        after = adapter.get(request.key)
        if expected is Verdict.CLAIM:
            assert result.status is ClaimStatus.CLAIMED, (stored, result)
            assert after.owner == "new-owner" and after.state is DeliveryState.CLAIMED
            # A keyed claim marks the first attempt; it never moves an earlier mark.
            if keyed:
                assert after.maybe_sent_at_ms == (
                    stored.maybe_sent_at_ms if stored and stored.maybe_sent_at_ms else NOW
                )
        else:
            want = {
                Verdict.FINAL: ClaimStatus.FINAL,
                Verdict.CONFLICT: ClaimStatus.CONFLICT,
                Verdict.HELD: ClaimStatus.HELD,
                Verdict.GROUPED: ClaimStatus.HELD,
                Verdict.STALE: ClaimStatus.FINAL,
            }[expected]
            assert result.status is want, (stored, expected, result)
            if expected is Verdict.STALE:
                assert after.state is DeliveryState.UNKNOWN and result.closed_as_unknown
            else:
                assert after.state is stored.state and after.owner == stored.owner
    # The cases cover every row of the table that applies to this provider.
    rows = {id(delivery_tables.rule_for(f)) for f in facts_seen}
    applicable = {id(r) for r in delivery_tables.CLAIM_RULES if r.keyed is None or r.keyed == keyed}
    assert applicable <= rows


def test_every_claim_rule_gives_the_same_verdict_for_a_group_member(ledger):
    adapter, client, table = ledger
    cases = [record for state in [None, *DeliveryState] for record in records_for(state, GROUP)]
    groups = set()
    for i, record in enumerate(cases):
        rid = f"m{i}"
        if record is not None:
            put(client, table, record, rid)
        stored = record.model_copy(update={"recipient_id": rid}) if record else None
        expected = classify(stored, payload_hash="h", provider_idempotent=True, now_ms=NOW, group_key=GROUP)
        f = delivery_tables.facts(stored, payload_hash="h", provider_idempotent=True, now_ms=NOW, group_key=GROUP)
        groups.add(f.group)
        group = SendGroup(
            campaign_id="c1", group_id="b1-g1", recipients=[Recipient(recipient_id=rid, email="a@example.com")]
        )
        assert group.idempotency_key == GROUP
        claim = adapter.claim_group(
            group, {rid: "h"}, owner="new-owner", provider="resend", lease_until_ms=NOW + 60_000, now_ms=NOW
        )
        assert claim.claimed is (expected is Verdict.CLAIM), (stored, expected)
    assert groups == {Group.NONE, Group.OTHER}


def test_a_refused_claim_lifts_only_its_own_mark(ledger):
    """Issue 10, defect 1: a takeover refused by the provider keeps the first attempt's mark."""
    adapter, client, table = ledger

    def req(owner: str) -> DeliveryRequest:
        return DeliveryRequest(
            campaign_id="c1",
            recipient_id="r",
            batch_id="b1",
            email="a@example.com",
            variables={},
            provider="resend",
            provider_idempotent=True,
            owner=owner,
        )

    # Given A claimed (Resend may have accepted A's request) and died; B took over after A's lease
    adapter.claim(req("A"), payload_hash="h", lease_until_ms=NOW - 1, now_ms=NOW - 60_000)
    assert (
        adapter.claim(req("B"), payload_hash="h", lease_until_ms=NOW + 60_000, now_ms=NOW).status is ClaimStatus.CLAIMED
    )
    # When Resend refuses B definitely (429)
    adapter.settle(
        req("B").key,
        owner="B",
        state=DeliveryState.PENDING,
        reason="429",
        error_class="retryable",
        refused=True,
        now_ms=NOW,
    )
    # Then A's mark stays: a claim 25 h after A's attempt closes it as unknown instead of sending
    record = adapter.get(req("B").key)
    assert (
        record.state is DeliveryState.PENDING
        and record.maybe_sent_at_ms == NOW - 60_000
        and record.maybe_sent_by == "A"
    )
    later = NOW + 25 * 3600 * 1000
    result = adapter.claim(req("C"), payload_hash="h", lease_until_ms=later + 60_000, now_ms=later)
    assert result.status is ClaimStatus.FINAL and result.closed_as_unknown

    # And a first claim refused definitely lifts its own mark: nothing can have been accepted
    adapter.claim(
        req("D").model_copy(update={"recipient_id": "r2"}), payload_hash="h", lease_until_ms=NOW + 60_000, now_ms=NOW
    )
    key = req("D").model_copy(update={"recipient_id": "r2"}).key
    adapter.settle(
        key, owner="D", state=DeliveryState.PENDING, reason="429", error_class="retryable", refused=True, now_ms=NOW
    )
    assert adapter.get(key).maybe_sent_at_ms is None


# --- every transition, from every state, through the DynamoDB adapter ----------------------

ME = "me"


def _settle(state: DeliveryState, **flags):
    def write(adapter, key, record):
        adapter.settle(key, owner=ME, state=state, reason="r", error_class="e", now_ms=NOW, **flags)

    return write


def _close_as_read(event: delivery_tables.Event):
    def write(adapter, key, record):
        return adapter.close_as_read(record, event, reason="r", now_ms=NOW, key=key, batch_id="b1")

    return write


def _close_unclaimed(state: DeliveryState):
    def write(adapter, key, record):
        return adapter.close_unclaimed("c1", [key.recipient_id], state=state, reason="r", batch_id="b1")

    return write


E = delivery_tables.Event
# The adapter's write for each event of the table (the claim is the claim rules' test above;
# provider_sent and reopen_unknown are the ledger events adapter's).
WRITES = {
    E.MARK_IN_FLIGHT: lambda adapter, key, record: adapter.mark_in_flight(key, owner=ME, now_ms=NOW),
    E.MARK_SENT: lambda adapter, key, record: adapter.mark_sent(
        key, owner=ME, receipt=Receipt(provider_message_id="m")
    ),
    E.SETTLE_REFUSED: _settle(DeliveryState.PENDING, refused=True),
    E.SETTLE_REPEATABLE: _settle(DeliveryState.PENDING, maybe_sent=True),
    E.SETTLE_REFUSED_LAST_RECEIVE: _settle(DeliveryState.DEAD_LETTERED, refused=True),
    E.SETTLE_REPEATABLE_LAST_RECEIVE: _settle(DeliveryState.DEAD_LETTERED, maybe_sent=True),
    E.SETTLE_FAILED: _settle(DeliveryState.FAILED),
    E.SETTLE_SUPPRESSED: _settle(DeliveryState.SUPPRESSED),
    E.SETTLE_UNKNOWN: _settle(DeliveryState.UNKNOWN, maybe_sent=True),
    E.CLOSE_STALE: _close_as_read(E.CLOSE_STALE),
    E.CLOSE_CANCELLED: _close_as_read(E.CLOSE_CANCELLED),
    E.CLOSE_CANCELLED_MAYBE_SENT: _close_as_read(E.CLOSE_CANCELLED_MAYBE_SENT),
    E.CLOSE_DEAD_LETTERED: _close_unclaimed(DeliveryState.DEAD_LETTERED),
    E.CLOSE_SUPPRESSED: _close_unclaimed(DeliveryState.SUPPRESSED),
}


def _group(rid: str) -> SendGroup:
    return SendGroup(
        campaign_id="c1", group_id="b1-g1", recipients=[Recipient(recipient_id=rid, email="a@example.com")]
    )


def _release(state: DeliveryState, refused: bool):
    def write(adapter, key, record):
        adapter.release_group(
            _group(key.recipient_id), owner=ME, state=state, reason="r", error_class="e", refused=refused
        )

    return write


# Batch mode writes the same events for every member of a group in one transaction.
GROUP_WRITES = {
    E.MARK_SENT: lambda adapter, key, record: adapter.complete_group(
        _group(key.recipient_id), owner=ME, outcomes={key.recipient_id: Receipt(provider_message_id="m")}
    ),
    E.SETTLE_FAILED: lambda adapter, key, record: adapter.complete_group(
        _group(key.recipient_id), owner=ME, outcomes={key.recipient_id: "422"}
    ),
    **{
        event: _release(state, refused)
        for event, state, refused in (
            (E.SETTLE_REFUSED, DeliveryState.PENDING, True),
            (E.SETTLE_REPEATABLE, DeliveryState.PENDING, False),
            (E.SETTLE_REFUSED_LAST_RECEIVE, DeliveryState.DEAD_LETTERED, True),
            (E.SETTLE_REPEATABLE_LAST_RECEIVE, DeliveryState.DEAD_LETTERED, False),
        )
    },
}


def _name(state: DeliveryState | None) -> str:
    return "absent" if state is None else state.value


# The rows of the transition table this file holds the DynamoDB adapter to: (event, source).
COVERED_TRANSITIONS = frozenset(
    {(E.CLAIM.value, _name(s)) for s in delivery_tables.transition(E.CLAIM).sources}
    | {
        (event.value, _name(s))
        for event in {**WRITES, **GROUP_WRITES}
        for s in delivery_tables.transition(event).sources
    }
    | {(event.value, "unknown") for event in (E.PROVIDER_SENT, E.PROVE_NOT_SENT, E.REOPEN_UNKNOWN)}
)
# And the claim rules, by (verdict, why): every row (the claim tests above).
COVERED_RULES = frozenset((r.verdict.value, r.why) for r in delivery_tables.CLAIM_RULES)


def _seed(client, table: str, rid: str, state: DeliveryState | None, *, maybe_sent: bool) -> DeliveryRecord | None:
    if state is None:
        return None
    record = DeliveryRecord(
        campaign_id="c1",
        recipient_id=rid,
        state=state,
        owner=ME,
        lease_until_ms=NOW - 1 if state in delivery_tables.HELD else None,  # expired: a closing write may take it
        payload_hash="h",
        maybe_sent_at_ms=NOW - 10 if maybe_sent else None,
        maybe_sent_by=ME if maybe_sent else None,
        group_key=_group(rid).idempotency_key,
    )
    put(client, table, record, rid)
    return record


@pytest.mark.parametrize("path", ["single", "group"])
def test_every_transition_applies_from_exactly_its_source_states_on_dynamodb(ledger, path):
    """For each event the adapter writes, from every state (absent included): the write
    applies, to the table's target, exactly when the state is one of the event's sources.
    The explorer (tests/model/explore) checks that every row it visits is in COVERED_TRANSITIONS."""
    adapter, client, table = ledger
    writes = WRITES if path == "single" else GROUP_WRITES
    i = 0
    for event, write in writes.items():
        transition = delivery_tables.transition(event)
        for state in [None, *DeliveryState]:
            i += 1
            rid = f"t{i}"
            maybe_sent = event is E.CLOSE_CANCELLED_MAYBE_SENT or event is E.SETTLE_REPEATABLE_LAST_RECEIVE
            record = _seed(client, table, rid, state, maybe_sent=maybe_sent)
            key = DeliveryKey(campaign_id="c1", recipient_id=rid)
            applies = state in transition.sources
            try:
                write(adapter, key, record)
                raised = None
            except (LeaseLostError, ValueError) as exc:
                raised = exc
            after = adapter.get(key)
            if applies:
                assert raised is None, (event, state, raised)
                assert after is not None and after.state is transition.target, (event, state, after)
            elif event is E.SETTLE_SUPPRESSED and state in delivery_tables.transition(E.SETTLE_UNKNOWN).sources:
                # The documented fallback: suppressed since an attempt that may have been accepted.
                assert after.state is DeliveryState.UNKNOWN, (event, state, after)
            else:
                assert (after.state if after else None) is state, (event, state, after)


# --- the unknown outcome's own transitions, through the ledger events adapter --------------


def _events(client, table: str):
    from sendonce.adapters.dynamodb.ledger_events import DynamoDBLedgerEvents

    return DynamoDBLedgerEvents(client=client, ledger_table=table, campaigns_table=table + "-c", shards_of=one_shard)


def _prove_then_reopen(events, key):
    events.prove_not_sent(key, audit="audit-1")
    events.reopen_unknown("c1", [key.recipient_id], by="alice")


UNKNOWN_WRITES = {
    E.PROVIDER_SENT: lambda events, key: events.resolve_unknown(key, provider_message_id="m", detail="audit"),
    E.PROVE_NOT_SENT: lambda events, key: events.prove_not_sent(key, audit="audit-1"),
    E.REOPEN_UNKNOWN: _prove_then_reopen,
}


def test_the_unknown_transitions_apply_from_exactly_their_source_states_on_dynamodb(ledger):
    """provider_sent, prove_not_sent and reopen_unknown, from every state: each applies, to
    the table's target, exactly from its sources; prove_not_sent leaves its mark, which is
    what reopen_unknown requires (without it, an unknown stays unknown)."""
    adapter, client, table = ledger
    events = _events(client, table)
    i = 0
    for event, write in UNKNOWN_WRITES.items():
        transition = delivery_tables.transition(event)
        for state in [None, *DeliveryState]:
            i += 1
            rid = f"u{i}"
            _seed(client, table, rid, state, maybe_sent=True)
            key = DeliveryKey(campaign_id="c1", recipient_id=rid)
            write(events, key)
            after = adapter.get(key)
            if state in transition.sources:
                assert after is not None and after.state is transition.target, (event, state, after)
            else:
                assert (after.state if after else None) is state, (event, state, after)
            if event is E.PROVE_NOT_SENT and state is DeliveryState.UNKNOWN:
                assert [u.proven_not_sent for u in events.unknowns("c1") if u.recipient_id == rid] == [True]
    # Without the proof an unknown is not reopened.
    _seed(client, table, "unproven", DeliveryState.UNKNOWN, maybe_sent=True)
    report = events.reopen_unknown("c1", ["unproven"], by="alice")
    assert report.skipped == ["unproven"]
    assert adapter.get(DeliveryKey(campaign_id="c1", recipient_id="unproven")).state is DeliveryState.UNKNOWN
