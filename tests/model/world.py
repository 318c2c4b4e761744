"""The world the model check drives the real code through: a provider that keeps
idempotency keys exactly 24 h, an SQS queue with receive counts and a DLQ, a clock that
jumps, and crashes at any write.

Only the outside world is modelled; the ledger and the campaigns table are the real
DynamoDB adapters on moto (in process), and the services, guards and rules are the real ones.

Over 500 lines: the provider, the queue, the clock and the crash points are one world; each
is small, and the model and the mutants' harness read them together.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from dataclasses import dataclass, field

from sendonce.domain.errors import AmbiguousProviderError, HaltProviderError, RetryableProviderError
from sendonce.domain.models import DeliveryRecord, OutboundEmail, Receipt

KEY_LIFETIME_MS = 24 * 3600 * 1000  # Resend forgets a key 24 h after its first request
# What the model reads of a ledger item after every step (everything but the history).
_SNAPSHOT = (
    "campaign_id",
    "recipient_id",
    "state",
    "owner",
    "lease_until_ms",
    "attempts",
    "batch_id",
    "payload_hash",
    "provider",
    "provider_message_id",
    "reason",
    "error_class",
    "maybe_sent_at_ms",
    "maybe_sent_by",
    "group_key",
)


class Crash(BaseException):
    """The consumer dies here: no handler, no finally in our code catches it (BaseException)."""


class Clock:
    def __init__(self, start_ms: int):
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass
class Faults:
    """Where the running consumer dies: at the n-th step it takes (a write to the ledger or
    the campaigns table, or a provider call), or at the n-th time it takes a step of a given
    name ("claim", "send", "settle", ...), before or after the step happens."""

    crash_at: int | tuple[str, int] | None = None
    after: bool = False
    steps: int = 0
    seen: Counter = field(default_factory=Counter)

    def arm(self, crash_at: int | tuple[str, int] | None, after: bool) -> None:
        self.crash_at, self.after, self.steps = crash_at, after, 0
        self.seen.clear()

    def step(self, what: str) -> bool:
        """Called before a step; raises Crash if the consumer dies before it. Returns whether
        it must die right after it."""
        self.steps += 1
        self.seen[what] += 1
        if self.crash_at is not None and self.crash_at in (self.steps, (what, self.seen[what])):
            self.crash_at = None
            if not self.after:
                raise Crash(f"before {what}")
            return True
        return False


class CrashingProxy:
    """Wraps an adapter: every method named in `writes` is a step where the consumer may die."""

    def __init__(self, inner, faults: Faults, writes: frozenset[str]):
        self._inner = inner
        self._faults = faults
        self._writes = writes

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in self._writes or not callable(attr):
            return attr

        def step(*args, **kwargs):
            die_after = self._faults.step(name)
            result = attr(*args, **kwargs)
            if die_after:
                raise Crash(f"after {name}")
            return result

        return step


LEDGER_WRITES = frozenset(
    {
        "claim",
        "mark_in_flight",
        "mark_sent",
        "settle",
        "close_unclaimed",
        "close_as_read",
        "claim_group",
        "complete_group",
        "release_group",
    }
)
CAMPAIGN_WRITES = frozenset({"transition", "batch_settled", "record_group", "reset_open_batches"})


def _hash(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _recipient(email: OutboundEmail) -> tuple[str, str]:
    return email.tags["campaign_id"], email.tags["recipient_id"]


@dataclass
class ProviderModel:
    """Resend (keyed: a key is remembered exactly 24 h from its first request, a replay
    with other content is a 409) or SES (no key). Refusals are scripted one call at a time."""

    name: str
    idempotent: bool
    clock: Clock
    faults: Faults
    accepted: Counter = field(default_factory=Counter)  # (campaign, recipient) -> emails accepted
    # (campaign, recipient) -> the variant tag of each email accepted (None: not an A/B campaign's)
    accepted_variants: dict = field(default_factory=dict)
    keys: dict[str, tuple[int, str, object]] = field(default_factory=dict)
    script: list[str] = field(default_factory=list)  # the next calls' answers
    quota_until_ms: int = 0
    calls: int = 0
    # Deliveries that got an ambiguous answer (a timeout, a 409 for other content): the
    # sender cannot know whether they were accepted.
    ambiguous: set = field(default_factory=set)
    max_batch: int = 100
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def _accept(self, email: OutboundEmail) -> None:
        self.accepted[_recipient(email)] += 1
        self.accepted_variants.setdefault(_recipient(email), []).append(email.tags.get("variant"))

    def _refusal(self) -> str | None:
        if self.clock() < self.quota_until_ms:
            return "quota"
        return self.script.pop(0) if self.script else None

    def _before(self, what: str, recipients: list[tuple[str, str]]) -> tuple[bool, str | None]:
        self.calls += 1
        die_after = self.faults.step(what)
        answer = self._refusal()
        if answer == "rate_limited":
            raise RetryableProviderError("429 rate_limit_exceeded", throttled=True, retry_after=0.0)
        if answer == "busy":
            raise RetryableProviderError("503 service_unavailable")
        if answer == "concurrent":
            # Says another request with the key is under way: the sender must treat it as
            # possibly accepted, so it counts as ambiguous here.
            self.ambiguous.update(recipients)
            raise RetryableProviderError("409 concurrent_idempotent_requests", proves_not_accepted=False)
        if answer == "quota":
            raise HaltProviderError("429 daily_quota_exceeded")
        if answer == "timeout_before":
            self.ambiguous.update(recipients)
            raise AmbiguousProviderError("read timeout")
        return die_after, answer

    def _replay(self, key: str, body: str, recipients: list[tuple[str, str]]):
        known = self.keys.get(key)
        if known is None or self.clock() - known[0] >= KEY_LIFETIME_MS:
            return None
        if known[1] != body:
            self.ambiguous.update(recipients)
            raise AmbiguousProviderError("409 invalid_idempotent_request", repeatable=False)
        return known[2]

    def send(self, email: OutboundEmail) -> Receipt:
        who = [_recipient(email)]
        die_after, answer = self._before("send", who)
        body = _hash(email.model_dump(mode="json"))
        if self.idempotent and (replayed := self._replay(email.idempotency_key, body, who)) is not None:
            receipt = replayed
        else:
            self._accept(email)
            receipt = Receipt(provider_message_id=f"{self.name}-{next(self._ids)}")
            if self.idempotent:
                self.keys[email.idempotency_key] = (self.clock(), body, receipt)
        if die_after:
            raise Crash("after the provider accepted")
        if answer == "timeout_after":
            self.ambiguous.update(who)
            raise AmbiguousProviderError("read timeout after the provider accepted")
        return receipt

    def send_batch(self, emails: list[OutboundEmail], *, idempotency_key: str) -> list[Receipt | str]:
        who = [_recipient(e) for e in emails]
        die_after, answer = self._before("send_batch", who)
        body = _hash([e.model_dump(mode="json") for e in emails])
        if (replayed := self._replay(idempotency_key, body, who)) is not None:
            receipts = replayed
        else:
            receipts = []
            for email in emails:
                self._accept(email)
                receipts.append(Receipt(provider_message_id=f"{self.name}-{next(self._ids)}"))
            self.keys[idempotency_key] = (self.clock(), body, receipts)
        if die_after:
            raise Crash("after the provider accepted the batch")
        if answer == "timeout_after":
            self.ambiguous.update(who)
            raise AmbiguousProviderError("read timeout after the provider accepted")
        return list(receipts)


class ModelRecords:
    """The provider's own record of what it accepted, as the audit reads it (domain/audit):
    every accepted email, tagged. Resend's listing is complete and proves an email absent;
    SES's events prove nothing absent (an accepted send whose events were lost looks alike)."""

    def __init__(self, provider: ProviderModel, emails: dict[str, str]):
        self.name = provider.name
        self.proves_absence = provider.idempotent
        self.retention_ms = None
        self.requests = 0
        self._provider = provider
        self._emails = emails  # recipient id -> address

    def listed(self, campaign_id: str, *, since_ms: int):
        from sendonce.domain.audit.records import ListedEmail
        from sendonce.domain.models import email_fingerprint

        self.requests += 1
        for (cid, rid), count in sorted(self._provider.accepted.items()):
            for n in range(count):
                yield ListedEmail(
                    email_id=f"{cid}-{rid}-{n}",
                    to_fingerprints=(email_fingerprint(self._emails[rid]),),
                    sender="news@example.com",
                    subject="",
                    created_at_ms=self._provider.clock(),
                    campaign_id=cid,
                    recipient_id=rid,
                )

    def tags(self, email_id: str):  # pragma: no cover - every listed email carries them
        return None


