"""The DynamoDB ledger against moto's server: atomic claims, owner fencing, request counts."""

from __future__ import annotations

import time

import boto3
import pytest

from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.domain.errors import LeaseLostError
from sendonce.domain.models import DeliveryRequest, DeliveryState, Receipt
from sendonce.domain.sending.guards import LedgerDeliveryGuard
from sendonce.domain.sending.ports import ClaimStatus
from sendonce_local.request_counter import RequestCounter
from sendonce_local.resources import create_tables

pytestmark = pytest.mark.integration


@pytest.fixture
def ledger(aws_env):
    import uuid

    name = f"ledger-{uuid.uuid4().hex[:8]}"
    session = boto3.session.Session()
    counter = RequestCounter(session)
    create_tables(session.client("dynamodb"), ledger_table=name, campaigns_table=name + "-c")
    # Four shards: every key the adapter computes is a sharded one.
    ledger = DynamoDBLedger(client=session.client("dynamodb"), table_name=name, shards_of=lambda _: 4)
    ledger.counter = counter
    counter.reset()
    return ledger


def request(owner: str, idempotent: bool = True, email: str = "a@example.com", rid: str = "r1") -> DeliveryRequest:
    return DeliveryRequest(
        campaign_id="c1",
        recipient_id=rid,
        batch_id="b1",
        email=email,
        variables={},
        provider="resend" if idempotent else "ses",
        provider_idempotent=idempotent,
        owner=owner,
    )


def now_ms() -> int:
    return int(time.time() * 1000)


def test_only_one_of_two_claims_wins(ledger):
    first = ledger.claim(request("A"), payload_hash="h", lease_until_ms=now_ms() + 60_000, now_ms=now_ms())
    second = ledger.claim(request("B"), payload_hash="h", lease_until_ms=now_ms() + 60_000, now_ms=now_ms())

    assert first.status is ClaimStatus.CLAIMED
    assert second.status is ClaimStatus.HELD and second.record.owner == "A"


def test_a_stale_owner_cannot_overwrite_or_release_the_new_owners_record(ledger):
    ledger.claim(
        request("A"), payload_hash="h", lease_until_ms=now_ms() - 1, now_ms=now_ms() - 1000
    )  # A's lease ran out
    taken = ledger.claim(request("B"), payload_hash="h", lease_until_ms=now_ms() + 60_000, now_ms=now_ms())
    assert taken.status is ClaimStatus.CLAIMED

    with pytest.raises(LeaseLostError):
        ledger.mark_sent(request("A").key, owner="A", receipt=Receipt(provider_message_id="from-A"))
    with pytest.raises(LeaseLostError):
        ledger.settle(
            request("A").key,
            owner="A",
            state=DeliveryState.PENDING,
            reason="x",
            error_class="retryable",
            now_ms=now_ms(),
        )

    ledger.mark_sent(request("B").key, owner="B", receipt=Receipt(provider_message_id="from-B"))
    record = ledger.get(request("B").key)
    assert (record.state, record.owner, record.provider_message_id, record.attempts) == (
        DeliveryState.SENT,
        "B",
        "from-B",
        2,
    )
    assert [h["event"] for h in record.history] == ["claimed", "claimed", "sent"]


def test_a_stale_in_flight_ses_claim_is_closed_as_unknown_and_its_owner_can_still_resolve_it(ledger):
    ledger.claim(request("A", idempotent=False), payload_hash="h", lease_until_ms=now_ms() + 50, now_ms=now_ms())
    ledger.mark_in_flight(request("A").key, owner="A", now_ms=now_ms())
    time.sleep(0.1)

    result = ledger.claim(
        request("B", idempotent=False), payload_hash="h", lease_until_ms=now_ms() + 60_000, now_ms=now_ms()
    )

    assert result.status is ClaimStatus.FINAL and result.closed_as_unknown
    assert ledger.get(request("A").key).state is DeliveryState.UNKNOWN
    ledger.mark_sent(request("A").key, owner="A", receipt=Receipt(provider_message_id="late"))  # A's receipt arrives
    assert ledger.get(request("A").key).state is DeliveryState.SENT


def test_the_same_recipient_with_a_different_payload_is_a_conflict(ledger):
    ledger.claim(request("A"), payload_hash="h1", lease_until_ms=now_ms() + 60_000, now_ms=now_ms())
    ledger.mark_sent(request("A").key, owner="A", receipt=Receipt(provider_message_id="m"))

    result = ledger.claim(request("B"), payload_hash="h2", lease_until_ms=now_ms() + 60_000, now_ms=now_ms())

    assert result.status is ClaimStatus.CONFLICT


def test_failure_keeps_the_record_and_its_history_instead_of_deleting_it(ledger):
    ledger.claim(request("A"), payload_hash="h", lease_until_ms=now_ms() + 60_000, now_ms=now_ms())
    ledger.settle(
        request("A").key,
        owner="A",
        state=DeliveryState.FAILED,
        reason="422 validation_error",
        error_class="permanent",
        now_ms=now_ms(),
    )

    record = ledger.get(request("A").key)
    assert record.state is DeliveryState.FAILED and record.reason == "422 validation_error"
    assert [h["event"] for h in record.history] == ["claimed", "failed"]


def test_dynamodb_requests_per_recipient(ledger):
    """Fresh path: claim + mark_sent; duplicate hit: one failed conditional write."""
    guard = LedgerDeliveryGuard(ledger)

    class Ctx:
        def get_remaining_time_in_millis(self):
            return 60_000

    guard.register_lambda_context(Ctx())
    send = lambda: Receipt(provider_message_id="m")  # noqa: E731
    n = 20
    for i in range(n):
        assert guard.send_once(request(f"o{i}", rid=f"r{i}"), send).kind == "sent"
    fresh = ledger.counter.total("dynamodb") / n
    ledger.counter.reset()
    for i in range(n):
        assert guard.send_once(request(f"p{i}", rid=f"r{i}"), send).kind == "replayed"
    duplicate = ledger.counter.total("dynamodb") / n

    print(f"\nDynamoDB requests per recipient: fresh={fresh} duplicate={duplicate}")
    assert (fresh, duplicate) == (2.0, 1.0)


def test_missing_key_fields_raise_instead_of_running_unguarded(ledger):
    from sendonce.domain.sending.guards import MissingDeliveryKeyError

    guard = LedgerDeliveryGuard(ledger)
    bad = request("A").model_copy(update={"recipient_id": ""})
    calls = []
    with pytest.raises(MissingDeliveryKeyError):
        guard.send_once(bad, lambda: calls.append(1))
    assert calls == []
