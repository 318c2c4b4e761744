"""One deterministic regression test per long-horizon defect of issue 10, on moto's server
with the real adapters and services, a fake clock and the modelled provider (keys kept 24 h)."""

from __future__ import annotations

import time

import boto3
import pytest

from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.models import CampaignState
from tests.model.world import Clock, Rig

pytestmark = pytest.mark.integration
HOUR = 3600 * 1000
LEASE = 60_000


@pytest.fixture
def rig_for(aws_env):
    def make(provider: str = "resend", mode: str = "single", recipients: int = 3) -> Rig:
        clock = Clock(int(time.time() * 1000) + 30 * 24 * HOUR)
        return Rig(
            boto3.client("dynamodb"), provider=provider, mode=mode, clock=clock, lease_ms=LEASE, recipients=recipients
        )

    return make


def publish(rig: Rig, n: int | None = None, batch_size: int = 100) -> None:
    rig.operator.publish("c1", rig.people[: n or len(rig.people)], batch_size=batch_size)


def receive(rig: Rig):
    message = rig.queue.receive(0)
    assert message is not None
    return message


def test_1_a_refused_takeover_does_not_forget_a_possible_send(rig_for):
    rig = rig_for(recipients=1)
    publish(rig)
    # Given A dies after Resend accepted, before the ledger heard (steps: claim, send)
    assert rig.process(receive(rig), crash_at=2, after=True) is None
    assert rig.provider.accepted[("c1", "r0")] == 1
    # When B takes over after A's lease and Resend refuses it definitely (429), and the
    # campaign halts for the day on the quota
    rig.clock.advance(LEASE + 31_000)
    rig.provider.script.extend(["rate_limited", "rate_limited"])
    rig.process(receive(rig))
    assert rig.states() == {"r0": "pending"}
    rig.operator.pause("c1")
    # And an operator resumes 25 h later, when Resend has forgotten the key
    rig.clock.advance(25 * HOUR)
    rig.operator.resume("c1")
    rig.drain()
    # Then the delivery is closed unknown, never sent a second time
    assert rig.provider.accepted[("c1", "r0")] == 1
    assert rig.states() == {"r0": "unknown"}


def test_2_the_window_counts_from_the_first_attempt(rig_for):
    rig = rig_for(recipients=1)
    publish(rig)
    assert rig.process(receive(rig), crash_at=2, after=True) is None  # A: accepted, then died
    rig.clock.advance(22 * HOUR)
    assert rig.process(receive(rig), crash_at=1, after=True) is None  # B: claimed 22 h later, died
    rig.clock.advance(2 * HOUR + 30 * 60_000)  # 24.5 h after A's request: Resend forgot the key
    rig.drain()
    assert rig.provider.accepted[("c1", "r0")] == 1
    assert rig.states() == {"r0": "unknown"}


def test_3a_a_group_refused_outright_is_sent_after_a_next_day_resume(rig_for):
    rig = rig_for(mode="batch")
    publish(rig)
    rig.provider.quota_until_ms = rig.clock() + 24 * HOUR
    rig.process(receive(rig))
    assert rig.store.get("c1").state is CampaignState.PAUSED
    records = {r.recipient_id: r for r in rig.ledger.records("c1")}
    assert all(r.maybe_sent_at_ms is None and r.group_key is None for r in records.values())
    rig.clock.advance(25 * HOUR)
    rig.operator.resume("c1")
    rig.drain()
    assert rig.states() == {"r0": "sent", "r1": "sent", "r2": "sent"}
    assert set(rig.provider.accepted.values()) == {1}


def test_3b_a_group_whose_completion_failed_is_closed_after_a_long_pause(rig_for):
    rig = rig_for(mode="batch")
    publish(rig)
    # Accepted by Resend, then the completing transaction never happened (steps: record
    # group, claim group, send batch)
    assert rig.process(receive(rig), crash_at=3, after=True) is None
    rig.operator.pause("c1")
    rig.clock.advance(25 * HOUR)
    rig.operator.resume("c1")
    rig.drain()
    assert set(rig.states().values()) == {"unknown"}  # not claimed forever, not re-sent
    assert set(rig.provider.accepted.values()) == {1}


