"""Batch records and send groups spread over partition-key values of the campaigns table
(adapters/dynamodb/batch_records.py), on moto's server: where they land, each record
written once, every read covering every shard, and campaigns created before keeping their
records where they were written."""

from __future__ import annotations

from collections import Counter

import boto3
import pytest

from sendonce.adapters.dynamodb import batch_records as bk
from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.domain.campaigns.ports import BatchStatus
from sendonce.domain.models import SCHEMA_VERSION, BatchMessage, Campaign, Content, Recipient, SendGroup

pytestmark = pytest.mark.integration

_ser = boto3.dynamodb.types.TypeSerializer()


class WrittenKeys:
    """Counts every write request per (pk, sk) of the items it writes."""

    def __init__(self, session: boto3.session.Session):
        self.writes: Counter[tuple[str, str]] = Counter()
        for op in ("PutItem", "UpdateItem", "TransactWriteItems"):
            session.events.register(f"provide-client-params.dynamodb.{op}", self._count)

    def _count(self, params, **_):
        items = [params] if "TransactItems" not in params else [next(iter(i.values())) for i in params["TransactItems"]]
        for item in items:
            key = item.get("Key") or item["Item"]
            self.writes[(key["pk"]["S"], key["sk"]["S"])] += 1


def _store(system, session=None) -> DynamoDBCampaignStore:
    client = (session or boto3.session.Session()).client("dynamodb")
    return DynamoDBCampaignStore(client=client, table_name=system.resources.campaigns_table)


def _batch(campaign_id: str, n: int, size: int = 3) -> BatchMessage:
    recipients = [Recipient(recipient_id=f"r{n}-{i}", email=f"r{n}-{i}@example.com") for i in range(size)]
    return BatchMessage(
        schema_version=SCHEMA_VERSION, campaign_id=campaign_id, batch_id=f"b{n:03d}", recipients=recipients
    )


def _items(system) -> list[dict]:
    return boto3.client("dynamodb").scan(TableName=system.resources.campaigns_table)["Items"]


def _legacy_campaign(system, campaign_id: str) -> None:
    """A campaign item as the release before batch shards wrote it (no `batch_shards`)."""
    state = Campaign(
        campaign_id=campaign_id,
        name="Before",
        provider="resend",
        sender=f"news@{system.domain}",
        content=Content(subject="Hello", text="Hi"),
        created_at="2026-11-30T09:00:00.000+00:00",
        updated_at="2026-11-30T09:00:00.000+00:00",
    ).model_dump(mode="json", exclude_none=True)
    item = {"pk": {"S": f"campaign#{campaign_id}"}, "sk": {"S": "campaign"}}
    boto3.client("dynamodb").put_item(
        TableName=system.resources.campaigns_table, Item={**item, **{k: _ser.serialize(v) for k, v in state.items()}}
    )


def test_a_new_campaigns_batch_records_spread_over_shards_each_written_once(system):
    # Given a campaign created by this version (the default's 32 batch shards)
    system.campaign(ledger_shards=256)
    session = boto3.session.Session()
    written = WrittenKeys(session)
    store = _store(system, session)
    batches = [_batch("c1", n) for n in range(40)]

    # When its batches are recorded, reach SQS, and are recorded again by a re-run publish
    assert {store.add_batch(b) for b in batches} == {BatchStatus.NEW}
    assert {store.add_batch(b) for b in batches} == {BatchStatus.RECORDED}
    for b in batches[:25]:
        store.mark_batch_enqueued("c1", b.batch_id)
    statuses = [store.add_batch(b) for b in batches]

    # Then each record is under its batch's shard key, not the campaign's
    assert statuses == [BatchStatus.ENQUEUED] * 25 + [BatchStatus.RECORDED] * 15
    records = {i["sk"]["S"]: i for i in _items(system) if i["sk"]["S"].startswith(bk.RECORD_PREFIX)}
    assert len(records) == 40
    for b in batches:
        record = records[bk.RECORD_PREFIX + b.batch_id]
        assert record["pk"]["S"] == bk.batch_partition("c1", b.batch_id, bk.DEFAULT_BATCH_SHARDS) != "campaign#c1"
        assert "enqueued" not in record
    assert len({r["pk"]["S"] for r in records.values()}) > 10
    # and each was written by one request only (the failed re-run puts write nothing);
    # reaching SQS wrote a marker beside it instead of rewriting its body
    record_writes = {k: n for k, n in written.writes.items() if k[1].startswith(bk.RECORD_PREFIX)}
    assert set(record_writes.values()) == {3}  # the first put, then two refused re-run puts
    markers = {k for k in written.writes if k[1].startswith(bk.ENQUEUED_PREFIX)}
    assert markers == {
        (bk.batch_partition("c1", b.batch_id, bk.DEFAULT_BATCH_SHARDS), bk.ENQUEUED_PREFIX + b.batch_id)
        for b in batches[:25]
    }
    assert set(store.partitions("c1")) == {"campaign#c1"} | {r["pk"]["S"] for r in records.values()} | {
        f"campaign#c1#b{k}" for k in range(bk.DEFAULT_BATCH_SHARDS)
    }
    # and every read sees every shard
    assert [(b.batch_id, e) for b, e in sorted(store.batches("c1"), key=lambda x: x[0].batch_id)] == [
        (b.batch_id, i < 25) for i, b in enumerate(batches)
    ]


