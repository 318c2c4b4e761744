"""A campaign completes whoever finishes last, and no write to its item is lost (issue 17,
findings 4 and 6): the real services and DynamoDB adapters on moto's server, the modelled
queue and provider, a fake clock."""

from __future__ import annotations

import time

import boto3
import pytest
from botocore.exceptions import ClientError

from sendonce.domain.campaigns.ports import StateChange
from sendonce.domain.models import CampaignState
from tests.model.world import Clock, Rig

pytestmark = pytest.mark.integration
HOUR = 3600 * 1000


class ConflictOnSettle:
    """Refuses the consumer's `ADD open_batches :minus` with TransactionConflictException, as
    DynamoDB does while a publisher's transaction holds the campaign item: the first `times`
    calls, before they are sent (nothing is written)."""

    def __init__(self, client, times: int):
        self.times = times
        self.calls = 0
        self.refused = 0
        client.meta.events.register("provide-client-params.dynamodb.UpdateItem", self._maybe_refuse)

    def _maybe_refuse(self, params, **_):
        if params.get("UpdateExpression") != "ADD open_batches :minus":
            return
        self.calls += 1
        if self.refused < self.times:
            self.refused += 1
            error = {"Code": "TransactionConflictException", "Message": "Transaction is ongoing for the item"}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}, "UpdateItem")


@pytest.fixture
def rig_for(aws_env):
    def make(recipients: int = 3, mode: str = "single") -> tuple[Rig, object]:
        client = boto3.client("dynamodb")
        clock = Clock(int(time.time() * 1000) + 30 * 24 * HOUR)
        return Rig(client, provider="resend", mode=mode, clock=clock, recipients=recipients), client

    return make


def test_a_settle_refused_by_a_transaction_conflict_is_retried_and_the_campaign_completes(rig_for):
    # Given the first settles of the campaign's batches meet a publisher's transaction
    rig, client = rig_for(recipients=3)
    conflicts = ConflictOnSettle(client, times=2)
    rig.operator.publish("c1", rig.people, batch_size=1)
    # When every batch is delivered
    rig.drain()
    # Then the refused writes were retried, and the campaign completed
    assert conflicts.refused == 2 and conflicts.calls == 3 + 2
    assert rig.states() == {f"r{i}": "sent" for i in range(3)}
    assert rig.store.get("c1").state is CampaignState.COMPLETED
    assert sum(rig.provider.accepted.values()) == 3


def test_a_settle_that_stays_in_conflict_brings_the_message_back_and_it_settles_then(rig_for):
    # Given a settle refused on every retry
    rig, client = rig_for(recipients=1)
    conflicts = ConflictOnSettle(client, times=6)
    rig.operator.publish("c1", rig.people, batch_size=1)
    message = rig.queue.receive(0)
    assert message is not None
    # When the consumer delivers the batch
    report = rig.process(message)
    # Then the error is surfaced: the message comes back instead of being acknowledged
    assert report.sent == 1 and report.must_return and "CampaignBusyError" in (report.unsettled or "")
    assert conflicts.calls == 6 and rig.queue.messages == [message]
    assert rig.store.get("c1").state is CampaignState.SENDING
    # And when it comes back, the batch is settled and the campaign completes, nobody sent twice
    rig.drain()
    assert rig.states() == {"r0": "sent"} and rig.provider.accepted[("c1", "r0")] == 1
    assert rig.store.get("c1").state is CampaignState.COMPLETED


def test_consumers_that_all_finish_during_the_publish_lease_leave_the_completion_to_the_publisher(rig_for):
    rig, _ = rig_for(recipients=12)
    settled_under_lease: list[bool] = []

    def consumers_finish(_report) -> None:
        # Every message is delivered while the publisher still holds its lease
        while (message := rig.queue.receive(0)) is not None:
            rig.process(message)
        campaign = rig.store.get("c1")
        settled_under_lease.append(campaign.publishing_until_ms is not None and campaign.open_batches <= 0)

    # When the publish's last request to the queue is followed by every consumer finishing
    rig.operator.publish("c1", rig.people, batch_size=1, on_batch=consumers_finish)
    # Then the consumers could not complete it (the lease was live), and the publisher did
    assert settled_under_lease[-1] is True
    assert rig.states() == {f"r{i}": "sent" for i in range(12)}
    assert rig.store.get("c1").state is CampaignState.COMPLETED


