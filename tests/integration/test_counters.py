"""Counters on moto: the real consumer sends, the stream poller feeds the real aggregator,
and the counters equal a full read of the ledger — after a crash mid-batch, and after the
whole stream is applied again."""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from collections.abc import Iterator

import boto3
import pytest

from sendonce.adapters.aws_session import aws_session
from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.adapters.dynamodb.report_aggregates import DynamoDBReportAggregates
from sendonce.domain.campaigns.counters import CounterAggregator
from sendonce.domain.campaigns.ports import StateChange
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.models import CampaignState
from sendonce.handlers import aggregator
from sendonce.settings import AggregatorSettings, ApiSettings, EventsSettings
from sendonce.wiring.aggregator import build_aggregator_service
from sendonce.wiring.api import campaign_service
from sendonce.wiring.clients import clients
from sendonce_local.resources import create_local_resources, verify_ses_sender
from sendonce_local.stream_poller import StreamPoller, counters_poller
from tests.integration.conftest import LocalSystem


@pytest.fixture
def counted(aws_env, moto, resend_server, monkeypatch) -> Iterator[LocalSystem]:
    """The `system` fixture's local sendonce, with the tables' streams on."""
    resources = create_local_resources(visibility_timeout_s=2, max_receive_count=5, streams=True)
    domain = f"{uuid.uuid4().hex[:8]}.example.com"
    verify_ses_sender(aws_session(), domain)
    env = resources.consumer_env(
        SENDONCE_PROVIDER_TIMEOUT_SECONDS=5,
        SENDONCE_SAFETY_MARGIN_MS=5000,
        SENDONCE_SEND_CONCURRENCY=4,
        SENDONCE_RESEND_REQUESTS_PER_SECOND=1000,
        SENDONCE_SES_SEND_RATE=1000,
        RESEND_API_URL=resend_server.url,
    )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    local = LocalSystem(resources=resources, resend=resend_server, endpoint=moto.endpoint, env=env, domain=domain)
    yield local
    for poller in local.pollers:
        poller.stop()


def operator(local: LocalSystem) -> CampaignService:
    return campaign_service(
        ApiSettings(
            ledger_table=local.resources.ledger_table,
            campaigns_table=local.resources.campaigns_table,
            queue_url=local.resources.queue_url,
            dead_letter_queue_url=local.resources.dead_letter_queue_url,
            counters=True,
        )
    )


def streams(local: LocalSystem, service: CounterAggregator | None = None, batch_size: int = 1000) -> StreamPoller:
    """A stream poller starting from the streams' beginning, as a new mapping would."""
    service = service or build_aggregator_service(
        AggregatorSettings(campaigns_table=local.resources.campaigns_table), clients()
    )
    return counters_poller(
        boto3.session.Session(),
        ledger_table=local.resources.ledger_table,
        campaigns_table=local.resources.campaigns_table,
        handler=functools.partial(aggregator.lambda_handler, service=service),
        batch_size=batch_size,
    )


def create(local: LocalSystem, service: CampaignService, campaign_id: str):
    from sendonce.domain.models import Campaign, Content

    return service.create(
        Campaign(
            campaign_id=campaign_id,
            name="Counted",
            provider="resend",
            ledger_shards=8,
            sender=f"news@{local.domain}",
            content=Content(subject="Hello {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}"),
        )
    )


def mixed(local: LocalSystem, n: int, start: int = 0) -> list:
    """`local.recipients`, every third at gmail.com (mailbox group `google`, the rest `other`),
    named after the test's own domain (the local Resend server is shared by the tests)."""
    tag = local.domain.split(".")[0]
    return [
        r.model_copy(update={"email": f"user{i}.{tag}@gmail.com"}) if i % 3 == 0 else r
        for i, r in enumerate(local.recipients(n, start=start), start=start)
    ]


def send(local: LocalSystem, service: CampaignService, campaign_id: str) -> None:
    create(local, service, campaign_id)
    service.publish(campaign_id, mixed(local, 30), batch_size=10)
    # Overlapping, packed differently: r20..r29 are published twice, counted once.
    service.publish(campaign_id, mixed(local, 25, start=20), batch_size=7)
    local.poller(concurrency=1, batch_size=1).run_until_idle(idle_seconds=1.0, max_seconds=120)


def report_of(local: LocalSystem, campaign_id: str):
    return DynamoDBReportAggregates(
        client=boto3.client("dynamodb"), table_name=local.resources.campaigns_table
    ).aggregates(campaign_id)