def test_3b_the_same_message_a_day_later_does_not_replay_a_group_past_the_window(rig_for):
    rig = rig_for(mode="batch")
    publish(rig)
    assert rig.process(receive(rig), crash_at=3, after=True) is None  # accepted; completion never written
    rig.clock.advance(25 * HOUR)  # the same message comes back (a redrive a day later, say)
    rig.drain()
    assert set(rig.states().values()) == {"unknown"}
    assert set(rig.provider.accepted.values()) == {1}


def test_3c_a_recorded_group_never_requested_does_not_send_to_who_unsubscribed_since(rig_for):
    rig = rig_for(mode="batch")
    publish(rig)
    rig.process(receive(rig), budget_ms=1_000)  # the group is recorded, then the time runs out
    assert [len(g.recipients) for g in rig.store.groups_of_batch("c1", _batch_id(rig))] == [3]
    rig.suppressions.add("user1@example.com", SuppressionReason.UNSUBSCRIBED, "test")
    rig.drain()
    assert rig.states() == {"r0": "sent", "r1": "suppressed", "r2": "sent"}
    assert rig.provider.accepted[("c1", "r1")] == 0


def test_16_a_first_attempt_reads_no_groups_and_a_taken_number_is_never_adopted(rig_for, monkeypatch):
    """The batch's groups are read only once one of its recipients has a ledger record; a
    group number met taken without that read goes to the next free number (mutant 16)."""
    rig = rig_for(mode="batch")
    publish(rig)
    reads = []
    read = rig.store.groups_of_batch
    monkeypatch.setattr(rig.store, "groups_of_batch", lambda *a: reads.append(a) or read(*a))
    message = receive(rig)
    rig.process(message, budget_ms=1_000)  # g1 recorded with all three, then the time runs out
    assert reads == []
    rig.suppressions.add("user1@example.com", SuppressionReason.UNSUBSCRIBED, "test")
    rig.clock.advance(LEASE)
    message.visible_at_ms = 0
    rig.process(message)
    assert len(reads) == 1, "g1 met taken: the groups read once, to number the new group"
    groups = rig.store.groups_of_batch("c1", _batch_id(rig))
    assert [(g.group_id.rsplit("-", 1)[1], [r.recipient_id for r in g.recipients]) for g in groups] == [
        ("g1", ["r0", "r1", "r2"]),
        ("g2", ["r0", "r2"]),
    ]
    assert rig.states() == {"r0": "sent", "r1": "suppressed", "r2": "sent"}


def _batch_id(rig: Rig) -> str:
    return next(iter(rig.store.batches("c1")))[0].batch_id


def test_4a_cancel_closes_deliveries_a_dead_consumer_held(rig_for):
    rig = rig_for(provider="ses")
    publish(rig)
    # r0 in flight when the consumer died (claim, in_flight, send), r1 claimed only
    assert rig.process(receive(rig), crash_at=3, after=False) is None
    rig.operator.cancel("c1")
    rig.drain()
    states = rig.states()
    assert states["r0"] == "unknown"  # SES may have sent it: never re-sent, never "cancelled"
    assert all(state in ("cancelled", "unknown", "sent") for state in states.values())
    assert rig.operator.status("c1").in_progress == 0


