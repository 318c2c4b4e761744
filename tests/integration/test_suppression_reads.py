"""A message's suppression checks are one consistent BatchGetItem (issue 17): the real
adapter on moto's server, and batch mode through the real services."""

from __future__ import annotations

import time

import boto3
import pytest

from sendonce.adapters.dynamodb.suppressions import DynamoDBSuppressions
from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.errors import SuppressionsUnavailableError
from sendonce.domain.models import email_fingerprint
from sendonce_local.resources import create_suppressions_table
from tests.model.world import Clock, Rig

pytestmark = pytest.mark.integration


class Requests:
    """Records each BatchGetItem's parameters; `unprocessed` answers leave some keys unprocessed."""

    def __init__(self, client, unprocessed: int = 0):
        self.params: list[dict] = []
        self.unprocessed = unprocessed
        client.meta.events.register("provide-client-params.dynamodb", self._before)
        client.meta.events.register("after-call.dynamodb.BatchGetItem", self._after)

    def _before(self, params, model, **_):
        self.params.append({"operation": model.name, **params})

    def _after(self, parsed, **_):
        if self.unprocessed:
            self.unprocessed -= 1
            ((table, found),) = parsed["Responses"].items()
            parsed["Responses"] = {table: []}  # as DynamoDB does when throttled: nothing read, all left
            keys = self.params[-1]["RequestItems"][table]["Keys"]
            parsed["UnprocessedKeys"] = {table: {"Keys": keys, "ConsistentRead": True}}


@pytest.fixture
def suppressions(aws_env):
    client = boto3.client("dynamodb")
    table = f"s{int(time.time() * 1000)}"
    create_suppressions_table(client, table)
    return client, DynamoDBSuppressions(client=client, table_name=table, sleep=lambda s: None)


def test_the_suppressed_among_many_addresses_are_read_in_requests_of_a_hundred_consistent_keys(suppressions):
    client, store = suppressions
    store.add("user7@example.com", SuppressionReason.UNSUBSCRIBED, "test")
    store.add("USER140@example.com", SuppressionReason.BOUNCED, "test")
    requests = Requests(client)
    emails = [f"user{i}@example.com" for i in range(150)] + ["user7@example.com"]  # a repeat is asked once

    found = store.suppressed_among(emails)

    assert set(found) == {email_fingerprint("user7@example.com"), email_fingerprint("user140@example.com")}
    assert found[email_fingerprint("user140@example.com")].reason is SuppressionReason.BOUNCED
    assert [p["operation"] for p in requests.params] == ["BatchGetItem", "BatchGetItem"]
    sent = [next(iter(p["RequestItems"].values())) for p in requests.params]
    assert [len(r["Keys"]) for r in sent] == [100, 50] and all(r["ConsistentRead"] for r in sent)


def test_unprocessed_keys_are_asked_again_and_a_list_never_read_in_full_is_an_error(suppressions):
    client, store = suppressions
    store.add("user1@example.com", SuppressionReason.COMPLAINED, "test")
    emails = [f"user{i}@example.com" for i in range(3)]
    requests = Requests(client, unprocessed=2)
    assert set(store.suppressed_among(emails)) == {email_fingerprint("user1@example.com")}
    assert len(requests.params) == 3
    Requests(client, unprocessed=5)
    with pytest.raises(SuppressionsUnavailableError, match="3 suppression key"):
        store.suppressed_among(emails)


def test_a_batch_mode_message_reads_the_suppression_list_once(aws_env):
    clock = Clock(int(time.time() * 1000))
    rig = Rig(boto3.client("dynamodb"), provider="resend", mode="batch", clock=clock, recipients=5)
    rig.suppressions.add("user3@example.com", SuppressionReason.UNSUBSCRIBED, "test")
    rig.operator.publish("c1", rig.people)
    rig.drain()
    assert rig.states() == {**{f"r{i}": "sent" for i in range(5)}, "r3": "suppressed"}
    assert (rig.suppressions.batch_reads, rig.suppressions.reads) == (1, 0)