def assert_exact(service: CampaignService, campaign_id: str, local: LocalSystem | None = None) -> None:
    reconciliation = service.reconcile(campaign_id)
    assert reconciliation.counted and reconciliation.drifts == ()
    # The same comparison as a job, a page of one ledger shard a step (real Query pages).
    job = service.start_reconcile(campaign_id)
    assert job.result is not None and job.result["drifts"] == [] and job.progress["records_read"] == 45
    assert job.result["ledger"] == reconciliation.ledger.as_dict()
    status = service.status(campaign_id)
    assert (status.total, status.sent, status.remaining) == (45, 45, 0)
    if local is not None:
        # The report's per-minute outcomes ride in the counters' writes: exactly once too.
        report = report_of(local, campaign_id)
        sent = sum(b.counts.get("sent", 0) for b in report.outcomes_per_minute)
        assert sent == 45
        # And so do the sends per mailbox group, from the group each claim kept on the item.
        by_group = {g: sum(b.counts.get("sent", 0) for b in buckets) for g, buckets in report.groups_per_minute.items()}
        assert by_group == {"google": 15, "other": 30}


def test_counters_equal_a_full_read_and_the_campaign_completes(counted):
    service = operator(counted)
    aggregating = streams(counted, batch_size=50).start()  # alongside the consumer, as deployed

    send(counted, service, "c1")
    aggregating.stop()
    aggregating.drain()

    assert_exact(service, "c1")
    assert service.get("c1").state is CampaignState.COMPLETED
    sent = counted.resend.deliveries()
    assert sorted(sent[r.email] for r in mixed(counted, 45)) == [1] * 45


def test_an_aggregator_killed_mid_batch_and_restarted_gives_the_same_counters(counted):
    service = operator(counted)
    send(counted, service, "c1")
    send(counted, service, "c2")  # one batch of records holds both campaigns' items
    client = boto3.client("dynamodb")

    class Dying(DynamoDBCounters):
        writes = 0

        def advance(self, *args, **kwargs):
            if Dying.writes == 1:
                raise RuntimeError("aggregator killed")
            Dying.writes += 1
            return super().advance(*args, **kwargs)

    dying = CounterAggregator(
        counters=Dying(client=client, table_name=counted.resources.campaigns_table),
        campaigns=service._campaigns,
        clock_ms=lambda: 0,
    )
    first = streams(counted, dying)
    # Died after one campaign's write of the ledger's batch (one write per campaign: its
    # positions, totals and report together), and at once in the campaigns table's.
    assert first.poll_once() == 0 and first.counters.errors == 2 and Dying.writes == 1

    streams(counted).drain()  # restarted: the batch comes again

    for campaign_id in ("c1", "c2"):
        assert_exact(service, campaign_id, counted)
        assert service.get(campaign_id).state is CampaignState.COMPLETED


def test_the_whole_stream_applied_again_changes_no_count(counted):
    service = operator(counted)
    send(counted, service, "c1")
    streams(counted).drain()
    before = service.status("c1"), report_of(counted, "c1")

    replay = streams(counted).drain()  # a second mapping from the streams' beginning

    assert replay.records > 0 and (service.status("c1"), report_of(counted, "c1")) == before
    assert_exact(service, "c1", counted)


def test_the_cli_reconciles_a_campaign_and_names_every_drift(counted):
    from tests.integration.operator_helpers import as_json, sendonce

    service = operator(counted)
    send(counted, service, "c1")
    streams(counted).drain()
    env = {"SENDONCE_COUNTERS": "1"}
    assert as_json(sendonce(counted, "campaign", "reconcile", "c1", "--json", env=env))["drifts"] == []

    # A total that lost one `sent` (as a dead-lettered stream batch would leave it).
    client = boto3.client("dynamodb")
    [item] = [
        i
        for i in client.scan(TableName=counted.resources.campaigns_table, ConsistentRead=True)["Items"]
        if i["pk"]["S"].startswith("counters#c1#total#") and "n_sent" in i
    ][:1]
    client.update_item(
        TableName=counted.resources.campaigns_table,
        Key={"pk": item["pk"], "sk": item["sk"]},
        UpdateExpression="ADD n_sent :minus",
        ExpressionAttributeValues={":minus": {"N": "-1"}},
    )

    result = sendonce(counted, "campaign", "reconcile", "c1", env=env)
    assert result.exit_code == 1
    assert "sent" in result.stdout and "44" in result.stdout and "45" in result.stdout


