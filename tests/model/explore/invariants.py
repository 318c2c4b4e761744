"""What the explorer checks: in every state (`check`), and after a fault-free drain from
every state (`drain_and_check`). The same invariants as the stateful model check."""

from __future__ import annotations

import json

from sendonce.domain.models import CampaignState, DeliveryState
from sendonce.domain.sending import delivery_tables
from tests.model.explore.world import LEASE_MS, MAX_RECEIVES, VISIBILITY_MS, World

S = DeliveryState


class InvariantError(AssertionError):
    pass


def check(world: World) -> None:
    """In every state: at most one email per delivery; the ledger never contradicts the
    provider; every recipient in exactly one visible state and the counts add up; a
    completed campaign has nothing left; nobody pending on a running campaign without a
    message that will bring them."""
    twice = {rid: n for (_, rid), n in world.provider.accepted.items() if n > 1}
    if twice:
        raise InvariantError(f"the provider sent twice: {twice}")
    status = world.operator.status("c1")
    records = {r.recipient_id: r for r in world.ledger.records("c1")}
    parts = (
        status.pending
        + status.in_progress
        + status.sent
        + status.failed
        + status.suppressed
        + status.unknown
        + status.cancelled
        + status.dead_lettered
    )
    if status.total != len(world.people) or parts != status.total:
        raise InvariantError(f"counts do not add up: {status.as_dict()}")
    for rid, record in records.items():
        accepted = world.provider.accepted[("c1", rid)]
        if record.state is S.SENT and accepted != 1:
            raise InvariantError(f"{rid} sent in the ledger, accepted {accepted} times")
        if record.state in (S.FAILED, S.SUPPRESSED, S.CANCELLED) and accepted:
            raise InvariantError(f"{rid} {record.state.value} but the provider accepted it")
    if status.state is CampaignState.COMPLETED and status.remaining:
        raise InvariantError(f"completed with {status.remaining} remaining")
    if status.state in (CampaignState.SENDING, CampaignState.COMPLETED, CampaignState.CANCELLED):
        # A message past its last receive brings nobody: SQS moves it to the DLQ when it returns.
        carried = {
            r["recipient_id"]
            for m in world.queue.messages
            if m.receive_count < MAX_RECEIVES
            for r in json.loads(m.body)["recipients"]
        }
        hidden = {
            p.recipient_id
            for p in world.people
            if (p.recipient_id not in records or records[p.recipient_id].state is S.PENDING)
            and p.recipient_id not in carried
        }
        if hidden:
            raise InvariantError(f"pending on a {status.state.value} campaign with no message to bring them: {hidden}")


def drain_and_check(world: World, rounds: int = 8) -> None:
    """A fault-free drain (past every lease and visibility timeout, every message processed,
    the DLQ redriven); then, unless paused: every recipient ended, or dead-lettered with
    its message in the DLQ; unknown only where an attempt may have been accepted without
    the ledger learning how it ended; a sending campaign with everyone ended completed."""
    for _ in range(rounds):
        world.clock.advance(LEASE_MS + VISIBILITY_MS + 1)
        progressed = False
        while (message := world.queue.receive(0)) is not None:
            progressed = True
            world.process(message)
        if world.queue.dlq:
            world.queue.redrive()
            progressed = True
        if not progressed and not world.queue.messages:
            break
    check(world)
    campaign = world.store.get("c1")
    if campaign.state in (CampaignState.PAUSED, CampaignState.DRAFT):
        return
    records = {r.recipient_id: r for r in world.ledger.records("c1")}
    in_dlq = {r["recipient_id"] for m in world.queue.dlq for r in json.loads(m.body)["recipients"]}
    stuck = {
        p.recipient_id: records[p.recipient_id].state.value if p.recipient_id in records else "pending"
        for p in world.people
        if p.recipient_id not in records
        or (
            records[p.recipient_id].state not in delivery_tables.FINAL
            and not (records[p.recipient_id].state is S.DEAD_LETTERED and p.recipient_id in in_dlq)
        )
    }
    if stuck:
        raise InvariantError(f"after a fault-free drain of a {campaign.state.value} campaign: {stuck}")
    unknown = {rid for rid, r in records.items() if r.state is S.UNKNOWN}
    risky = world.risky | {rid for (_, rid) in world.provider.ambiguous}
    if not unknown <= risky:
        raise InvariantError(f"unknown without a possibly accepted attempt: {sorted(unknown - risky)}")
    if campaign.state is CampaignState.SENDING:
        raise InvariantError("every recipient ended but the campaign did not complete")
