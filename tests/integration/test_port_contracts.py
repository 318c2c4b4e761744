"""The ports' contracts, written once and run against both implementations: the in-memory fake
(tests/fakes.py, domain/jobs/memory.py) and the DynamoDB adapter on moto's server; and every fake
has every method of its port, with the same parameters. Only what both are documented to do is
asserted (the protocol's verdicts and moves), not request shapes, history details or page sizes."""

from __future__ import annotations

import inspect
import time
import uuid
from typing import Protocol

import boto3
import pytest

from sendonce.adapters.dynamodb.account_health import DynamoDBHealthRecords
from sendonce.adapters.dynamodb.jobs import DynamoDBJobStore
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.recorded_test_sends import DynamoDBTestSendLog
from sendonce.adapters.dynamodb.suppressions import DynamoDBSuppressions
from sendonce.domain.campaigns.ports import CampaignCounters, CampaignScheduler, CampaignStore
from sendonce.domain.deliverability.ports import (
    HealthRecord,
    HealthRecords,
    LedgerEvents,
    ProviderAccount,
    Suppression,
    SuppressionReason,
    Suppressions,
    Verdict,
)
from sendonce.domain.errors import JobNotFoundError, LeaseLostError
from sendonce.domain.jobs.memory import InMemoryJobStore
from sendonce.domain.jobs.models import Job, JobKind
from sendonce.domain.jobs.ports import JobQueue, JobStore
from sendonce.domain.models import (
    DeliveryKey,
    DeliveryRequest,
    DeliveryState,
    Receipt,
    Recipient,
    SendGroup,
    TestSendOutcome,
    TestSendRecord,
    email_fingerprint,
)
from sendonce.domain.sending.ports import ClaimStatus, EmailProvider, Ledger, Queue
from sendonce.domain.sending.ports import TestSendLog as SendLogPort  # not named Test*: not a test class
from sendonce_local.resources import create_suppressions_table, create_tables
from tests import fakes

pytestmark = pytest.mark.integration

S = DeliveryState
LEASE_MS = 60_000
IMPLEMENTATIONS = ("fake", "dynamodb")


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def tables(request):  # a ledger table and a campaigns table of this test's own, on moto's server
    request.getfixturevalue("aws_env")
    client = boto3.client("dynamodb")
    name = f"contract-{uuid.uuid4().hex[:8]}"
    create_tables(client, ledger_table=name, campaigns_table=name + "-c")
    return client, name, name + "-c"


@pytest.fixture(params=IMPLEMENTATIONS)
def ledger(request) -> Ledger:
    if request.param == "fake":
        return fakes.FakeLedger()
    client, ledger_table, _ = request.getfixturevalue("tables")
    # Four shards: every key the adapter computes is a sharded one, and pages cross shards.
    return DynamoDBLedger(client=client, table_name=ledger_table, shards_of=lambda _: 4)


@pytest.fixture(params=IMPLEMENTATIONS)
def suppressions(request) -> Suppressions:
    if request.param == "fake":
        return fakes.FakeSuppressions()
    request.getfixturevalue("aws_env")
    client = boto3.client("dynamodb")
    table = f"contract-s-{uuid.uuid4().hex[:8]}"
    create_suppressions_table(client, table)
    return DynamoDBSuppressions(client=client, table_name=table, sleep=lambda s: None)


@pytest.fixture(params=IMPLEMENTATIONS)
def job_store(request) -> JobStore:
    if request.param == "fake":
        return InMemoryJobStore()
    client, _, campaigns_table = request.getfixturevalue("tables")
    return DynamoDBJobStore(client=client, table_name=campaigns_table)


@pytest.fixture(params=IMPLEMENTATIONS)
def test_send_log(request) -> SendLogPort:
    if request.param == "fake":
        return fakes.FakeTestSendLog()
    client, _, campaigns_table = request.getfixturevalue("tables")
    return DynamoDBTestSendLog(client=client, table_name=campaigns_table)


