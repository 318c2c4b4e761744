"""The small world the explorer runs the real consumer and operator code in: the in-memory
fakes of `tests/fakes.py` (plus the batch-mode methods they lack), the provider, queue and
clock of `tests/model/world.py`, and a snapshot of all of it that can be restored, hashed
and compared.

Only the outside world is written here. Every decision — claim verdicts, settlements,
cancel closures, group replays, campaign transitions — is taken by the real
`DeliveryService`, `GroupDelivery`, Powertools guards and `CampaignService`, which read the
protocol's tables (and whatever a mutant put in their place) at call time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.errors import LeaseLostError, PermanentProviderError
from sendonce.domain.jobs.service import InMemoryJobStore, JobService
from sendonce.domain.models import (
    Campaign,
    Content,
    DeliveryRecord,
    DeliveryState,
    Receipt,
    Recipient,
    SendGroup,
)
from sendonce.domain.sending import delivery_tables
from sendonce.domain.sending.delivery import DeliveryService
from sendonce.domain.sending.delivery_tables import Event, Verdict
from sendonce.domain.sending.guards import LedgerDeliveryGuard, LedgerGroupGuard
from sendonce.domain.sending.ports import GroupClaim
from tests.fakes import FakeCampaignStore, FakeLedger, FakeSuppressions
from tests.model.world import (
    CAMPAIGN_WRITES,
    KEY_LIFETIME_MS,
    LEDGER_WRITES,
    Clock,
    Crash,
    CrashingProxy,
    Ctx,
    Faults,
    Message,
    ProviderModel,
    QueueModel,
)

S = DeliveryState
HOUR = 3600 * 1000
LEASE_MS = 60_000
VISIBILITY_MS = 30_000  # shorter than a lease: a message comes back while its consumer lives
MAX_RECEIVES = 2  # a message's second receive is its last: SQS then moves it to the DLQ
START_MS = 4_000_000_000_000  # far ahead of the wall clock Powertools reads (leases never look expired to it)


class Steps(Faults):
    """The consumer's steps (every ledger or campaigns write, every provider call): where it
    may die (`crash_at`), or where another actor's whole action runs in between
    (`interrupt_at`: an operator, or a second consumer on the same message)."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupt_at: int | None = None
        self.interrupt = None
        self.nested = False

    def step(self, what: str) -> bool:
        if self.nested:
            return False
        if self.interrupt_at is not None and self.steps + 1 == self.interrupt_at:
            self.interrupt_at, action = None, self.interrupt
            self.nested = True
            try:
                action()
            finally:
                self.nested = False
        return super().step(what)


class Visits:
    """Which protocol rows the explored executions took: (event, source state) of every
    ledger write that applied, and the claim rules that decided."""

    def __init__(self) -> None:
        self.transitions: set[tuple[str, str]] = set()
        self.rules: set[tuple[str, str]] = set()  # (verdict, why) of CLAIM_RULES rows

    def transition(self, event: Event, source: DeliveryRecord | None) -> None:
        self.transitions.add((event.value, "absent" if source is None else source.state.value))


VISITS = Visits()


