"""A/B variants on DynamoDB (moto): the claim records a recipient's variant once, for a single
claim and for each member of a send group, and the campaign's winner is written once."""

from __future__ import annotations

import uuid

import boto3
import pytest

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.ledger_keys import one_shard
from sendonce.domain.campaigns.variants import AbTest, Decision, Variant, VariantFigures
from sendonce.domain.errors import CampaignNotFoundError
from sendonce.domain.models import Campaign, Content, DeliveryKey, DeliveryRequest, Recipient, SendGroup
from sendonce.domain.sending.guards import payload_hash
from sendonce.domain.sending.ports import ClaimStatus
from sendonce_local.resources import create_tables

pytestmark = pytest.mark.integration
NOW = 1_900_000_000_000


@pytest.fixture
def tables(aws_env):
    name = f"ab-{uuid.uuid4().hex[:8]}"
    client = boto3.client("dynamodb")
    create_tables(client, ledger_table=name, campaigns_table=name + "-c")
    ledger = DynamoDBLedger(client=client, table_name=name, shards_of=one_shard)
    return ledger, DynamoDBCampaignStore(client=client, table_name=name + "-c")


def request(rid: str, variant: str | None, owner: str = "o1") -> DeliveryRequest:
    return DeliveryRequest(
        campaign_id="c1",
        recipient_id=rid,
        batch_id="b1",
        email=f"{rid}@example.com",
        variables={},
        provider="resend",
        provider_idempotent=True,
        owner=owner,
        variant=variant,
    )


def test_a_claim_records_the_variant_and_a_claim_for_another_variant_is_a_conflict(tables):
    ledger, _ = tables
    first = request("r1", "A")
    assert (
        ledger.claim(first, payload_hash=payload_hash(first.email, {}, "A"), lease_until_ms=NOW + 1, now_ms=NOW).status
        is ClaimStatus.CLAIMED
    )

    other = request("r1", "B", owner="o2")
    again = ledger.claim(other, payload_hash=payload_hash(other.email, {}, "B"), lease_until_ms=NOW + 9, now_ms=NOW + 5)

    assert again.status is ClaimStatus.CONFLICT
    record = ledger.get(DeliveryKey(campaign_id="c1", recipient_id="r1"))
    assert record.variant == "A" and record.owner == "o1"


def test_a_claim_without_a_variant_writes_none(tables):
    ledger, _ = tables
    plain = request("r2", None)
    ledger.claim(plain, payload_hash=payload_hash(plain.email, {}), lease_until_ms=NOW + 1, now_ms=NOW)

    item = ledger.get(DeliveryKey(campaign_id="c1", recipient_id="r2"))
    assert item.variant is None and item.payload_hash == payload_hash(plain.email, {})


def test_each_member_of_a_send_group_has_its_variant_recorded(tables):
    ledger, _ = tables
    members = [Recipient(recipient_id=f"g{i}", email=f"g{i}@example.com") for i in range(3)]
    group = SendGroup(campaign_id="c1", group_id="b1-g1", recipients=members)
    variants = {"g0": "A", "g1": "B", "g2": "A"}
    hashes = {m.recipient_id: payload_hash(m.email, {}, variants[m.recipient_id]) for m in members}

    claim = ledger.claim_group(
        group, hashes, owner="o1", provider="resend", lease_until_ms=NOW + 1, now_ms=NOW, variants=variants
    )

    assert claim.claimed
    assert {rid: ledger.get(DeliveryKey(campaign_id="c1", recipient_id=rid)).variant for rid in variants} == variants


def test_the_first_decision_stands(tables):
    _, store = tables
    store.create(
        Campaign(
            campaign_id="c1",
            name="A/B",
            provider="resend",
            sender="news@example.com",
            content=Content(
                subject="s", text="t", variants=(Variant(id="A", subject="a"), Variant(id="B", subject="b"))
            ),
            ab_test=AbTest(variants=("A", "B"), share=0.25, pick_by="clicks", after_s="2h"),
        )
    )
    first = Decision(variant="B", by="alice", at_ms=NOW, reason="by hand", figures={"B": VariantFigures(sent=3)})
    second = Decision(variant="A", by="sendonce", at_ms=NOW + 1, reason="by figures")

    after_first = store.record_decision("c1", first)
    after_second = store.record_decision("c1", second)

    assert after_first.decision == first == after_second.decision == store.get("c1").decision
    assert store.get("c1").ab_test == AbTest(variants=("A", "B"), share=0.25, pick_by="clicks", after_s=7200)
    assert store.content("c1").of_variant("B").subject == "b"
    with pytest.raises(CampaignNotFoundError):
        store.record_decision("nope", first)
