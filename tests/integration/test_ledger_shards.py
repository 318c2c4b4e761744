"""The ledger spread over partition-key shards, on moto's server: the write units each
partition-key value takes while a batch-mode campaign sends with provider events on, and a
campaign created before shards existed finishing under this version."""

from __future__ import annotations

import functools
import uuid
from collections import Counter

import boto3
import pytest

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.ledger_keys import CampaignShards, one_shard
from sendonce.adapters.providers import registry
from sendonce.adapters.sqs_queue import SqsQueue
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.models import Campaign, CampaignState, Content, DeliveryRequest, DeliveryState, Receipt
from sendonce.domain.sending.guards import LedgerDeliveryGuard
from sendonce.domain.sending.shards import shard_of
from sendonce.handlers import consumer, events
from sendonce.wiring.clients import Clients
from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime
from sendonce.wiring.events import build_events_service
from sendonce_local.http_api import LocalHttpApi
from sendonce_local.poller import LocalLambdaContext
from sendonce_local.resources import create_tables
from sendonce_local.write_units import WriteUnitAccountant, per_key_report

pytestmark = pytest.mark.integration


# --- the accountant ------------------------------------------------------------------------


def test_the_accountant_charges_each_write_by_the_item_it_leaves(aws_env):
    name = f"wu-{uuid.uuid4().hex[:8]}"
    reader = boto3.client("dynamodb")
    create_tables(reader, ledger_table=name, campaigns_table=name + "-c")
    accountant = WriteUnitAccountant(reader)
    client = accountant.attach(boto3.client("dynamodb"))
    key = {"campaign_id": {"S": "p1"}, "recipient_id": {"S": "a"}}

    client.put_item(TableName=name, Item={**key, "body": {"S": "x" * 1500}})  # 1.5 KB: 2 units
    client.update_item(  # now 2.5 KB: 3 units
        TableName=name, Key=key, UpdateExpression="SET more = :m", ExpressionAttributeValues={":m": {"S": "y" * 1000}}
    )
    with pytest.raises(client.exceptions.ConditionalCheckFailedException):
        client.update_item(  # a failed condition costs the existing item: 3 units
            TableName=name,
            Key=key,
            UpdateExpression="SET z = :z",
            ConditionExpression="attribute_not_exists(body)",
            ExpressionAttributeValues={":z": {"S": "z"}},
        )
    client.transact_write_items(  # 2 per item: 2 x 1 on p2
        TransactItems=[
            {
                "Update": {
                    "TableName": name,
                    "Key": {"campaign_id": {"S": "p2"}, "recipient_id": {"S": r}},
                    "UpdateExpression": "SET s = :s",
                    "ExpressionAttributeValues": {":s": {"S": "sent"}},
                }
            }
            for r in ("a", "b")
        ]
    )
    reader.put_item(TableName=name, Item={**key, "not": {"S": "counted"}})  # the reader is not hooked

    assert dict(accountant.units) == {(name, "p1"): 2 + 3 + 3, (name, "p2"): 4}
    assert dict(accountant.writes) == {(name, "p1"): 3, (name, "p2"): 2}


# --- the hottest key while a campaign sends --------------------------------------------------

TARGET_UNITS_PER_RECIPIENT = 0.1
# What one batch-mode recipient may cost on its ledger item for the default shard count to
# keep the hottest key of a 1,000-recipient campaign under the target: the hottest of 256
# shards holds 10 of r0..r999 (docs/scale.md, "The ledger's shards").
UNITS_PER_RECIPIENT_BUDGET = 10