def test_4b_a_possibly_sent_resend_delivery_is_unknown_on_cancel_and_a_sent_event_resolves_it(rig_for, aws_env):
    from sendonce.adapters.dynamodb.ledger_events import DynamoDBLedgerEvents
    from sendonce.domain.models import DeliveryKey

    rig = rig_for(recipients=1)
    publish(rig)
    rig.provider.script.append("timeout_after")  # accepted, but the answer was lost
    rig.process(receive(rig))
    assert rig.states() == {"r0": "pending"}
    rig.operator.cancel("c1")
    rig.drain()
    assert rig.states() == {"r0": "unknown"}
    events = DynamoDBLedgerEvents(
        client=boto3.client("dynamodb"),
        ledger_table=rig.ledger._table,
        campaigns_table=rig.store._table,
        shards_of=lambda c: rig.store.get(c).ledger_shards,
    )
    assert events.resolve_unknown(
        DeliveryKey(campaign_id="c1", recipient_id="r0"), provider_message_id="m-1", detail="email.sent"
    )
    assert rig.states() == {"r0": "sent"}


def test_5_reading_status_during_a_streamed_publish_never_completes_the_campaign(rig_for):
    rig = rig_for(recipients=12)

    def stream():
        yield from rig.people[:10]  # ten messages: the first request to the queue
        while (message := rig.queue.receive(0)) is not None:  # consumers finish the first part
            rig.process(message)
        status = rig.operator.status("c1")
        assert status.done and status.state is CampaignState.SENDING  # a read changes nothing
        assert rig.operator.complete_if_done("c1") is None  # the publish lease holds it open
        yield from rig.people[10:]

    rig.operator.publish("c1", stream(), batch_size=1)
    rig.drain()
    assert rig.states() == {f"r{i}": "sent" for i in range(12)}
    assert rig.store.get("c1").state is CampaignState.COMPLETED  # completed by the consumer, after the publish


def test_6_a_crash_on_the_last_receive_leaves_recipients_dead_lettered_not_pending(rig_for):
    rig = rig_for()
    publish(rig)
    message = receive(rig)
    message.receive_count = rig.queue.max_receive_count  # this is the last receive
    assert rig.process(message, crash_at=2) is None  # died before its first claim
    rig.clock.advance(LEASE + 31_000)
    assert rig.queue.receive(0) is None and len(rig.queue.dlq) == 1  # SQS moved it to the DLQ
    assert set(rig.states().values()) == {"dead_lettered"}
    assert rig.operator.status("c1").dead_lettered == 3


def test_found_by_the_model_a_crash_on_the_last_receive_after_a_release_leaves_it_dead_lettered(rig_for):
    rig = rig_for(recipients=2)
    publish(rig)
    message = receive(rig)
    message.receive_count = rig.queue.max_receive_count  # this is the last receive
    # Given the provider refuses r0 on both attempts (busy), so r0 is released for another try
    rig.provider.script.extend(["busy", "busy"])
    # When the consumer dies before its claim of r1 (steps: dead-letter first, claim r0, two
    # calls, release r0, claim r1)
    assert rig.process(message, crash_at=6) is None
    rig.clock.advance(LEASE + 31_000)
    assert rig.queue.receive(0) is None and len(rig.queue.dlq) == 1  # SQS moved it to the DLQ
    # Then nobody is pending behind the message in the DLQ: both are dead-lettered
    assert rig.states() == {"r0": "dead_lettered", "r1": "dead_lettered"}
    # And a redrive sends each once
    rig.drain()
    assert rig.states() == {"r0": "sent", "r1": "sent"}
    assert set(rig.provider.accepted.values()) == {1}


def test_7_overlapping_publishes_count_each_recipient_once(rig_for):
    rig = rig_for(recipients=5)
    rig.operator.publish("c1", rig.people[:4], batch_size=2)
    rig.operator.publish("c1", rig.people[1:5], batch_size=3)  # other batches, overlapping recipients
    status = rig.operator.status("c1")
    assert (status.total, status.pending) == (5, 5)
    assert not hasattr(rig.store.get("c1"), "total")  # no stored counter to drift from the ledger
    rig.drain()
    status = rig.operator.status("c1")
    assert (status.total, status.sent, status.state) == (5, 5, CampaignState.COMPLETED)
    assert set(rig.provider.accepted.values()) == {1}