def delivery(owner: str, rid: str = "r1", *, idempotent: bool = True, campaign_id: str = "c1") -> DeliveryRequest:
    return DeliveryRequest(
        campaign_id=campaign_id,
        recipient_id=rid,
        batch_id="b1",
        email=f"{rid}@example.com",
        variables={},
        provider="resend" if idempotent else "ses",
        provider_idempotent=idempotent,
        owner=owner,
    )


def key(rid: str = "r1") -> DeliveryKey:
    return DeliveryKey(campaign_id="c1", recipient_id=rid)


def claim(ledger: Ledger, owner: str, rid: str = "r1", *, payload_hash: str = "h", lease_ms: int = LEASE_MS, **kw):
    return ledger.claim(
        delivery(owner, rid, **kw), payload_hash=payload_hash, lease_until_ms=now_ms() + lease_ms, now_ms=now_ms()
    )


# --- DeliveryClaims -----------------------------------------------------------------------


def test_a_new_delivery_is_claimed_by_its_first_owner(ledger):
    result = claim(ledger, "A")

    assert result.status is ClaimStatus.CLAIMED
    record = ledger.get(key())
    assert (record.state, record.owner, record.attempts, record.payload_hash) == (S.CLAIMED, "A", 1, "h")
    assert (record.batch_id, record.provider) == ("b1", "resend")
    assert record.lease_until_ms > now_ms()


def test_a_second_owner_is_held_while_the_lease_lives(ledger):
    claim(ledger, "A")

    result = claim(ledger, "B")

    assert result.status is ClaimStatus.HELD and result.record.owner == "A"
    assert ledger.get(key()).owner == "A"


def test_a_sent_delivery_is_final_to_every_later_claim(ledger):
    claim(ledger, "A")
    ledger.mark_sent(key(), owner="A", receipt=Receipt(provider_message_id="m-1"))

    record = ledger.get(key())
    result = claim(ledger, "B")

    assert (record.state, record.provider_message_id) == (S.SENT, "m-1")
    assert result.status is ClaimStatus.FINAL and result.record.state is S.SENT


def test_a_claim_with_another_payload_is_a_conflict(ledger):
    claim(ledger, "A", payload_hash="h1")
    ledger.mark_sent(key(), owner="A", receipt=Receipt(provider_message_id="m-1"))

    result = claim(ledger, "B", payload_hash="h2")

    assert result.status is ClaimStatus.CONFLICT and result.record.payload_hash == "h1"


def test_only_the_owner_writes_after_a_claim(ledger):
    claim(ledger, "A")

    with pytest.raises(LeaseLostError):
        ledger.settle(key(), owner="B", state=S.FAILED, reason="x", error_class="permanent", now_ms=now_ms())
    with pytest.raises(LeaseLostError):
        ledger.mark_sent(key(), owner="B", receipt=Receipt(provider_message_id="from-B"))
    with pytest.raises(LeaseLostError):
        ledger.mark_in_flight(key(), owner="B", now_ms=now_ms())
    with pytest.raises(LeaseLostError):
        ledger.mark_sent(key("never-claimed"), owner="A", receipt=Receipt(provider_message_id="m"))

    assert (ledger.get(key()).state, ledger.get(key()).owner) == (S.CLAIMED, "A")


def test_a_lapsed_lease_is_taken_over_and_fences_out_its_old_owner(ledger):
    claim(ledger, "A", lease_ms=-1)

    taken = claim(ledger, "B")

    assert taken.status is ClaimStatus.CLAIMED
    with pytest.raises(LeaseLostError):
        ledger.mark_sent(key(), owner="A", receipt=Receipt(provider_message_id="from-A"))
    ledger.mark_sent(key(), owner="B", receipt=Receipt(provider_message_id="from-B"))
    record = ledger.get(key())
    assert (record.state, record.owner, record.provider_message_id, record.attempts) == (S.SENT, "B", "from-B", 2)