@dataclass(eq=False)
class Message:
    body: str
    receive_count: int = 0
    visible_at_ms: int = 0
    # Its campaign, as the publisher tagged it (MessageGroupId): a fair queue's tenant.
    group_id: str | None = None
    # Its last receive died before the consumer wrote anything: no consumer can label its
    # recipients then, so SQS moves it to the DLQ with them pending (the one window the
    # dead-letter-first rule cannot close; docs/ledger.md).
    last_receive_died_unwritten: bool = False


class QueueModel:
    """SQS with redrive: a message received more than `max_receive_count` times moves to the DLQ.

    A fair queue when messages carry groups (`receive_fair`, the fault-free drain's receive):
    AWS's rules as the local stack's moto patch emulates them (sendonce_local.moto_patches.
    sqs_fairness), a receive being one unit of processing time. The rules' own receives pick
    any visible message (an adversary's order); the drain's note, per campaign with messages
    visible, how many receives went by since it was last served (`starved`: past the bound)."""

    def __init__(self, clock: Clock, *, max_receive_count: int, visibility_ms: int):
        self.clock = clock
        self.max_receive_count = max_receive_count
        self.visibility_ms = visibility_ms
        self.messages: list[Message] = []
        self.dlq: list[Message] = []
        self.processing: Counter[str | None] = Counter()
        self.waiting: dict[str, int] = {}
        self.starved: list[tuple[str, int, int]] = []  # (campaign, receives it waited, the bound)

    # the Queue port
    def publish(self, campaign_id: str, bodies: list[str]) -> None:
        from sendonce.adapters.sqs_queue import batch_entries

        entries = batch_entries(campaign_id, {str(i): body for i, body in enumerate(bodies)})
        self.messages.extend(Message(e["MessageBody"], group_id=e.get("MessageGroupId")) for e in entries)

    def dead_letter(self, body: str, *, reason: str) -> None:
        self.dlq.append(Message(body))

    def return_later(self, source_arn: str, receipt_handle: str, *, seconds: int) -> None:  # pragma: no cover
        raise AssertionError("the model's consumer sets visibility itself")

    # what SQS does
    def receive(self, index: int) -> Message | None:
        visible = self.visible()
        if not visible:
            return None
        message = visible[index % len(visible)]
        if message.receive_count >= self.max_receive_count:
            self.messages.remove(message)
            self.dlq.append(message)
            return None
        message.receive_count += 1
        message.visible_at_ms = self.clock() + self.visibility_ms
        return message

    def receive_fair(self) -> Message | None:
        """A fair queue's receive: quiet tenants' messages first, then noisy ones', fewest in
        flight and smallest share of the processing time first (the local emulation's rules)."""
        from sendonce.domain.campaigns.batches import campaign_named_by
        from sendonce_local.moto_patches.sqs_fairness import fair_order, noisy_tenants

        visible = self.visible()
        if not visible:
            self.waiting.clear()
            return None
        now = self.clock()
        in_flight = Counter(m.group_id for m in self.messages if m.visible_at_ms > now)
        noisy = noisy_tenants(in_flight, self.processing)
        first = fair_order(visible, noisy=noisy)[0]
        quiet = (-1, 0.0)  # fair_order's rank of a quiet tenant: before every noisy one
        # Liveness is the campaigns' (named by the body), whatever groups the messages carry:
        # each campaign with messages visible, and the best rank among them.
        waiting: dict[str, tuple[int, float]] = {}
        for m in visible:
            if campaign := campaign_named_by(m.body):
                waiting[campaign] = min(waiting.get(campaign, (2**31, 1.0)), noisy.get(m.group_id, quiet))
        self._note_turns(waiting, campaign_named_by(first.body), noisy.get(first.group_id, quiet))
        self.processing[first.group_id] += 1
        return self.receive(visible.index(first))

    def _note_turns(self, waiting: dict[str, tuple[int, float]], served: str | None, rank: tuple[int, float]) -> None:
        """Liveness: a campaign with messages visible is served within 2 x (campaigns waiting) + 1
        receives that it ranked as well as the served message for.

        A receive whose message the fair queue's measures ranked first (a quiet tenant before
        noisy ones, the less noisy before the noisier) does not count: that wait is the fair
        queue's design, and it ends when the measures turn. Its length grows with the waiting
        campaign's own history in the drain (one received 60 times waits 10 receives behind
        one newly visible), so no count of campaigns bounds it. Mutant 13 leaves every message
        a tenant of its own, never noisy: every receive counts, and n2 waits behind n1."""
        bound = 2 * len(waiting) + 1
        for group in list(self.waiting):
            if group not in waiting:
                del self.waiting[group]
        for group, best in waiting.items():
            if group == served:
                self.waiting[group] = 0
            elif rank < best:
                self.waiting.setdefault(group, 0)
            else:
                self.waiting[group] = self.waiting.get(group, 0) + 1
            if self.waiting[group] > bound:
                self.starved.append((group, self.waiting[group], bound))

    def receive_this(self, message: Message) -> Message | None:
        """SQS hands out this message (its visibility timeout has passed), or moves it to the DLQ."""
        if message not in self.messages or message.visible_at_ms > self.clock():
            return None
        return self.receive(self.visible().index(message))

    def visible(self) -> list[Message]:
        return [m for m in self.messages if m.visible_at_ms <= self.clock()]

    def ack(self, message: Message) -> None:
        self.messages.remove(message)

    def redrive(self) -> int:
        from sendonce.domain.campaigns.batches import campaign_named_by

        moved = len(self.dlq)
        # A new message (new id, receive count 0), in its campaign's group as `sendonce dlq redrive` sends it.
        self.messages.extend(Message(m.body, group_id=campaign_named_by(m.body)) for m in self.dlq)
        self.dlq.clear()
        return moved


