"""Counters from stream records: the deltas, the exactly-once rule, status and completion."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sendonce.adapters.dynamodb.stream_records import change_of, changes_of
from sendonce.domain.campaigns.counters import (
    BatchRecorded,
    CounterAggregator,
    DeliveryChange,
    StreamPosition,
    delta_of,
    state_counts,
    unapplied,
)
from sendonce.domain.campaigns.ports import MOVES_PER_WRITE, Counts, StateChange
from sendonce.domain.campaigns.status import complete_if_done, delivery_status, reconcile
from sendonce.domain.models import CampaignState, DeliveryState
from tests.fakes import FakeCampaignStore, FakeCounters, FakeLedger

S = DeliveryState


def at(seq: int, shard: str = "c1#0", source: str = "ledger") -> StreamPosition:
    return StreamPosition(source=source, shard_id=shard, sequence=seq)


def change(seq: int, old: DeliveryState | None, new: DeliveryState | None, shard: str = "c1#0", campaign="c1"):
    return DeliveryChange(campaign_id=campaign, position=at(seq, shard), old=old, new=new)


def batch(seq: int, batch_id: str, ids, campaign="c1"):
    return BatchRecorded(
        campaign_id=campaign,
        position=at(seq, f"campaign#{campaign}", "campaigns"),
        batch_id=batch_id,
        recipient_ids=tuple(ids),
    )


@pytest.fixture
def world():
    campaigns = FakeCampaignStore()
    from tests.unit.helpers import World

    w = World(campaigns=campaigns)
    w.campaign("c1")
    w.campaign("c2")
    counters = FakeCounters()
    counters.count_from_creation("c1")
    counters.count_from_creation("c2")
    w.counters = counters
    w.aggregator = CounterAggregator(counters=counters, campaigns=campaigns, clock_ms=w.clock)
    return w


def totals(world, campaign_id="c1"):
    return state_counts(world.counters.totals(campaign_id).counts)


# --- the deltas ------------------------------------------------------------------------


def test_an_insert_counts_one_in_its_state_and_a_move_one_out_and_one_in():
    assert delta_of(change(1, None, S.CLAIMED)) == {S.CLAIMED: 1}
    assert delta_of(change(2, S.CLAIMED, S.SENT)) == {S.CLAIMED: -1, S.SENT: 1}
    assert delta_of(change(3, S.SENT, None)) == {S.SENT: -1}


def test_sequence_numbers_compare_as_integers_not_as_strings():
    # "99" > "100" as strings: a record would be taken for one applied before.
    changes = [change(100, None, S.CLAIMED), change(99, None, S.CLAIMED, shard="c1#1")]
    assert [c.position.sequence for c in unapplied(changes, 99)] == [100]
    assert [c.position.sequence for c in unapplied(changes, None)] == [99, 100]


def test_pending_is_published_minus_the_records_in_other_states_and_never_negative():
    counts = Counts(published=5)
    counts.states.update({S.SENT: 2, S.PENDING: 1, S.CLAIMED: 1})
    assert state_counts(counts).pending == 2  # one pending record, one never claimed
    assert state_counts(counts).total == 5
    lagging = Counts(published=1)
    lagging.states.update({S.SENT: 3})  # the ledger's stream ran ahead of the campaigns'
    assert state_counts(lagging).pending == 0


# --- stream records ----------------------------------------------------------------------


def ledger_record(seq: str, old: str | None, new: str | None, event="MODIFY", extra=None):
    record = {
        "eventName": event,
        "dynamodb": {
            "Keys": {"campaign_id": {"S": "c1#7"}, "recipient_id": {"S": "r1"}},
            "SequenceNumber": seq,
        },
    }
    if old:
        record["dynamodb"]["OldImage"] = {"state": {"S": old}, **(extra or {})}
    if new:
        record["dynamodb"]["NewImage"] = {"state": {"S": new}}
    return record


def test_a_ledger_record_is_a_change_of_state_on_its_partition_key_value():
    parsed = change_of(ledger_record("1234567890123456789012345678901234567890", "claimed", "sent"))
    assert parsed == DeliveryChange(
        campaign_id="c1",
        position=StreamPosition(source="ledger", shard_id="c1#7", sequence=1234567890123456789012345678901234567890),
        old=S.CLAIMED,
        new=S.SENT,
        recipient_id="r1",
    )
    assert change_of(ledger_record("5", None, "claimed", event="INSERT")).old is None


def test_a_provider_event_on_a_delivery_changes_no_count():
    assert change_of(ledger_record("6", "sent", "sent", extra={"events": {"L": []}})) is None


def test_only_an_inserted_batch_record_counts_in_the_campaigns_table():
    body = {"recipients": [{"recipient_id": "r1", "email": "a@example.com"}, {"recipient_id": "r2"}]}

    def record(event, pk, sk):
        return {
            "eventName": event,
            "dynamodb": {
                "Keys": {"pk": {"S": pk}, "sk": {"S": sk}},
                "SequenceNumber": "9",
                "NewImage": {"body": {"S": json.dumps(body)}},
            },
        }

    inserted = record("INSERT", "campaign#c1", "batch#b1")  # a campaign created before batch shards
    assert list(changes_of([inserted])) == [batch(9, "b1", ["r1", "r2"])]
    sharded = change_of(record("INSERT", "campaign#c1#b7", "batch#b1"))
    assert sharded is not None and (sharded.campaign_id, sharded.position.shard_id) == ("c1", "campaign#c1#b7")
    assert change_of(record("MODIFY", "campaign#c1", "batch#b1")) is None  # `enqueued` flipped (before markers)
    assert change_of(record("INSERT", "campaign#c1#b7", "batch-enqueued#b1")) is None
    assert change_of(record("INSERT", "campaign#c1", "group#b1-g0")) is None
    assert change_of(record("INSERT", "campaign#c1#b7", "group#b1-g1")) is None
    assert change_of(record("INSERT", "counters#c1", "from#ledger#c1#0")) is None


def test_the_stream_filter_passes_inserted_batch_records_only_under_old_and_sharded_keys():
    # The local poller's filter is the stack's (sendonce_cdk/aggregator.py: INSERT, sk
    # begins with `batch#`; tests/infra/test_stack.py checks the template's pattern).
    from sendonce.adapters.dynamodb import batch_records as bk
    from sendonce_local.stream_poller import inserted_batch_records

    def record(event, pk, sk):
        return {"eventName": event, "dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": sk}}}}

    def passes(event, pk, sk):
        return inserted_batch_records(record(event, pk, sk))

    sharded = bk.batch_partition("c1", "b1", bk.DEFAULT_BATCH_SHARDS)
    assert sharded.startswith("campaign#c1#b")
    assert passes("INSERT", sharded, bk.RECORD_PREFIX + "b1")
    assert passes("INSERT", "campaign#c1", "batch#b1")  # a campaign created before batch shards
    assert not passes("INSERT", sharded, bk.ENQUEUED_PREFIX + "b1")
    assert not passes("INSERT", sharded, bk.GROUP_PREFIX + "b1-g1")
    assert not passes("MODIFY", "campaign#c1", "batch#b1")
    assert not passes("INSERT", "campaign#c1", "campaign")


# --- exactly once ------------------------------------------------------------------------


def test_the_same_records_applied_twice_count_once(world):
    records = [batch(1, "b1", ["r1", "r2"]), change(2, None, S.CLAIMED), change(3, S.CLAIMED, S.SENT)]

    first = world.aggregator.apply(records)
    again = world.aggregator.apply(records)

    assert (first.applied, again.applied, again.repeated) == (3, 0, 3)
    assert totals(world).sent == 1 and totals(world).pending == 1 and totals(world).total == 2


def test_a_batch_that_overlaps_the_previous_one_counts_only_its_new_records(world):
    world.aggregator.apply([batch(1, "b1", ["r1", "r2", "r3"]), change(2, None, S.CLAIMED)])
    world.aggregator.apply([change(2, None, S.CLAIMED), change(3, S.CLAIMED, S.SENT), change(4, None, S.CLAIMED)])

    assert totals(world).as_dict() | {} == {
        "pending": 1,
        "claimed": 1,
        "in_flight": 0,
        "sent": 1,
        "failed": 0,
        "suppressed": 0,
        "unknown": 0,
        "cancelled": 0,
        "dead_lettered": 0,
    }


def test_a_crash_after_writing_some_campaigns_items_is_replayed_exactly(world):
    records = [
        batch(1, "b1", ["r1"], campaign="c1"),
        change(2, None, S.CLAIMED, shard="c1#0"),
        batch(3, "b2", ["s1", "s2"], campaign="c2"),
        change(4, None, S.SENT, shard="c2#0", campaign="c2"),
        change(5, S.CLAIMED, S.SENT, shard="c1#0"),
    ]
    world.counters.crash_after = 1  # c1's positions written (one write), c2's not
    with pytest.raises(RuntimeError, match="aggregator died"):
        world.aggregator.apply(records)
    world.counters.crash_after = None

    world.aggregator.apply(records)  # Lambda retries the batch

    assert totals(world, "c1").sent == 1 and totals(world, "c1").total == 1
    assert totals(world, "c2").sent == 1 and totals(world, "c2").pending == 1


def test_a_batchs_positions_of_one_campaign_move_in_one_write_up_to_the_limit(world):
    # Issue 35: one write per batch and campaign (its totals and report with it), not one per
    # position; a batch over MOVES_PER_WRITE positions takes one write per MOVES_PER_WRITE.
    shards = MOVES_PER_WRITE + 3
    records = [batch(1, "b1", [f"r{k}" for k in range(shards)])]
    records += [change(2 + k, None, S.SENT, shard=f"c1#{k}") for k in range(shards)]

    report = world.aggregator.apply(records)

    assert report.applied == shards + 1 and world.counters.writes == 2  # 36 positions: 32 + 4
    assert totals(world).sent == shards and totals(world).pending == 0


def test_a_write_that_meets_another_writers_reads_again_and_counts_once(world):
    records = [batch(1, "b1", ["r1"]), change(2, None, S.CLAIMED), change(3, S.CLAIMED, S.SENT)]
    other = CounterAggregator(counters=world.counters, campaigns=world.campaigns, clock_ms=world.clock)
    # The retried batch's twin applies the same records between this one's read and write.
    world.counters.before_advance = lambda: other.apply(records)

    report = world.aggregator.apply(records)

    assert report.applied + report.repeated == 3
    assert totals(world).sent == 1 and totals(world).total == 1


def test_without_the_sequence_condition_a_replay_counts_twice(world):
    # The mechanism under test, removed: every record is taken as unapplied.
    records = [batch(1, "b1", ["r1"]), change(2, None, S.SENT)]
    world.aggregator.apply(records)
    world.counters.applied_through = lambda campaign_id, stream: None
    world.counters.advance = _unconditional(world.counters)

    world.aggregator.apply(records)

    assert totals(world).sent == 2  # what the condition prevents


def _unconditional(counters):
    original = FakeCounters.advance

    def advance(campaign_id, moves, *, report=None):
        def as_stored(move):
            current = counters.items.get((campaign_id, move.stream))
            return replace(move, expected=current[0] if current else None)

        return original(counters, campaign_id, [as_stored(m) for m in moves], report=report)

    return advance


def test_a_recipient_in_two_batches_is_published_once_and_a_replayed_batch_counts_its_own(world):
    world.aggregator.apply([batch(1, "b1", ["r1", "r2"])])
    world.aggregator.apply([batch(2, "b2", ["r2", "r3"])])
    assert totals(world).pending == 3

    # A crash after the markers of b3 and before its counter write: the replay counts them.
    world.counters.crash_after = world.counters.writes
    with pytest.raises(RuntimeError):
        world.aggregator.apply([batch(3, "b3", ["r4"])])
    world.counters.crash_after = None
    world.aggregator.apply([batch(3, "b3", ["r4"])])

    assert totals(world).pending == 4


# --- status and completion -----------------------------------------------------------------


def send_everything(world, campaign_id="c1"):
    world.aggregator.apply(
        [batch(1, "b1", ["r1", "r2"], campaign=campaign_id)]
        + [change(10 + i, None, S.SENT, shard=f"{campaign_id}#{i}", campaign=campaign_id) for i in range(2)]
    )


def test_the_aggregator_completes_a_sending_campaign_whose_counters_say_every_recipient_ended(world):
    world.counters.record_batch("c1")

    send_everything(world)

    campaign = world.campaigns.get("c1")
    assert campaign.state is CampaignState.COMPLETED and campaign.state_reason == "every recipient ended"


def test_not_complete_while_a_recorded_batch_is_not_counted_yet(world):
    world.counters.record_batch("c1")
    world.counters.record_batch("c1")  # b2 recorded; its stream record not applied yet

    send_everything(world)

    assert world.campaigns.get("c1").state is CampaignState.SENDING
    assert complete_if_done(world.campaigns, world.ledger, "c1", now_ms=world.clock(), counters=world.counters) is None


def test_not_complete_while_a_batch_is_open_or_a_publish_lease_is_live(world):
    world.counters.record_batch("c1")
    world.campaigns.reset_open_batches("c1", 1)  # a resume republished reopened recipients
    send_everything(world)
    assert world.campaigns.get("c1").state is CampaignState.SENDING

    world.campaigns.reset_open_batches("c1", 0)
    world.campaigns.transition(
        "c1", StateChange(to=CampaignState.SENDING, allowed_from=(CampaignState.SENDING,), by="t",
        publishing_until_ms=world.clock() + 60_000, stays=True),
    )  # fmt: skip
    world.aggregator.apply([change(20, S.SENT, S.SENT)])
    assert world.aggregator.complete_if_done("c1") is None


def test_the_aggregator_reads_no_counter_while_a_batch_is_open(world):
    # A read of every counter key after every stream batch, all through a campaign's sending,
    # was the aggregator's largest request cost (bench.stream_replay): the campaign item says
    # first whether completion is possible at all.
    world.counters.record_batch("c1")
    world.campaigns.reset_open_batches("c1", 1)
    reads = []
    real_totals = world.counters.totals
    world.counters.totals = lambda campaign_id: reads.append(campaign_id) or real_totals(campaign_id)

    send_everything(world)
    assert reads == [] and world.campaigns.get("c1").state is CampaignState.SENDING

    world.campaigns.reset_open_batches("c1", 0)  # the last message settled
    world.aggregator.apply([change(30, S.SENT, S.SENT)])
    assert reads == ["c1"] and world.campaigns.get("c1").state is CampaignState.COMPLETED


def test_status_reads_the_counters_of_a_counted_campaign_and_the_ledger_of_any_other(world):
    world.counters.record_batch("c1")
    world.aggregator.apply([batch(1, "b1", ["r1", "r2", "r3"]), change(2, None, S.SENT)])

    counted = delivery_status(world.campaigns, FakeLedger(), "c1", world.counters)
    assert (counted.total, counted.sent, counted.pending) == (3, 1, 2)

    world.campaign("old")  # created before counters: nothing published, read in full
    assert delivery_status(world.campaigns, FakeLedger(), "old", world.counters).total == 0


def test_reconcile_names_every_state_whose_counter_differs_from_the_ledger(world):
    world.counters.record_batch("c1")
    world.aggregator.apply([batch(1, "b1", ["r1"]), change(2, None, S.SENT)])

    result = reconcile(world.campaigns, FakeLedger(), world.counters, "c1")  # an empty ledger

    assert {(d.state, d.counter, d.ledger) for d in result.drifts} == {("sent", 1, 0)}