def test_a_settled_failure_is_final_and_a_release_is_claimed_again(ledger):
    claim(ledger, "A", "r1")
    claim(ledger, "A", "r2")

    ledger.settle(key("r1"), owner="A", state=S.FAILED, reason="bad address", error_class="permanent", now_ms=now_ms())
    ledger.settle(key("r2"), owner="A", state=S.PENDING, reason="slow down", error_class="retryable", now_ms=now_ms())

    failed, released = ledger.get(key("r1")), ledger.get(key("r2"))
    assert (failed.state, failed.reason, failed.error_class) == (S.FAILED, "bad address", "permanent")
    assert (released.state, released.lease_until_ms) == (S.PENDING, None)
    assert claim(ledger, "B", "r1").status is ClaimStatus.FINAL
    assert claim(ledger, "B", "r2").status is ClaimStatus.CLAIMED
    assert (ledger.get(key("r2")).owner, ledger.get(key("r2")).attempts) == ("B", 2)


def test_a_stale_in_flight_ses_claim_is_closed_as_unknown(ledger):
    claim(ledger, "A", idempotent=False, lease_ms=-1)
    ledger.mark_in_flight(key(), owner="A", now_ms=now_ms())

    result = claim(ledger, "B", idempotent=False)

    assert result.status is ClaimStatus.FINAL and result.closed_as_unknown
    assert result.record.state is S.UNKNOWN and ledger.get(key()).state is S.UNKNOWN


def test_close_unclaimed_moves_only_what_nobody_holds_and_has_not_ended(ledger):
    claim(ledger, "A", "held")
    claim(ledger, "A", "sent")
    ledger.mark_sent(key("sent"), owner="A", receipt=Receipt(provider_message_id="m"))
    claim(ledger, "A", "released")
    ledger.settle(key("released"), owner="A", state=S.PENDING, reason="r", error_class="retryable", now_ms=now_ms())

    ids = ("held", "sent", "released")

    moved = ledger.close_unclaimed("c1", ids, state=S.DEAD_LETTERED, reason="poison", batch_id="b1")

    assert moved == 1
    assert [ledger.get(key(rid)).state for rid in ids] == [S.CLAIMED, S.SENT, S.DEAD_LETTERED]


# --- DeliveryReads ------------------------------------------------------------------------


def test_get_get_many_records_and_records_page_agree(ledger):
    ids = [f"r{i:02}" for i in range(11)]
    for rid in ids:
        claim(ledger, "A", rid)
    for rid in ids[::3]:
        ledger.mark_sent(key(rid), owner="A", receipt=Receipt(provider_message_id=f"m-{rid}"))
    claim(ledger, "A", "r00", campaign_id="other")  # another campaign's delivery is never read here

    every = {r.recipient_id: r for r in ledger.records("c1")}
    seen, cursor = [], None
    for _ in range(20):  # a bound: pages that never end fail below
        page, cursor = ledger.records_page("c1", cursor, 4)
        assert len(page) <= 4
        seen += page
        if cursor is None:
            break

    assert cursor is None
    assert sorted(every) == ids
    assert sorted(r.recipient_id for r in seen) == ids  # each record on exactly one page
    assert {r.recipient_id: r for r in seen} == every
    assert every == {rid: ledger.get(key(rid)) for rid in ids}
    assert ledger.get_many("c1", ["r03", "r04", "nobody"]) == {"r03": every["r03"], "r04": every["r04"]}
    assert every["r03"].state is S.SENT and every["r04"].state is S.CLAIMED
    assert ledger.get(key("nobody")) is None and ledger.get_many("c1", []) == {}
    assert list(ledger.records("empty")) == [] and ledger.records_page("empty", None, 4) == ([], None)


# --- SendGroupClaims ----------------------------------------------------------------------


def group(rids=("g1", "g2"), group_id: str = "b1-g0") -> SendGroup:
    return SendGroup(
        campaign_id="c1",
        group_id=group_id,
        recipients=[Recipient(recipient_id=rid, email=f"{rid}@example.com") for rid in rids],
    )


def claim_group(ledger: Ledger, owner: str, g: SendGroup | None = None):
    g = g or group()
    hashes = {r.recipient_id: "h" for r in g.recipients}
    return ledger.claim_group(
        g, hashes, owner=owner, provider="resend", lease_until_ms=now_ms() + LEASE_MS, now_ms=now_ms()
    )