def test_counter_keys_are_fixed_per_campaign_and_a_campaign_from_before_keeps_sixteen(counted):
    """New campaigns deal their counter items over min(128, ledger shards) keys (recorded at
    creation), a ledger shard `k` to key `k` mod that count, and keep totals; one created
    before the count was recorded keeps the 16 hashed keys its items were written under, and
    one created before the totals is read from its counter items, so an upgrade neither loses
    nor double-counts them."""
    from sendonce.adapters.dynamodb.counters import (
        COUNTER_PARTITIONS,
        LEGACY_COUNTER_PARTITIONS,
        key_index,
        recorded_key,
    )

    dynamodb, table = boto3.client("dynamodb"), counted.resources.campaigns_table
    service = operator(counted)
    for campaign_id in ("new", "mid", "old"):
        create(counted, service, campaign_id)
    dynamodb.update_item(TableName=table, Key=recorded_key("mid"), UpdateExpression="REMOVE sum_keys")
    dynamodb.update_item(TableName=table, Key=recorded_key("old"), UpdateExpression="REMOVE counter_keys, sum_keys")
    aggregating = streams(counted, batch_size=50).start()

    for campaign_id in ("new", "mid", "old"):
        service.publish(campaign_id, counted.recipients(20), batch_size=10)
    counted.poller(concurrency=1, batch_size=1).run_until_idle(idle_seconds=1.0, max_seconds=120)
    aggregating.stop()
    aggregating.drain()

    def placed(campaign_id: str) -> dict[str, int]:
        """Each counter item's stream, and the key index it sits under."""
        items = dynamodb.scan(
            TableName=table,
            FilterExpression="begins_with(pk, :p)",
            ExpressionAttributeValues={":p": {"S": f"counters#{campaign_id}#"}},
        )["Items"]
        return {
            i["sk"]["S"].removeprefix("from#"): int(i["pk"]["S"].rsplit("#", 1)[1])
            for i in items
            if i["sk"]["S"].startswith("from#")
        }

    def totals_kept(campaign_id: str) -> int:
        return dynamodb.scan(
            TableName=table,
            FilterExpression="begins_with(pk, :p)",
            ExpressionAttributeValues={":p": {"S": f"counters#{campaign_id}#total#"}},
        )["Count"]

    counters = DynamoDBCounters(client=dynamodb, table_name=table)
    # The campaign's 8 ledger shards: 8 keys (a status read is 8 Queries, not 128)
    assert (counters.partitions_of("new"), counters.partitions_of("old")) == (8, 16)
    assert (COUNTER_PARTITIONS, LEGACY_COUNTER_PARTITIONS) == (128, 16)
    new, old = placed("new"), placed("old")
    ledger_streams = [s for s in new if s.rsplit("#", 1)[-1].isdigit()]
    assert len(ledger_streams) == 8  # the campaign's 8 ledger shards, dealt to keys 0..7
    assert sorted(new[s] for s in ledger_streams) == list(range(8))
    assert all(index == key_index(s, 8, balanced=True) < 8 for s, index in new.items())
    assert old and all(index == key_index(s, 16, balanced=False) < 16 for s, index in old.items())
    # Totals only for the campaign created with them (the others are read from their items).
    assert totals_kept("new") > 0 and totals_kept("mid") == totals_kept("old") == 0
    for campaign_id in ("new", "mid", "old"):
        status = service.status(campaign_id)
        assert (status.total, status.sent, status.remaining) == (20, 20, 0)
        assert service.reconcile(campaign_id).drifts == ()


class Requests:
    """Every DynamoDB request a client makes, by operation."""

    def __init__(self, client) -> None:
        self.made: list[str] = []
        client.meta.events.register("before-call.dynamodb", lambda model, **_: self.made.append(model.name))

    def during(self, action) -> list[str]:
        start = len(self.made)
        action()
        return self.made[start:]