class ExploreLedger(FakeLedger):
    """FakeLedger with the batch-mode writes (claim, complete and release a send group in
    one transaction, as the DynamoDB adapter does), no history (it is not state the
    protocol reads) and every applied write noted in VISITS."""

    def _put(self, record: DeliveryRecord, event: str, owner: str | None = None) -> None:
        self.items[(record.campaign_id, record.recipient_id)] = record

    def _noting(self, key: tuple[str, str], event: Event) -> None:
        VISITS.transition(event, self.items.get(key))

    def claim(self, request, *, payload_hash, lease_until_ms, now_ms):
        before = self.items.get((request.campaign_id, request.recipient_id))
        result = super().claim(request, payload_hash=payload_hash, lease_until_ms=lease_until_ms, now_ms=now_ms)
        after = self.items.get((request.campaign_id, request.recipient_id))
        if after is not before and after is not None:
            VISITS.transition(Event.CLAIM if after.state is S.CLAIMED else Event.CLOSE_STALE, before)
        return result

    def mark_in_flight(self, key, *, owner, now_ms):
        before = self.items.get((key.campaign_id, key.recipient_id))
        super().mark_in_flight(key, owner=owner, now_ms=now_ms)
        VISITS.transition(Event.MARK_IN_FLIGHT, before)

    def mark_sent(self, key, *, owner, receipt):
        before = self.items.get((key.campaign_id, key.recipient_id))
        super().mark_sent(key, owner=owner, receipt=receipt)
        VISITS.transition(Event.MARK_SENT, before)

    def settle(self, key, *, owner, state, reason, error_class, maybe_sent=False, refused=False, now_ms):
        before = self.items.get((key.campaign_id, key.recipient_id))
        super().settle(
            key,
            owner=owner,
            state=state,
            reason=reason,
            error_class=error_class,
            maybe_sent=maybe_sent,
            refused=refused,
            now_ms=now_ms,
        )
        after = self.items[(key.campaign_id, key.recipient_id)].state  # suppressed may end unknown
        VISITS.transition(delivery_tables.settle_event(after, maybe_sent=maybe_sent), before)

    def close_unclaimed(self, campaign_id, recipient_ids, *, state, reason, batch_id):
        ids = list(recipient_ids)
        before = {rid: self.items.get((campaign_id, rid)) for rid in ids}
        moved = super().close_unclaimed(campaign_id, ids, state=state, reason=reason, batch_id=batch_id)
        event = Event.CLOSE_DEAD_LETTERED if state is S.DEAD_LETTERED else Event.CLOSE_SUPPRESSED
        for rid in ids:
            if self.items.get((campaign_id, rid)) is not before[rid]:
                VISITS.transition(event, before[rid])
        return moved

    def close_as_read(self, record, event, *, reason, now_ms, key=None, batch_id=None):
        closed = super().close_as_read(record, event, reason=reason, now_ms=now_ms, key=key, batch_id=batch_id)
        if closed is not None:
            VISITS.transition(event, record)
        return closed

    # --- batch mode: the DynamoDB adapter's transactions, over the same rules ---------------

    def claim_group(
        self, group: SendGroup, payload_hashes, *, owner, provider, lease_until_ms, now_ms, variants=None
    ) -> GroupClaim:
        with self._lock:
            records = {r.recipient_id: self.items.get((group.campaign_id, r.recipient_id)) for r in group.recipients}
            verdicts = {
                rid: delivery_tables.classify(
                    record,
                    payload_hash=payload_hashes[rid],
                    provider_idempotent=True,
                    now_ms=now_ms,
                    group_key=group.idempotency_key,
                )
                for rid, record in records.items()
            }
            if any(v is not Verdict.CLAIM for v in verdicts.values()):
                final = {rid: r for rid, r in records.items() if r is not None and r.state in delivery_tables.FINAL}
                leases = [
                    r.lease_until_ms
                    for r in records.values()
                    if r is not None and r.lease_until_ms and r.lease_until_ms >= now_ms
                ]
                return GroupClaim(claimed=False, final=final, held_until_ms=max(leases, default=None))
            for rid, record in records.items():
                base = record or DeliveryRecord(campaign_id=group.campaign_id, recipient_id=rid, state=S.PENDING)
                VISITS.transition(Event.CLAIM, record)
                self._put(
                    base.model_copy(
                        update={
                            "state": S.CLAIMED,
                            "owner": owner,
                            "lease_until_ms": lease_until_ms,
                            "attempts": base.attempts + 1,
                            "payload_hash": base.payload_hash or payload_hashes[rid],
                            "batch_id": group.group_id,
                            "provider": provider,
                            "maybe_sent_at_ms": base.maybe_sent_at_ms or now_ms,
                            "maybe_sent_by": base.maybe_sent_by or owner,
                            "group_key": group.idempotency_key,
                        }
                    ),
                    "claimed",
                )
            return GroupClaim(claimed=True)

    def _members(self, group: SendGroup, owner: str, events: dict[str, Event]) -> dict[str, DeliveryRecord]:
        members = {}
        for recipient in group.recipients:
            rid = recipient.recipient_id
            record = self.items.get((group.campaign_id, rid))
            if (
                record is None
                or record.owner != owner
                or record.state.value not in delivery_tables.sources(events[rid])
            ):
                raise LeaseLostError(f"group {group.group_id} is no longer owned by {owner}")
            members[rid] = record
        return members

    def complete_group(self, group: SendGroup, *, owner: str, outcomes: dict[str, Receipt | str]) -> None:
        with self._lock:
            events = {
                rid: Event.MARK_SENT if isinstance(outcome, Receipt) else Event.SETTLE_FAILED
                for rid, outcome in outcomes.items()
            }
            for rid, record in self._members(group, owner, events).items():
                VISITS.transition(events[rid], record)
                sent = events[rid] is Event.MARK_SENT
                self._put(
                    record.model_copy(
                        update={"state": S.SENT if sent else S.FAILED, "lease_until_ms": None}
                        | ({"provider_message_id": outcomes[rid].provider_message_id} if sent else {})
                    ),
                    "done",
                )

    def release_group(self, group: SendGroup, *, owner, state, reason, error_class, refused=False) -> None:
        with self._lock:
            event = delivery_tables.settle_event(state, maybe_sent=not refused)
            members = self._members(group, owner, {r.recipient_id: event for r in group.recipients})
            for record in members.values():
                VISITS.transition(event, record)
                update = {"state": state, "reason": reason, "error_class": error_class, "lease_until_ms": None}
                if refused and record.maybe_sent_by == owner:  # the lift guard: only the mark this owner set
                    update.update(maybe_sent_at_ms=None, maybe_sent_by=None, group_key=None)
                self._put(record.model_copy(update=update), state.value)