def test_a_group_is_claimed_then_completed_member_by_member(ledger):
    claimed = claim_group(ledger, "A")

    assert claimed.claimed
    members = ledger.get_many("c1", ["g1", "g2"])
    assert {(r.state, r.owner, r.group_key) for r in members.values()} == {(S.CLAIMED, "A", group().idempotency_key)}

    ledger.complete_group(group(), owner="A", outcomes={"g1": Receipt(provider_message_id="m-g1"), "g2": "refused"})

    sent, failed = ledger.get(key("g1")), ledger.get(key("g2"))
    assert (sent.state, sent.provider_message_id, sent.lease_until_ms) == (S.SENT, "m-g1", None)
    assert (failed.state, failed.reason, failed.error_class) == (S.FAILED, "refused", "permanent")
    again = claim_group(ledger, "B")
    assert not again.claimed and set(again.final) == {"g1", "g2"}


def test_a_second_owners_group_claim_is_refused_while_the_first_holds_it(ledger):
    first = claim_group(ledger, "A")
    lease = ledger.get(key("g1")).lease_until_ms

    second = claim_group(ledger, "B")

    assert first.claimed and not second.claimed
    assert (second.final, second.held_until_ms) == ({}, lease)
    assert {r.owner for r in ledger.get_many("c1", ["g1", "g2"]).values()} == {"A"}
    with pytest.raises(LeaseLostError):
        ledger.complete_group(group(), owner="B", outcomes={"g1": "x", "g2": "x"})
    with pytest.raises(LeaseLostError):
        ledger.release_group(group(), owner="B", state=S.PENDING, reason="x", error_class="retryable")


def test_a_group_claim_takes_no_member_when_one_is_taken(ledger):
    claim(ledger, "A", "g2")  # one member claimed on its own

    refused = claim_group(ledger, "B")

    assert not refused.claimed and refused.held_until_ms == ledger.get(key("g2")).lease_until_ms
    assert ledger.get(key("g1")) is None and ledger.get(key("g2")).owner == "A"


def test_a_released_group_is_pending_and_a_refusal_lifts_its_owners_mark(ledger):
    claim_group(ledger, "A")
    ledger.release_group(group(), owner="A", state=S.PENDING, reason="throttled", error_class="retryable")

    kept = ledger.get(key("g1"))
    assert (kept.state, kept.lease_until_ms, kept.group_key) == (S.PENDING, None, group().idempotency_key)
    assert kept.maybe_sent_at_ms is not None  # the request may have reached the provider

    assert claim_group(ledger, "B").claimed  # the same group, under its key
    ledger.release_group(group(), owner="B", state=S.PENDING, reason="rejected", error_class="retryable", refused=True)
    members = ledger.get_many("c1", ["g1", "g2"]).values()
    # The marks are A's: B's refusal says nothing of A's request, so they stay.
    assert {(r.state, r.maybe_sent_by, r.group_key) for r in members} == {(S.PENDING, "A", group().idempotency_key)}


def test_a_refused_group_of_one_owner_loses_its_mark_and_may_regroup(ledger):
    claim_group(ledger, "A")

    ledger.release_group(group(), owner="A", state=S.PENDING, reason="rejected", error_class="retryable", refused=True)

    members = ledger.get_many("c1", ["g1", "g2"]).values()
    marks = {(r.state, r.maybe_sent_at_ms, r.maybe_sent_by, r.group_key) for r in members}
    assert marks == {(S.PENDING, None, None, None)}
    assert claim_group(ledger, "B", group(group_id="b1-g1")).claimed  # a new group for them


# --- Suppressions -------------------------------------------------------------------------


def test_adding_an_address_again_keeps_its_first_reason(suppressions):
    assert suppressions.add("user@example.com", SuppressionReason.BOUNCED, "ses", campaign_id="c1") is True
    assert suppressions.add("USER@example.com", SuppressionReason.MANUAL, "operator") is False

    found = suppressions.is_suppressed("user@example.com")
    fp = email_fingerprint("user@example.com")
    assert found == Suppression(fp, SuppressionReason.BOUNCED, "ses", "c1", created_at=found.created_at)
    assert suppressions.get(fp) == found and found.created_at
    assert suppressions.add_fingerprint(fp, SuppressionReason.UNSUBSCRIBED, "link") is False