def test_a_status_read_and_a_completion_check_cost_the_same_few_requests_at_200_and_at_100000(counted):
    """Issue 35: a status read and a completion check read the campaign's totals (one
    BatchGetItem), not its counter items (129 Queries for 256 ledger shards before)."""
    from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
    from sendonce.adapters.dynamodb.counters import recorded_key
    from sendonce.domain.campaigns.ports import Advance, Counts
    from sendonce.domain.campaigns.status import delivery_status
    from sendonce.domain.models import Campaign, Content, DeliveryState

    client, table = boto3.client("dynamodb"), counted.resources.campaigns_table
    requests = Requests(client)
    service = operator(counted)
    for campaign_id in ("small", "large"):  # the default 256 ledger shards: 128 counter keys
        service.create(
            Campaign(
                campaign_id=campaign_id,
                name="Counted",
                provider="resend",
                sender=f"news@{counted.domain}",
                content=Content(subject="Hello {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}"),
            )
        )
    # 200 recipients sent through the consumer and the aggregator.
    service.publish("small", counted.recipients(200))
    counted.poller(concurrency=2, batch_size=1).run_until_idle(idle_seconds=1.0, max_seconds=240)
    streams(counted).drain()
    # 100,000 recipients, as the aggregator would have counted them (positions over every
    # ledger shard; their records need not exist for what a status read costs).
    counters = DynamoDBCounters(client=client, table_name=table)
    for start in range(0, 256, 32):
        moves = [
            Advance(f"large#{k}", None, 1, Counts(states=Counter({DeliveryState.SENT: 390}), published=390))
            for k in range(start, start + 32)
        ]
        assert counters.advance("large", moves)
    client.update_item(
        TableName=table,
        Key=recorded_key("large"),
        UpdateExpression="ADD batches :n",
        ExpressionAttributeValues={":n": {"N": "1000"}},
    )
    last = Counts(states=Counter({DeliveryState.SENT: 160}), published=160, batches=1000)  # 256 x 390 + 160
    counters.advance("large", [Advance("campaign#large#b0", None, 1, last)])
    store = DynamoDBCampaignStore(client=client, table_name=table)
    ledger = counted.ledger()

    for campaign_id, size in (("small", 200), ("large", 100_000)):
        status = delivery_status(store, ledger, campaign_id, DynamoDBCounters(client=client, table_name=table))
        made = requests.during(
            lambda c=campaign_id: delivery_status(store, ledger, c, DynamoDBCounters(client=client, table_name=table))
        )
        assert (status.total, status.sent, status.remaining) == (size, size, 0), campaign_id
        assert made == ["GetItem", "BatchGetItem"], campaign_id  # the campaign, then its totals

    # The aggregator's completion check of the large one (sending, nothing open): it completes.
    store.transition("large", StateChange(to=CampaignState.SENDING, allowed_from=(CampaignState.DRAFT,), by="test"))
    aggregator_ = CounterAggregator(
        counters=DynamoDBCounters(client=client, table_name=table), campaigns=store, clock_ms=lambda: 0
    )
    made = requests.during(lambda: aggregator_.complete_if_done("large"))
    assert store.get("large").state is CampaignState.COMPLETED
    assert len(made) <= 10 and made[:2] == ["GetItem", "BatchGetItem"], made


def test_a_counted_campaigns_brakes_divide_by_its_counters_and_its_sent_events_write_no_shard(counted):
    """The events function on moto: a counted campaign's `sent` events write no 'sent' shard;
    its complaint brake divides by the aggregator's total of sent (45), which alone passes
    the minimum sample."""
    from sendonce.adapters.dynamodb.ledger_events import SENT_SHARDS
    from sendonce.domain.deliverability.ports import EventKind, ProviderEvent
    from sendonce.wiring.events import build_events_service
    from sendonce_local.resources import create_suppressions_table

    service = operator(counted)
    send(counted, service, "c1")
    streams(counted).drain()
    suppressions = f"{counted.resources.campaigns_table}-suppressions"
    create_suppressions_table(boto3.client("dynamodb"), suppressions)
    events = build_events_service(
        EventsSettings(
            ledger_table=counted.resources.ledger_table,
            campaigns_table=counted.resources.campaigns_table,
            suppressions_table=suppressions,
            brake_min_sent=10,
            complaint_rate_threshold=0.05,
        ),
        clients(),
    )

    def event(kind: EventKind, i: int) -> ProviderEvent:
        return ProviderEvent(
            event_id=f"svix:{kind.value}-{i}",
            provider="resend",
            kind=kind,
            campaign_id="c1",
            recipient_id=f"r{i}",
            addresses=(mixed(counted, 1, start=i)[0].email,),
        )

    assert all(events.apply(event(EventKind.SENT, i)).status == "applied" for i in range(45))
    written = [
        boto3.client("dynamodb").query(
            TableName=counted.resources.campaigns_table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"campaign#c1#sent#{k}"}},
        )["Items"]
        for k in range(SENT_SHARDS)
    ]
    assert written == [[]] * SENT_SHARDS  # not one 'sent' shard

    # New recipients reopen it (sending, nobody consuming): a brake can pause it.
    service.publish("c1", mixed(counted, 5, start=100), batch_size=5)
    assert service.get("c1").state is CampaignState.SENDING
    assert [events.apply(event(EventKind.COMPLAINED, i)).brake for i in range(2)] == [None, None]  # 2 of 45: 4.4 %
    assert events.apply(event(EventKind.COMPLAINED, 2)).brake == "complaint"  # 3 of 45: 6.7 %
    assert "(3 complaints, 45 sent)" in (service.get("c1").state_reason or "")