def hooked_run(
    system, accountant: WriteUnitAccountant, recipients: int, events_settings=None, webhook_secret=None, published=None
):
    """Publish and send a batch-mode campaign with every DynamoDB client of the run hooked:
    the operator's, the consumer's and (given its settings) the events function's, which
    the local Resend server sends 'sent' and 'delivered' per email. `published()` is called
    between the publish and the send."""
    session = boto3.session.Session()
    accountant.attach(session)
    resources = system.resources
    dynamodb = session.client("dynamodb")
    campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=resources.campaigns_table)
    operator = CampaignService(
        campaigns=campaigns,
        ledger=DynamoDBLedger(
            client=dynamodb, table_name=resources.ledger_table, shards_of=CampaignShards(campaigns.get)
        ),
        queue=SqsQueue(
            client=session.client("sqs"),
            queue_url=resources.queue_url,
            dead_letter_queue_url=resources.dead_letter_queue_url,
        ),
        provider_names=registry.names(),
    )
    events_api = None
    if events_settings is not None:
        events_api = LocalHttpApi(
            functools.partial(events.lambda_handler, service=build_events_service(events_settings, Clients(session))),
            function_name="sendonce-events",
        ).start()
        system.resend.set_webhook(events_api.url + "/webhooks/resend", webhook_secret)
    # Suppression checks are reads (100 per message, issue 17 item 5): left out to keep the
    # run's time for the writes it measures.
    settings = system.settings.model_copy(update={"suppressions_table": None})
    runtime = build_consumer_runtime(settings, build_consumer_parts(settings, Clients(session)))
    try:
        operator.create(
            Campaign(
                campaign_id="c1",
                name="Spring launch",
                provider="resend",
                delivery_mode="batch",
                sender=f"news@{system.domain}",
                content=Content(subject="Hello {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}"),
            )
        )
        operator.publish("c1", system.recipients(recipients))
        if published is not None:
            published()
        # One consumer: the queue's visibility timeout is 2 s here, and a second one would
        # take up a message whose first receive is still sending (safe, but slow).
        poller = system.poller(handler=functools.partial(consumer.lambda_handler, runtime=runtime), timeout_s=120)
        poller.run_until_idle(idle_seconds=1, max_seconds=600)
        if events_api is not None:
            assert system.resend.wait_for_webhooks(600)
    finally:
        if events_api is not None:
            events_api.stop()
    assert sorted(system.deliveries().values()) == [1] * recipients
    assert operator.status("c1").state is CampaignState.COMPLETED
    return campaigns.get("c1").ledger_shards


def report(accountant, system, recipients: int, what: str, shards: int) -> None:
    resources = system.resources
    print(
        f"\nwrite units per partition-key value, {what}, {recipients} recipients over {shards} ledger shards:\n"
        + per_key_report(
            accountant,
            recipients,
            [("ledger", resources.ledger_table), ("campaigns table", resources.campaigns_table)],
        )
    )


def phase(accountant: WriteUnitAccountant) -> WriteUnitAccountant:
    """The units counted so far, as an accountant of their own; `accountant` starts again."""
    done = WriteUnitAccountant(None)
    done.units, done.writes = Counter(accountant.units), Counter(accountant.writes)
    accountant.reset()
    return done


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_partition_key_takes_more_than_a_tenth_of_a_write_unit_per_recipient(system, aws_env):
    # Given a batch-mode campaign of 1,000 recipients (10 messages), published, then sent
    # by the real consumer, the write units of each phase counted apart
    recipients, messages = 1_000, 10
    resources = system.resources
    accountant = WriteUnitAccountant(boto3.client("dynamodb"))
    publishing: list[WriteUnitAccountant] = []
    shards = hooked_run(system, accountant, recipients, published=lambda: publishing.append(phase(accountant)))
    [publish], send = publishing, accountant

    # Then no partition-key value of the campaigns table took more than a tenth of a write
    # unit per recipient while the campaign published, nor while it sent: its batch records
    # and send groups are spread over the campaign's batch shards, each record written once
    report(publish, system, recipients, "publish", shards)
    report(send, system, recipients, "send (batch mode)", shards)
    per_message = publish.total(resources.campaigns_table) / messages
    print(f"publish: {per_message:.1f} campaigns-table write units per message of 100 recipients")
    for what, figures in (("publish", publish), ("send", send)):
        for hottest in figures.hottest(resources.campaigns_table, 1):
            assert hottest.per_recipient(recipients) <= TARGET_UNITS_PER_RECIPIENT, (what, hottest)
    # Each ~10 KB record written once in a transaction (2 units a KB) and a 1-unit marker
    # beside it: 21 units per message on the batch shards, not 31 (the record rewritten to
    # flip `enqueued`); with the campaign item's open batches and the counters' `recorded`
    # (2 each) and the publish's own transitions, ~26 per message in all, not 32.
    on_batch_shards = sum(
        u for (t, p), u in publish.units.items() if t == resources.campaigns_table and p.startswith("campaign#c1#b")
    )
    assert on_batch_shards / messages <= 21
    assert per_message <= 27
    assert not publish.total(resources.ledger_table)

    # and the hottest ledger key took at most a tenth of a write unit per recipient: a
    # ceiling of >= 10,000 recipients/s at 1,000 write units/s per partition-key value.
    [hottest] = send.hottest(resources.ledger_table, 1)
    assert hottest.per_recipient(recipients) <= TARGET_UNITS_PER_RECIPIENT
    assert send.total(resources.ledger_table) / recipients >= 4  # two transactions, 2 per item