def test_suppressed_among_names_only_the_suppressed_by_fingerprint(suppressions):
    suppressions.add("a@example.com", SuppressionReason.COMPLAINED, "ses")
    suppressions.add_fingerprint(email_fingerprint("b@example.com"), SuppressionReason.UNSUBSCRIBED, "link")

    found = suppressions.suppressed_among(["a@example.com", "b@example.com", "c@example.com", "a@example.com"])

    assert {fp: s.reason for fp, s in found.items()} == {
        email_fingerprint("a@example.com"): SuppressionReason.COMPLAINED,
        email_fingerprint("b@example.com"): SuppressionReason.UNSUBSCRIBED,
    }
    assert suppressions.suppressed_among([]) == {} and suppressions.is_suppressed("c@example.com") is None


def test_a_removed_address_is_sent_to_again_and_may_be_suppressed_anew(suppressions):
    suppressions.add("a@example.com", SuppressionReason.BOUNCED, "ses")

    assert suppressions.remove("a@example.com") is True
    assert suppressions.remove("a@example.com") is False
    assert suppressions.is_suppressed("a@example.com") is None
    assert suppressions.add("a@example.com", SuppressionReason.MANUAL, "operator") is True
    assert suppressions.is_suppressed("a@example.com").reason is SuppressionReason.MANUAL


def test_an_import_keeps_what_is_already_suppressed_and_the_list_shows_all(suppressions):
    suppressions.add("a@example.com", SuppressionReason.COMPLAINED, "ses")

    emails = ["a@example.com", "b@example.com", "c@example.com"]

    report = suppressions.import_(emails, reason=SuppressionReason.MANUAL, source="csv")

    assert (report.added, report.already_suppressed) == (2, 1)
    listed = {s.fingerprint: s.reason.value for s in suppressions.list()}
    assert listed == {email_fingerprint(e): r for e, r in zip(emails, ("complained", "manual", "manual"), strict=True)}


# --- JobStore -----------------------------------------------------------------------------


def test_creating_a_job_that_exists_returns_it_unchanged_and_an_unknown_one_is_not_found(job_store):
    job = Job(job_id=f"j-{uuid.uuid4().hex[:6]}", kind=JobKind.REPUBLISH, campaign_id="c1")

    assert job_store.create(job) == job
    assert job_store.create(job.model_copy(update={"steps": 3, "version": 1})) == job
    assert job_store.get(job.job_id) == job
    with pytest.raises(JobNotFoundError):
        job_store.get("nope")


def test_a_job_moves_on_only_from_the_version_it_was_read_at(job_store):
    job = job_store.create(Job(job_id=f"j-{uuid.uuid4().hex[:6]}", kind=JobKind.REPUBLISH, campaign_id="c1"))
    moved = job.model_copy(update={"steps": 1, "cursor": "batch#x", "version": 1})

    assert job_store.advance(job, moved) is True
    assert job_store.advance(job, moved.model_copy(update={"steps": 9, "version": 1})) is False  # read before
    assert job_store.get(job.job_id) == moved
    assert job_store.advance(moved, moved.model_copy(update={"steps": 2, "version": 2})) is True
    assert job_store.get(job.job_id).steps == 2


# --- TestSendLog --------------------------------------------------------------------------


def recorded_send(campaign_id: str, at: str, n: int) -> TestSendRecord:
    return TestSendRecord(
        test_send_id=f"t{n}",
        campaign_id=campaign_id,
        at=at,
        by="operator",
        provider="resend",
        subject="Hello",
        outcomes=[TestSendOutcome(email_fingerprint=f"fp{n}", provider_message_id=f"m{n}")],
    )