class ExploreStore(FakeCampaignStore):
    """FakeCampaignStore with the recorded send groups of batch mode."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[tuple[str, str], SendGroup] = {}

    def record_group(self, group: SendGroup) -> SendGroup:
        return self.groups.setdefault((group.campaign_id, group.group_id), group)

    def get_group(self, campaign_id: str, group_id: str) -> SendGroup | None:
        return self.groups.get((campaign_id, group_id))

    def groups_of_batch(self, campaign_id: str, batch_id: str) -> list[SendGroup]:
        return [
            g for (c, gid), g in sorted(self.groups.items()) if c == campaign_id and gid.rsplit("-g", 1)[0] == batch_id
        ]


class Provider(ProviderModel):
    """The model's provider (Resend keeps a key 24 h, a reused key with other content is a
    409; SES keeps none) with a permanent refusal added. Answers are scripted per call."""

    def _refusal(self) -> str | None:
        answer = super()._refusal()
        if answer == "permanent":
            if self.accepted[self._current]:
                # Validation looks at the content: what was accepted once is never refused
                # as invalid later (a repeat under the key, or SES's second request).
                return None
            raise PermanentProviderError("422 validation_error")
        return answer

    def send(self, email):
        self._current = (email.tags["campaign_id"], email.tags["recipient_id"])
        return super().send(email)

    def send_batch(self, emails, *, idempotency_key):
        accepted = [e for e in emails if self.accepted[(e.tags["campaign_id"], e.tags["recipient_id"])]]
        self._current = (accepted or emails)[0].tags["campaign_id"], (accepted or emails)[0].tags["recipient_id"]
        return super().send_batch(emails, idempotency_key=idempotency_key)


@dataclass(frozen=True)
class Snapshot:
    now_ms: int
    records: dict
    campaigns: dict
    groups: dict
    accepted: Counter
    keys: dict
    ambiguous: frozenset
    messages: tuple
    dlq: tuple
    risky: frozenset
    suppressed: dict
    jobs: dict


@dataclass
class World:
    """One provider and mode; two recipients in one published batch (one SQS message)."""

    provider_name: str
    mode: str
    recipients: int = 2
    clock: Clock = field(default_factory=lambda: Clock(START_MS))

    def __post_init__(self) -> None:
        self.faults = Steps()
        self.ledger = ExploreLedger()
        self.store = ExploreStore()
        self.queue = QueueModel(self.clock, max_receive_count=MAX_RECEIVES, visibility_ms=VISIBILITY_MS)
        self.provider = Provider(self.provider_name, self.provider_name == "resend", self.clock, self.faults)
        self.suppressions = FakeSuppressions()
        self.consumers = [self._consumer(), self._consumer()]
        # Jobs (resume, cancel) run in process; their items are state like the ledger's: a
        # job id names a campaign version, which a restored state has again.
        self.job_store = InMemoryJobStore()
        self.operator = CampaignService(
            campaigns=self.store,
            ledger=self.ledger,
            queue=self.queue,
            provider_names=[self.provider_name],
            clock_ms=self.clock,
            jobs=lambda service: JobService(
                jobs=self.job_store,
                queue=None,
                campaigns=self.store,
                clock=lambda: str(self.clock()),
                work=service.job_work(),
                on_finished=service.job_finished,
            ),
        )
        self.operator.create(
            Campaign(
                campaign_id="c1",
                name="explore",
                provider=self.provider_name,
                sender="news@example.com",
                delivery_mode=self.mode,
                content=Content(subject="Hi {{ name }}", text="Hello {{ name }}"),
            )
        )
        self.people = [
            Recipient(recipient_id=f"r{i}", email=f"user{i}@example.com", variables={"name": f"U{i}"})
            for i in range(self.recipients)
        ]
        self.risky: set[str] = set()
        self.operator.publish("c1", self.people, batch_size=self.recipients)

    def _consumer(self) -> DeliveryService:
        ledger = CrashingProxy(self.ledger, self.faults, LEDGER_WRITES)
        campaigns = CrashingProxy(self.store, self.faults, CAMPAIGN_WRITES)
        guard = LedgerDeliveryGuard(ledger, clock_ms=self.clock)
        group_guard = LedgerGroupGuard(ledger, clock_ms=self.clock)
        guard.register_lambda_context(Ctx(LEASE_MS))
        group_guard.register_lambda_context(Ctx(LEASE_MS))
        return DeliveryService(
            ledger=ledger,
            guard=guard,
            campaigns=campaigns,
            providers={self.provider_name: self.provider},
            queue=self.queue,
            group_guard=group_guard,
            suppressions=self.suppressions,
            send_concurrency=1,
            safety_margin_ms=5_000,
            throttle_retries=0,
            max_receive_count=MAX_RECEIVES,
            sleep=lambda s: None,
            clock_ms=self.clock,
        )

    # --- one consumer attempt ---------------------------------------------------------------

    def process(self, message: Message, *, consumer: int = 0) -> bool:
        """The consumer runs the message as received (Faults and the provider's script say
        where it dies and what the provider answers); ack or return it as the handler does.
        Returns False when it crashed (the message comes back after its visibility timeout)."""
        try:
            report = self.consumers[consumer].process(
                message.body, receive_count=message.receive_count, remaining_ms=lambda: LEASE_MS
            )
        except Crash:
            # What the dead consumer held may have been accepted without the ledger knowing.
            for rid, record in self.ledger.get_many("c1", [p.recipient_id for p in self.people]).items():
                if record.state in delivery_tables.HELD and (self.provider.idempotent or record.state is S.IN_FLIGHT):
                    self.risky.add(rid)
            return False
        if report.must_return:
            message.visible_at_ms = (report.return_at_ms + 1) if report.return_at_ms else self.clock() + VISIBILITY_MS
        elif message in self.queue.messages:
            self.queue.ack(message)
        return True

    # --- state --------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return Snapshot(
            now_ms=self.clock.now_ms,
            records=dict(self.ledger.items),
            campaigns=dict(self.store.campaigns),
            groups=dict(self.store.groups),
            accepted=Counter(self.provider.accepted),
            keys=dict(self.provider.keys),
            ambiguous=frozenset(self.provider.ambiguous),
            messages=tuple((m.body, m.receive_count, m.visible_at_ms) for m in self.queue.messages),
            dlq=tuple(m.body for m in self.queue.dlq),
            risky=frozenset(self.risky),
            suppressed=dict(self.suppressions.items),
            jobs=dict(self.job_store.jobs),
        )

    def restore(self, snap: Snapshot) -> None:
        self.clock.now_ms = snap.now_ms
        self.ledger.items = dict(snap.records)
        self.store.campaigns = dict(snap.campaigns)
        self.store.groups = dict(snap.groups)
        self.provider.accepted = Counter(snap.accepted)
        self.provider.keys = dict(snap.keys)
        self.provider.ambiguous = set(snap.ambiguous)
        self.provider.script = []
        self.provider.quota_until_ms = 0
        self.queue.messages = [Message(body, count, visible) for body, count, visible in snap.messages]
        self.queue.dlq = [Message(body) for body in snap.dlq]
        self.faults.crash_at, self.faults.after, self.faults.steps = None, False, 0
        self.faults.interrupt_at, self.faults.interrupt, self.faults.nested = None, None, False
        self.risky = set(snap.risky)
        self.suppressions.items = dict(snap.suppressed)
        self.job_store.jobs = dict(snap.jobs)


def _age(now: int, then: int | None, cap: int) -> int | None:
    """How long ago, capped where longer makes no difference to any rule (the key window)."""
    return None if then is None else min(now - then, cap)


def _ahead(now: int, until: int | None) -> int | None:
    """How far ahead (a lease, a visibility timeout); every past moment is the same: -1."""
    return None if until is None else max(until - now, -1)


def canonical(snap: Snapshot, bodies: dict[str, int]) -> tuple:
    """A hashable form of the state in which two states that no rule can tell apart are
    equal: owners reduced to "the mark is this owner's" (every new consumer has a new
    owner, so no other relation between owners is ever read), times relative to now and
    capped past the last threshold any rule compares against (Resend's 24 h key, the
    23 h window), message bodies numbered, the queue a multiset (a consumer may receive any
    visible message), provider message ids, reasons and history dropped."""
    now = snap.now_ms
    cap = KEY_LIFETIME_MS + 1

    def body(text: str) -> int:
        return bodies.setdefault(text, len(bodies))

    records = tuple(
        (
            rid,
            r.state.value,
            _ahead(now, r.lease_until_ms),
            _age(now, r.maybe_sent_at_ms, cap),
            None if r.maybe_sent_by is None else r.maybe_sent_by == r.owner,
            r.group_key,
            r.payload_hash is not None,
        )
        for (_, rid), r in sorted(snap.records.items())
    )
    campaign = snap.campaigns["c1"]
    return (
        records,
        (campaign.state.value, max(min(campaign.open_batches, 3), -1), campaign.publishing_until_ms is not None),
        tuple(sorted((gid, tuple(r.recipient_id for r in g.recipients)) for (_, gid), g in snap.groups.items())),
        tuple(sorted((k, min(n, 2)) for k, n in snap.accepted.items())),
        tuple(sorted((key, _age(now, first, cap), content) for key, (first, content, _) in snap.keys.items())),
        tuple(sorted(snap.ambiguous)),
        tuple(sorted((body(b), min(count, MAX_RECEIVES), _ahead(now, visible)) for b, count, visible in snap.messages)),
        tuple(sorted(body(b) for b in snap.dlq)),
        tuple(sorted(snap.risky)),
        tuple(sorted(snap.suppressed)),
    )