@pytest.mark.timeout(900)
def test_provider_events_keep_a_recipient_within_the_shard_budget(system, deliverability, aws_env):
    # Given a batch-mode campaign whose emails' 'sent' and 'delivered' webhooks reach the
    # events function (a smaller campaign: the webhooks are this machine's slow part)
    recipients = 100
    accountant = WriteUnitAccountant(boto3.client("dynamodb"))
    shards = hooked_run(
        system,
        accountant,
        recipients,
        events_settings=deliverability.events_settings,
        webhook_secret=deliverability.resources.webhook_secret,
    )
    per_recipient = accountant.total(system.resources.ledger_table) / recipients
    report(accountant, system, recipients, "batch mode with provider events", shards)

    # Then a recipient's ledger item took at most the budget the default shard count is
    # chosen for, so a 1,000-recipient campaign's hottest key stays under the target
    hottest_share = max(Counter(shard_of(f"r{i}", shards) for i in range(1_000)).values()) / 1_000
    print(
        f"ledger write units per recipient with events: {per_recipient:.2f}; the hottest of {shards} shards "
        f"at 1,000 recipients would take {per_recipient * hottest_share:.3f} per recipient"
    )
    assert per_recipient <= UNITS_PER_RECIPIENT_BUDGET
    assert per_recipient * hottest_share <= TARGET_UNITS_PER_RECIPIENT


# --- a campaign created before shards existed ------------------------------------------------


@pytest.mark.parametrize("mode", ["single", "batch"])
def test_a_campaign_created_before_shards_keeps_its_ledger_records_in_force(system, mode):
    resources = system.resources
    dynamodb = boto3.client("dynamodb")
    # Given a campaign item as the previous version wrote it (no ledger_shards), published
    legacy = Campaign(
        campaign_id="c1",
        name="Spring launch",
        provider="resend",
        delivery_mode=mode,
        sender=f"news@{system.domain}",
        content=Content(subject="Hello {{ name }}", text="Hi {{ name }}"),
        created_at="2026-11-30T09:00:00.000+00:00",
        updated_at="2026-11-30T09:00:00.000+00:00",
    ).model_dump(mode="json", exclude_none=True, exclude={"ledger_shards"})
    store = DynamoDBCampaignStore(client=dynamodb, table_name=resources.campaigns_table)
    serialize = boto3.dynamodb.types.TypeSerializer().serialize
    dynamodb.put_item(
        TableName=resources.campaigns_table,
        Item={
            "pk": {"S": "campaign#c1"},
            "sk": {"S": "campaign"},
            **{k: serialize(v) for k, v in legacy.items()},
        },
    )
    assert store.get("c1").ledger_shards == 1
    people = system.recipients(10)
    system.operator.publish("c1", people)
    # and half its recipients sent by the previous version, keyed by the plain campaign id
    previous = DynamoDBLedger(client=dynamodb, table_name=resources.ledger_table, shards_of=one_shard)
    guard = LedgerDeliveryGuard(previous)
    guard.register_lambda_context(LocalLambdaContext(function_name="before", invoked_function_arn="arn", timeout_s=30))
    for person in people[:5]:
        request = DeliveryRequest(
            campaign_id="c1",
            recipient_id=person.recipient_id,
            batch_id="b-before",
            email=person.email,
            variables=person.variables,
            owner="previous-release",
            provider="resend",
            provider_idempotent=True,
        )
        assert guard.send_once(request, lambda: Receipt(provider_message_id="m-before")).kind == "sent"

    # When this version's consumer processes the campaign's messages
    system.poller().run_until_idle(idle_seconds=1, max_seconds=60)

    # Then the sent ones are refused as final and never sent again; the others are sent once
    sent_now = system.deliveries()
    assert sent_now == {p.email: 1 for p in people[5:]}
    records = {r.recipient_id: r for r in system.operator.records("c1")}
    assert {rid: r.state for rid, r in records.items()} == {p.recipient_id: DeliveryState.SENT for p in people}
    assert {r.campaign_id for r in records.values()} == {"c1"}
    assert records["r0"].provider_message_id == "m-before"
    # and every ledger record is still under the plain campaign id, where it was written
    items = dynamodb.scan(TableName=resources.ledger_table, ProjectionExpression="campaign_id")["Items"]
    assert {i["campaign_id"]["S"] for i in items} == {"c1"}
    assert system.operator.status("c1").state is CampaignState.COMPLETED