def test_recent_test_sends_are_the_newest_first_with_the_count_of_all(test_send_log):
    times = ["2026-01-01T10:00:00.000+00:00", "2026-01-01T12:00:00.000+00:00", "2026-01-01T11:00:00.000+00:00"]
    for n, at in enumerate(times):
        test_send_log.record(recorded_send("c1", at, n))
    test_send_log.record(recorded_send("c2", "2026-01-02T00:00:00.000+00:00", 9))

    newest, count = test_send_log.recent("c1", limit=2)
    every, _ = test_send_log.recent("c1", limit=10)

    assert ([r.test_send_id for r in newest], count) == (["t1", "t2"], 3)
    assert [r.test_send_id for r in every] == ["t1", "t2", "t0"] and every[0] == recorded_send("c1", times[1], 1)
    assert test_send_log.recent("nobody", limit=5) == ([], 0)


# --- the account health check's records ------------------------------------------------


@pytest.fixture(params=IMPLEMENTATIONS)
def health_records(request) -> HealthRecords:
    if request.param == "fake":
        return fakes.FakeHealthRecords()
    client, _, campaigns_table = request.getfixturevalue("tables")
    return DynamoDBHealthRecords(client=client, table_name=campaigns_table)


def test_the_last_health_record_is_the_one_recorded_last_per_provider(health_records):
    stopped = HealthRecord("ses", Verdict.STOPPED, "ses account: sending disabled", 1_000, 1_000, stopped_at_ms=1_000)
    back = HealthRecord("ses", Verdict.HEALTHY, "ses account: healthy", 9_000, 9_000, 1_000, back_at_ms=9_000)

    assert health_records.last("ses") is None
    health_records.record(stopped)
    assert health_records.last("ses") == stopped
    health_records.record(back)
    assert health_records.last("ses") == back
    assert health_records.last("resend") is None


# --- every fake has its port's methods, with the same parameters --------------------------

FAKES: list[tuple[type, type]] = [
    (fakes.FakeLedger, Ledger),
    (fakes.FakeProvider, EmailProvider),
    (fakes.FakeCampaignStore, CampaignStore),
    (fakes.FakeScheduler, CampaignScheduler),
    (fakes.FakeQueue, Queue),
    (fakes.FakeSuppressions, Suppressions),
    (fakes.FakeLedgerEvents, LedgerEvents),
    (fakes.FakeTestSendLog, SendLogPort),
    (fakes.FakeJobQueue, JobQueue),
    (fakes.FakeCounters, CampaignCounters),
    (InMemoryJobStore, JobStore),
    (fakes.FakeHealthRecords, HealthRecords),
    (fakes.FakeProviderAccount, ProviderAccount),
]


def port_methods(port: type) -> dict[str, object]:
    """Every method a Protocol declares, its own and its roles' (the union ports)."""
    methods: dict[str, object] = {}
    for cls in reversed([c for c in port.__mro__ if getattr(c, "_is_protocol", False) and c is not Protocol]):
        methods.update({n: f for n, f in vars(cls).items() if inspect.isfunction(f) and not n.startswith("_")})
    return methods


def parameters(function) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values() if p.name != "self"]


@pytest.mark.parametrize(("fake", "port"), FAKES, ids=[f.__name__ for f, _ in FAKES])
def test_each_fake_has_every_method_of_its_port_with_the_same_parameters(fake, port):
    methods = port_methods(port)
    assert methods, f"{port.__name__} declares no methods"
    missing = sorted(name for name in methods if not callable(getattr(fake, name, None)))
    differing = {
        name: (parameters(getattr(fake, name)), parameters(method))
        for name, method in methods.items()
        if name not in missing and parameters(getattr(fake, name)) != parameters(method)
    }

    assert not missing, f"{fake.__name__} lacks {port.__name__}'s {missing}"
    assert not differing, f"{fake.__name__}'s parameters differ from {port.__name__}'s: {differing}"


def test_the_contract_check_covers_every_fake_of_a_port():
    ported = {fake for fake, _ in FAKES}
    clocks = {"FakeClock", "LimiterClock"}  # clocks, not ports; every other class in tests/fakes.py stands in for one
    classes = {
        obj
        for name, obj in vars(fakes).items()
        if inspect.isclass(obj) and obj.__module__ == fakes.__name__ and name not in clocks
    }
    assert classes <= ported, f"fakes without a port check: {sorted(c.__name__ for c in classes - ported)}"