def test_a_new_campaigns_records_are_never_rewritten_when_they_reach_sqs(system):
    # The mechanism of "written once", checked on the item: its bytes after the marker are
    # the bytes the transaction wrote.
    system.campaign()
    store = _store(system)
    batch = _batch("c1", 1)
    store.add_batch(batch)
    before = [i for i in _items(system) if i["sk"]["S"] == bk.RECORD_PREFIX + batch.batch_id]
    store.mark_batch_enqueued("c1", batch.batch_id)
    after = [i for i in _items(system) if i["sk"]["S"] == bk.RECORD_PREFIX + batch.batch_id]
    assert before == after and len(after) == 1
    assert store.add_batch(batch) is BatchStatus.ENQUEUED


def test_pages_of_batch_records_cover_every_shard_once(system):
    system.campaign(ledger_shards=256)
    store = _store(system)
    batches = [_batch("c1", n) for n in range(45)]
    for b in batches:
        store.add_batch(b)

    for limit in (1, 7, 100):
        seen, cursor, pages = [], None, 0
        while True:
            page, cursor = store.batches_page("c1", cursor, limit)
            seen += [b.batch_id for b in page]
            pages += 1
            if cursor is None:
                break
        assert sorted(seen) == [b.batch_id for b in batches], limit
        assert pages <= -(-45 // limit) + 1  # full pages across shards, maybe one empty last page

    # A start's job reads the same pages with whether each batch reached SQS (its marker).
    for b in batches[::3]:
        store.mark_batch_enqueued("c1", b.batch_id)
    marked, cursor = {}, None
    while True:
        page, cursor = store.batches_page_marked("c1", cursor, 7)
        marked |= {b.batch_id: enqueued for b, enqueued in page}
        if cursor is None:
            break
    assert marked == {b.batch_id: i % 3 == 0 for i, b in enumerate(batches)}
    page, _ = store.batches_page_marked("c1", None, 45)  # one page, markers in one BatchGetItem
    assert {b.batch_id: e for b, e in page} == marked


def test_send_groups_live_with_their_batch_and_are_found_from_any_store(system):
    system.campaign(ledger_shards=256)
    batch = _batch("c1", 7, size=2)
    _store(system).add_batch(batch)
    group = SendGroup(campaign_id="c1", group_id=f"{batch.batch_id}-g1", recipients=batch.recipients)
    assert _store(system).record_group(group) == group
    other = SendGroup(campaign_id="c1", group_id=f"{batch.batch_id}-g2", recipients=batch.recipients[:1])
    assert _store(system).record_group(other) == other

    [item] = [i for i in _items(system) if i["sk"]["S"] == f"group#{group.group_id}"]
    assert item["pk"]["S"] == bk.batch_partition("c1", batch.batch_id, bk.DEFAULT_BATCH_SHARDS)
    fresh = _store(system)  # nothing cached: learns the shard count from the campaign item
    assert fresh.get_group("c1", group.group_id) == group
    assert fresh.groups_of_batch("c1", batch.batch_id) == [group, other]
    assert fresh.record_group(group.model_copy(update={"recipients": batch.recipients[:1]})) == group


def test_a_campaign_created_before_batch_shards_keeps_its_records_where_they_were_written(system):
    # Given a campaign of the previous release with two batch records as it wrote them,
    # one that reached SQS (`enqueued` on the record) and one that did not, and a job's
    # page cursor of that release (a bare sort key)
    _legacy_campaign(system, "old")
    client = boto3.client("dynamodb")
    for n, enqueued in ((1, True), (2, False)):
        old = _batch("old", n)
        client.put_item(
            TableName=system.resources.campaigns_table,
            Item={
                "pk": {"S": "campaign#old"},
                "sk": {"S": f"batch#{old.batch_id}"},
                "body": {"S": old.to_body()},
                "recipients": {"N": "3"},
                "enqueued": {"BOOL": enqueued},
            },
        )
    store = _store(system)

    # When this version reads it, re-runs its publish and adds a batch and a group
    assert [(b.batch_id, e) for b, e in store.batches("old")] == [("b001", True), ("b002", False)]
    assert store.add_batch(_batch("old", 1)) is BatchStatus.ENQUEUED
    assert store.add_batch(_batch("old", 2)) is BatchStatus.RECORDED
    assert store.add_batch(_batch("old", 3)) is BatchStatus.NEW
    store.mark_batch_enqueued("old", "b002")
    store.record_group(SendGroup(campaign_id="old", group_id="b003-g1", recipients=_batch("old", 3).recipients))

    # Then everything stays under the plain campaign key, read from there
    assert {i["pk"]["S"] for i in _items(system) if i["pk"]["S"].startswith("campaign#old")} == {"campaign#old"}
    assert [(b.batch_id, e) for b, e in store.batches("old")] == [("b001", True), ("b002", True), ("b003", False)]
    assert store.add_batch(_batch("old", 2)) is BatchStatus.ENQUEUED
    page, cursor = store.batches_page("old", "batch#b001", 10)
    assert ([b.batch_id for b in page], cursor) == (["b002", "b003"], None)
    marked, cursor = store.batches_page_marked("old", None, 10)  # the record's own flag, or the marker
    assert ([(b.batch_id, e) for b, e in marked], cursor) == ([("b001", True), ("b002", True), ("b003", False)], None)
    assert [g.group_id for g in store.groups_of_batch("old", "b003")] == ["b003-g1"]
    assert store.partitions("old") == ["campaign#old"]
