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
from sendonce.domain.models import DeliveryRecord, DeliveryRequest, DeliveryState, Recipient, SendGroup
from sendonce.domain.ports import ClaimStatus
from sendonce.domain.sending import protocol
from sendonce.domain.sending.protocol import IDEMPOTENCY_WINDOW_MS, Group, Verdict, classify
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
    leases = [None] if state not in protocol.HELD else [NOW + 60_000, NOW - 1, None]
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
        facts_seen.add(protocol.facts(stored, payload_hash="h", provider_idempotent=keyed, now_ms=NOW))
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
    rows = {id(protocol.rule_for(f)) for f in facts_seen}
    applicable = {id(r) for r in protocol.CLAIM_RULES if r.keyed is None or r.keyed == keyed}
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
        f = protocol.facts(stored, payload_hash="h", provider_idempotent=True, now_ms=NOW, group_key=GROUP)
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