class Ctx:
    """The Lambda context the guards register: leases are this long."""

    function_name = "model"

    def __init__(self, remaining_ms: int = 60_000):
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class Rig:
    """The real consumer and operator services over the real DynamoDB adapters, with the
    modelled provider, queue and clock. Used by the model check and the regression tests."""

    def __init__(
        self,
        client,
        *,
        provider: str,
        mode: str,
        clock: Clock,
        lease_ms: int = 60_000,
        visibility_ms: int = 30_000,
        max_receive_count: int = 5,
        recipients: int = 7,
    ):
        import uuid

        from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
        from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
        from sendonce.adapters.dynamodb.warmup import DynamoDBWarmupBudget
        from sendonce.domain.campaigns.service import CampaignService
        from sendonce.domain.models import Campaign, Content, Recipient
        from sendonce.domain.sending.delivery import DeliveryService
        from sendonce.domain.sending.guards import LedgerDeliveryGuard, LedgerGroupGuard
        from sendonce_local.resources import create_tables
        from tests.fakes import FakeScheduler, FakeSuppressions
        from tests.model.warmup import warm_schedule

        self.clock, self.lease_ms, self.mode, self._client = clock, lease_ms, mode, client
        self.faults = Faults()
        name = f"m{uuid.uuid4().hex[:10]}"
        create_tables(client, ledger_table=name, campaigns_table=name + "-c", streams=True)
        self.ledger = DynamoDBLedger(
            client=client, table_name=name, shards_of=lambda c: self.store.get(c).ledger_shards
        )
        # Counted from creation: the counters' aggregator (`aggregate`) reads both streams.
        self.store = DynamoDBCampaignStore(client=client, table_name=name + "-c", counted=True)
        self.stream_tables = (name, name + "-c")
        self.checkpoints: dict[str, int | None] = dict.fromkeys(self.stream_tables)
        self.queue = QueueModel(clock, max_receive_count=max_receive_count, visibility_ms=visibility_ms)
        self.provider = ProviderModel(provider, provider == "resend", clock, self.faults)
        self.suppressions = FakeSuppressions()
        ledger = CrashingProxy(self.ledger, self.faults, LEDGER_WRITES)
        campaigns = CrashingProxy(self.store, self.faults, CAMPAIGN_WRITES)
        guard, group_guard = (
            LedgerDeliveryGuard(ledger, clock_ms=clock),
            LedgerGroupGuard(ledger, clock_ms=clock),
        )
        guard.register_lambda_context(Ctx(lease_ms))
        group_guard.register_lambda_context(Ctx(lease_ms))
        # Campaign u1's sending domain warms up from the model's first day (tests/model/warmup.py);
        # the day's cap pausing it sets the next day's opening on the scheduler.
        self.warmup_start_ms = clock()
        self.scheduler = FakeScheduler()
        self.consumer = DeliveryService(
            ledger=ledger,
            guard=guard,
            campaigns=campaigns,
            providers={provider: self.provider},
            queue=self.queue,
            group_guard=group_guard,
            suppressions=self.suppressions,
            send_concurrency=1,
            safety_margin_ms=5_000,
            throttle_retries=1,
            max_receive_count=max_receive_count,
            sleep=lambda s: None,
            clock_ms=clock,
            warmup=warm_schedule(self.warmup_start_ms),
            warmup_budget=DynamoDBWarmupBudget(client=client, table_name=name + "-c", clock=lambda: clock() / 1000),
            scheduler=self.scheduler,
        )
        self.operator = CampaignService(
            campaigns=self.store,
            ledger=self.ledger,
            queue=self.queue,
            provider_names=[provider],
            clock_ms=clock,
            scheduler=self.scheduler,
            variant_figures=lambda campaign: self.variant_figures.get(campaign.campaign_id, {}),
        )
        # An A/B campaign's test figures, as the report would count them (tests/model/variants.py).
        self.variant_figures: dict[str, dict] = {}
        self.operator.create(
            Campaign(
                campaign_id="c1",
                name="model",
                provider=provider,
                sender="news@example.com",
                delivery_mode=mode,
                ledger_shards=3,  # sharded keys, without 256 Queries per whole-campaign read
                content=Content(subject="Hi {{ name }}", text="Hello {{ name }}"),
            )
        )
        self.people = [
            Recipient(recipient_id=f"r{i}", email=f"user{i}@example.com", variables={"name": f"U{i}"})
            for i in range(recipients)
        ]
        # Other campaigns' recipients (tests/model/sharing.py), by id: the provider's listing
        # an audit reads holds every campaign's emails.
        self.other_emails: dict[str, str] = {}

    def process(
        self,
        message,
        *,
        crash_at: int | tuple[str, int] | None = None,
        after: bool = False,
        budget_ms: int | None = None,
    ):
        """One consumer attempt on a received message; returns the report, or None if it
        crashed. `crash_at`: the n-th step, or (step name, n) the n-th step of that name."""
        self.faults.arm(crash_at, after)
        try:
            report = self.consumer.process(
                message.body,
                receive_count=message.receive_count,
                remaining_ms=lambda: budget_ms if budget_ms is not None else self.lease_ms,
            )
        except Crash:
            return None
        finally:
            self.faults.crash_at = None
        if report.must_return:
            message.visible_at_ms = (
                (report.return_at_ms + 1) if report.return_at_ms else self.clock() + self.queue.visibility_ms
            )
        elif message in self.queue.messages:
            self.queue.ack(message)
        return report

    def drain(self, rounds: int = 12) -> None:
        """Fault-free: past every lease and visibility timeout, every message processed, the DLQ redriven."""
        self.queue.processing.clear()
        for _ in range(rounds):
            self.clock.advance(self.lease_ms + self.queue.visibility_ms + 1)
            progressed = False
            while (message := self.queue.receive_fair()) is not None:
                progressed = True
                self.process(message)
            if self.queue.dlq:
                self.queue.redrive()
                progressed = True
            if not progressed and not self.queue.messages:
                return

    def close(self) -> None:
        """Drops this rig's tables, and moto's record of every model instance it made: moto
        keeps every table until the process ends, and every copy of one, too (a transaction
        deep-copies its tables to roll back; `BaseModel` tracks each copy for its dashboard),
        so a deep run grew past 20 GB."""
        from moto.core.model_instances import reset_model_data

        for table in self.stream_tables:
            self._client.delete_table(TableName=table)
        reset_model_data()

    def aggregate(
        self, *, limit: int | None = None, crash_after: int | None = None, dies_after_its_write: bool = False
    ) -> int:
        """The counters' aggregator on each table's stream (moto's backend, in process): the
        next `limit` records after its checkpoint, as the stack's mappings select them. It
        dies after `crash_after` counter writes, before the next one, or, with
        `dies_after_its_write`, right after the last (its batch then comes again: the
        checkpoint moves only after a batch applied whole). Returns the records it went past."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        from sendonce.adapters.dynamodb.counters import DynamoDBCounters
        from sendonce.adapters.dynamodb.stream_records import changes_of
        from sendonce.domain.campaigns.counters import CounterAggregator
        from sendonce_local.stream_poller import inserted_batch_records

        class Dying(DynamoDBCounters):
            left = crash_after

            def advance(self, *args, **kwargs):
                if Dying.left is not None:
                    if Dying.left <= 0:
                        raise Crash("the aggregator dies")
                    Dying.left -= 1
                    if Dying.left == 0 and dies_after_its_write:
                        super().advance(*args, **kwargs)
                        raise Crash("the aggregator dies after its write")
                return super().advance(*args, **kwargs)

        backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        counters = Dying(client=self._client, table_name=self.stream_tables[1], marker_workers=1, partitions=1)
        aggregator = CounterAggregator(counters=counters, campaigns=self.store, clock_ms=self.clock)
        went = 0
        for table in self.stream_tables:
            after = self.checkpoints[table]
            shard = backend.get_table(table).stream_shard
            records = [r.to_json() for r in shard.items]
            records = [r for r in records if after is None or int(r["dynamodb"]["SequenceNumber"]) > after][:limit]
            if not records:
                continue
            chosen = [r for r in records if table == self.stream_tables[0] or inserted_batch_records(r)]
            try:
                aggregator.apply(changes_of(chosen))
            except Crash:
                return went
            self.checkpoints[table] = int(records[-1]["dynamodb"]["SequenceNumber"])
            went += len(records)
        return went

    def counters(self):
        from sendonce.adapters.dynamodb.counters import DynamoDBCounters

        return DynamoDBCounters(client=self._client, table_name=self.stream_tables[1], marker_workers=1, partitions=1)

    def snapshot(self) -> dict[str, DeliveryRecord]:
        """The campaign's ledger items without their history (the model reads them after
        every step; moto's serialization of the growing history was most of that cost)."""
        from sendonce.adapters.dynamodb.ledger import _record

        names = ", ".join(f"#a{i}" for i in range(len(_SNAPSHOT)))
        items = self.ledger._keys.query_campaign(
            self._client,
            self.ledger._table,
            "c1",
            ProjectionExpression=names,
            ExpressionAttributeNames={f"#a{i}": a for i, a in enumerate(_SNAPSHOT)},
        )
        return {r.recipient_id: r for r in map(_record, items)}

    def states(self) -> dict[str, str]:
        return {r.recipient_id: r.state.value for r in self.ledger.records("c1")}

    def audit(self, *, settle: bool = True):
        """`sendonce campaign audit c1 [--settle]` against the modelled provider's records."""
        from sendonce.domain.audit.service import CampaignAudit

        return CampaignAudit(
            campaigns=self.store,
            ledger=self.ledger,
            ledger_events=self.ledger_events(),
            records=ModelRecords(self.provider, {p.recipient_id: p.email for p in self.people} | self.other_emails),
            clock_ms=self.clock,
        ).run("c1", settle=settle)

    def ledger_events(self):
        from sendonce.adapters.dynamodb.ledger_events import DynamoDBLedgerEvents

        return DynamoDBLedgerEvents(
            client=self._client,
            ledger_table=self.ledger._table,
            campaigns_table=self.store._table,
            shards_of=lambda c: self.store.get(c).ledger_shards,
        )

    def resume_including_unknown(self):
        """`sendonce campaign resume c1 --include-unknown` (no possible duplicates accepted)."""
        from sendonce.domain.campaigns.unknowns import UnknownOutcomes

        outcomes = UnknownOutcomes(ledger_events=self.ledger_events(), clock_ms=self.clock)
        return self.operator.resume_including_unknown("c1", outcomes)
