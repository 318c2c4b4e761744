"""The shared limiter's reads before a campaign's reservation (issue 35: requests per message):
the state item, the previous slot and, late in a slot, the current one. A batch-mode consumer
asks about once a second, so on every message it found them all due; they are one
BatchGetItem, not three GetItems. Real limiter, moto's DynamoDB, an injected clock."""

from __future__ import annotations

from collections import Counter
from typing import Any

import boto3
import pytest

from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.domain.sending.shares import Claimant
from tests.fakes import LimiterClock

pytestmark = pytest.mark.integration

START = 1_800_000_000.0


def counted_client() -> tuple[Any, Counter[str]]:
    client = boto3.client("dynamodb")
    calls: Counter[str] = Counter()
    client.meta.events.register("before-call", lambda model, **_: calls.update([model.name]))
    return client, calls


def limiter(system, client: Any, clock: LimiterClock, rate: float = 8) -> DynamoDBRateLimiter:
    return DynamoDBRateLimiter(
        client=client,
        table_name=system.resources.campaigns_table,
        rates={"resend": rate},
        clock=clock,
        sleep=clock.sleep,
    )


def test_a_message_a_second_late_in_its_slot_reads_once_and_writes_once(system):
    client, calls = counted_client()
    clock = LimiterClock(START)
    one = limiter(system, client, clock)
    for k in range(5):  # a batch-mode message every 2 s, each asking late in its second
        clock.now = START + 2 * k + 0.7
        assert one.acquire("resend", claimant=Claimant("c1"))

    assert calls == Counter({"BatchGetItem": 5, "UpdateItem": 5}), calls
    assert one.requests == 10


def test_what_the_one_read_finds_is_what_three_reads_found(system):
    """The learned limit (state item) and a campaign that sent late in the previous second
    (previous slot) shape the reservation exactly as when each was read alone."""
    table = system.resources.campaigns_table
    setup = boto3.client("dynamodb")
    setup.put_item(
        TableName=table,
        Item={"pk": {"S": "limiter#resend"}, "sk": {"S": "state"}, "limit": {"N": "4"}, "limit_seen_at": {"N": "1"}},
    )
    other = limiter(system, setup, LimiterClock(START + 0.9), rate=4)
    assert other.acquire("resend", claimant=Claimant("other"))  # late in the previous second

    client, calls = counted_client()
    clock = LimiterClock(START + 1.1)
    one = limiter(system, client, clock, rate=8)
    assert one.acquire("resend", claimant=Claimant("c1"))

    assert calls["BatchGetItem"] == 1 and calls["GetItem"] == 0, calls
    assert one.limit("resend") == 4  # the learned limit, not the configured 8: no further read
    assert set(one.shares("resend", Claimant("c1"))) == {"c1", "other"}
    assert calls["GetItem"] == 0


class UnprocessedOnce:
    """moto's client, except that the first BatchGetItem leaves every key unprocessed (as
    DynamoDB may under load)."""

    def __init__(self, client: Any):
        self._client = client
        self.batches: list[int] = []  # keys asked, per BatchGetItem

    def batch_get_item(self, RequestItems: dict[str, Any], **kwargs: Any) -> dict[str, Any]:  # noqa: N803 - boto3's name
        (asked,) = RequestItems.values()
        self.batches.append(len(asked["Keys"]))
        if len(self.batches) == 1:
            return {"Responses": {}, "UnprocessedKeys": RequestItems}
        return self._client.batch_get_item(RequestItems=RequestItems, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_keys_the_batch_leaves_unprocessed_are_asked_for_again(system):
    setup = boto3.client("dynamodb")
    setup.put_item(
        TableName=system.resources.campaigns_table,
        Item={"pk": {"S": "limiter#resend"}, "sk": {"S": "state"}, "limit": {"N": "4"}, "limit_seen_at": {"N": "1"}},
    )
    client, calls = counted_client()
    flaky = UnprocessedOnce(client)
    one = limiter(system, flaky, LimiterClock(START + 0.7))

    assert one.acquire("resend", claimant=Claimant("c1"))

    assert flaky.batches == [3, 3]  # state, previous slot, this slot; then the same again
    assert calls == Counter({"BatchGetItem": 1, "UpdateItem": 1}), calls  # the first never reached moto
    assert one.limit("resend") == 4 and calls["GetItem"] == 0