def test_found_by_the_model_a_takeover_that_finds_the_address_suppressed_ends_unknown(rig_for):
    """Suppressed since an earlier attempt that may have been accepted: 'suppressed' would
    say the email was never sent. Found by the model check (mutant run of 2026-12-01)."""
    rig = rig_for(recipients=1)
    publish(rig)
    assert rig.process(receive(rig), crash_at=2, after=True) is None  # accepted, then the consumer died
    rig.suppressions.add("user0@example.com", SuppressionReason.UNSUBSCRIBED, "test")
    rig.drain()
    record = rig.ledger.get(next(iter(rig.ledger.records("c1"))).key)
    assert record.state.value == "unknown" and "earlier attempt may have been accepted" in record.reason
    assert rig.provider.accepted[("c1", "r0")] == 1


def test_a_first_attempt_that_finds_the_address_suppressed_ends_suppressed(rig_for):
    rig = rig_for(recipients=1)
    publish(rig)
    rig.suppressions.add("user0@example.com", SuppressionReason.UNSUBSCRIBED, "test")
    rig.drain()
    assert rig.states() == {"r0": "suppressed"} and rig.provider.accepted[("c1", "r0")] == 0


def test_found_by_the_model_a_campaign_completed_by_a_publish_still_completes_after_it_reopens(rig_for):
    """A publish that enqueues nothing new completes the campaign from the ledger while a
    crashed consumer's message is still queued; that message is then acknowledged on a
    completed campaign, unsettled. Completion resets the open-batch count, so a reopening
    publish completes again. Found by the model check's deep profile (2026-12-01)."""
    rig = rig_for(recipients=3)
    rig.operator.publish("c1", rig.people[:2], batch_size=1)
    rig.process(receive(rig))
    assert rig.process(receive(rig), crash_at=4) is None  # r1 sent; died before settling its batch
    rig.operator.publish("c1", rig.people[:2], batch_size=1)  # nothing new: the ledger says done
    assert rig.store.get("c1").state is CampaignState.COMPLETED
    rig.drain()  # the crashed consumer's message, on a completed campaign
    rig.operator.publish("c1", rig.people[2:], batch_size=1)  # reopens it
    assert rig.store.get("c1").state is CampaignState.SENDING
    rig.drain()
    assert rig.states() == {"r0": "sent", "r1": "sent", "r2": "sent"}
    assert rig.store.get("c1").state is CampaignState.COMPLETED


@pytest.mark.parametrize(
    ("provider", "accepted"),
    [("resend", True), ("resend", False), ("ses", True)],
    ids=["resend-had-it", "resend-never-had-it", "ses-had-it"],
)
def test_8_resume_including_unknown_sends_only_an_unknown_an_audit_proved_absent(rig_for, provider, accepted):
    rig = rig_for(provider=provider, recipients=2)
    publish(rig)
    # Given a consumer dies around its first provider call (r0): after the provider accepted
    # it, or before the call; a takeover a day later closes r0 as unknown and sends r1
    assert rig.process(receive(rig), crash_at=("send", 1), after=accepted) is None
    assert rig.provider.accepted[("c1", "r0")] == int(accepted)
    rig.clock.advance(25 * HOUR)
    rig.drain()
    assert rig.states() == {"r0": "unknown", "r1": "sent"}
    # When the operator resumes including unknowns without an audit: nothing is proven
    _, _, unproven = rig.resume_including_unknown()
    # And then audits (settling by evidence) and resumes including unknowns
    result = rig.audit(settle=True)
    _, _, report = rig.resume_including_unknown()
    rig.drain()
    # Then r0 got exactly one email, and only an r0 proven absent was reopened
    assert unproven.reopened == []
    proven = provider == "resend" and not accepted
    assert result.counts["unknown_not_sent" if proven else "unknown_sent"] == 1, result.counts
    assert report.reopened == (["r0"] if proven else [])
    assert rig.provider.accepted[("c1", "r0")] == 1 and rig.states() == {"r0": "sent", "r1": "sent"}