def test_a_publisher_that_ends_before_its_consumers_leaves_the_completion_to_the_last_consumer(rig_for):
    rig, _ = rig_for(recipients=12)
    rig.operator.publish("c1", rig.people, batch_size=1)
    assert rig.store.get("c1").state is CampaignState.SENDING  # open batches: the publisher reads no ledger
    rig.drain()
    assert rig.store.get("c1").state is CampaignState.COMPLETED


def test_parallel_publishers_each_hold_a_lease_and_the_last_to_end_releases_it(rig_for):
    """Two publishers (parallel streams): the one that ends first leaves the campaign's
    publish lease to the other, so consumers that end everyone published so far cannot
    complete a campaign that is still growing (issue 17). The last to end releases it."""
    rig, _ = rig_for(recipients=4)
    store, now = rig.store, rig.clock()
    rig.operator.publish("c1", rig.people[:1], batch_size=1)  # a draft starts sending
    for holder in ("first", "second"):
        store.transition(
            "c1", StateChange(to=CampaignState.SENDING, allowed_from=(CampaignState.SENDING,), by="t",
            stays=True, publishing_until_ms=now + 60_000, holder=holder),
        )  # fmt: skip

    store.end_publish("c1", "second", now_ms=now)
    assert store.get("c1").publishing_until_ms == now + 60_000  # "first" still holds it

    store.end_publish("c1", "first", now_ms=now)
    assert store.get("c1").publishing_until_ms is None


def test_a_dead_publishers_expired_lease_does_not_hold_the_campaign(rig_for):
    rig, client = rig_for(recipients=2)
    store, now = rig.store, rig.clock()
    rig.operator.publish("c1", rig.people[:1], batch_size=1)
    store.transition(
        "c1", StateChange(to=CampaignState.SENDING, allowed_from=(CampaignState.SENDING,), by="t",
        stays=True, publishing_until_ms=now - 1, holder="dead"),
    )  # fmt: skip
    store.transition(
        "c1", StateChange(to=CampaignState.SENDING, allowed_from=(CampaignState.SENDING,), by="t",
        stays=True, publishing_until_ms=now + 60_000, holder="alive"),
    )  # fmt: skip

    store.end_publish("c1", "alive", now_ms=now)

    item = client.get_item(TableName=rig.store._table, Key={"pk": {"S": "campaign#c1"}, "sk": {"S": "campaign"}})
    assert "publishing_until_ms" not in item["Item"]
    assert not [name for name in item["Item"] if name.startswith("holder_")]  # the dead one's tidied too


def test_a_renewal_between_the_last_holders_two_writes_keeps_the_lease(rig_for):
    """The last holder reads no other live holder, but a new publisher renews before its
    second write: the version it read is gone, it reads again, and the lease stays."""
    rig, client = rig_for(recipients=2)
    store, now = rig.store, rig.clock()
    rig.operator.publish("c1", rig.people[:1], batch_size=1)
    store.transition(
        "c1", StateChange(to=CampaignState.SENDING, allowed_from=(CampaignState.SENDING,), by="t",
        stays=True, publishing_until_ms=now + 60_000, holder="last"),
    )  # fmt: skip
    renewed = []

    def newcomer_renews(params, **_):
        if params.get("UpdateExpression", "").startswith("REMOVE publishing_until_ms") and not renewed:
            renewed.append(True)
            store.transition(
                "c1", StateChange(to=CampaignState.SENDING, allowed_from=(CampaignState.SENDING,), by="t",
                stays=True, publishing_until_ms=now + 90_000, holder="newcomer"),
            )  # fmt: skip

    store._client.meta.events.register("provide-client-params.dynamodb.UpdateItem", newcomer_renews)
    store.end_publish("c1", "last", now_ms=now)

    assert renewed and store.get("c1").publishing_until_ms == now + 90_000
    store.end_publish("c1", "newcomer", now_ms=now)
    assert store.get("c1").publishing_until_ms is None
