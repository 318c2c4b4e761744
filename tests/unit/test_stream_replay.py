"""bench.stream_replay's batching: records handed over as a deployed mapping would, per
emulated stream shard, at the batch size or the window, each shard's order kept."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from bench.stream_replay import (
    Shape,
    ZipfDomains,
    batches,
    expected_counts,
    groups_in,
    of_campaign,
    shards_for,
    with_domains,
)
from sendonce.domain.sending.shards import shard_of

LEDGER_ARN = "arn:aws:dynamodb:us-east-1:1:table/ledger/stream/x"
CAMPAIGNS_ARN = "arn:aws:dynamodb:us-east-1:1:table/campaigns/stream/x"


def ledger_record(
    seq: int, at: float, shard: int, recipient: str, state: str | None = "sent", campaign: str = "c1"
) -> dict:
    data = {
        "Keys": {"campaign_id": {"S": f"{campaign}#{shard}"}, "recipient_id": {"S": recipient}},
        "SequenceNumber": str(seq),
        "ApproximateCreationDateTime": at,
    }
    if state is not None:
        data["NewImage"] = {"state": {"S": state}}
    return {"eventName": "MODIFY", "eventSourceARN": LEDGER_ARN, "dynamodb": data}


def batch_record(seq: int, at: float, recipients: list[str], campaign: str = "c1") -> dict:
    body = json.dumps({"recipients": [{"recipient_id": r} for r in recipients]})
    return {
        "eventName": "INSERT",
        "eventSourceARN": CAMPAIGNS_ARN,
        "dynamodb": {
            "Keys": {"pk": {"S": f"campaign#{campaign}#b0"}, "sk": {"S": "batch#b1"}},
            "SequenceNumber": str(seq),
            "ApproximateCreationDateTime": at,
            "NewImage": {"body": {"S": body}},
        },
    }


def test_one_shard_takes_every_key_and_closes_a_batch_at_the_size():
    records = [ledger_record(i, 1000.0 + i / 100, i % 7, f"r{i}") for i in range(25)]
    # 25 recipients at 25/s: the timeline is 1 s, well inside the window; batches of 10.
    planned = batches(records, Shape(rate=25, shards=1, batch_size=10, window_s=2.0), recipients=25)
    assert [len(b.records) for b in planned] == [10, 10, 5]
    assert [r["dynamodb"]["SequenceNumber"] for b in planned for r in b.records] == [str(i) for i in range(25)]
    assert groups_in(planned[0]) == 7


def test_the_window_closes_a_batch_and_the_timeline_is_compressed_to_the_rate():
    # 100 s of records for 10 recipients; at 1 recipient/s the campaign lasts 10 s.
    records = [ledger_record(i, 1000.0 + 10 * i, 0, f"r{i}") for i in range(11)]
    planned = batches(records, Shape(rate=1, shards=1, batch_size=1000, window_s=2.0), recipients=10)
    times = [r["dynamodb"]["ApproximateCreationDateTime"] for b in planned for r in b.records]
    assert times == pytest.approx([1000.0 + i for i in range(11)])
    # A batch opens at its first record and takes what comes within the window: 0-2, 3-5, 6-8, 9-10.
    assert [len(b.records) for b in planned] == [3, 3, 3, 2]
    assert [b.closes_at for b in planned] == pytest.approx([2.0, 5.0, 8.0, 11.0])


def test_records_go_to_the_stream_shard_of_their_key_and_keep_its_order():
    records = [ledger_record(i, 1000.0, i % 5, f"r{i}") for i in range(40)]
    planned = batches(records, Shape(rate=40, shards=3), recipients=40)
    for b in planned:
        assert {shard_of(r["dynamodb"]["Keys"]["campaign_id"]["S"], 3) for r in b.records} == {b.stream[1]}
        sequences = [int(r["dynamodb"]["SequenceNumber"]) for r in b.records]
        assert sequences == sorted(sequences)
    assert sum(len(b.records) for b in planned) == 40


def test_the_tables_streams_are_batched_apart():
    records = [batch_record(0, 1000.0, ["r0", "r1"]), ledger_record(1, 1000.0, 0, "r0")]
    planned = batches(records, Shape(rate=2, shards=1), recipients=2)
    assert {b.stream[0] for b in planned} == {LEDGER_ARN, CAMPAIGNS_ARN}


def test_the_expected_counts_are_each_recipients_last_state_and_the_distinct_published():
    records = [
        batch_record(0, 1000.0, ["r0", "r1", "r2"]),
        batch_record(1, 1000.0, ["r2"]),  # r2 in two batches: published once
        ledger_record(2, 1000.0, 0, "r0", "claimed"),
        ledger_record(3, 1000.0, 0, "r0", "sent"),
        ledger_record(4, 1000.0, 1, "r1", "unknown"),
    ]
    assert expected_counts(records) == ({"sent": 1, "unknown": 1}, 3)


def test_the_shards_are_the_fewest_partitions_that_take_the_ledger_writes():
    assert shards_for(88, 8.0) == 1
    assert shards_for(1_000, 8.0) == 8
    assert shards_for(10_000, 8.0) == 80


def test_redrawn_domains_follow_a_zipf_mix_one_domain_per_recipient():
    domains = ZipfDomains(1000)
    drawn = Counter(domains.of(f"r{i}") for i in range(20_000))
    assert domains.of("r7") == domains.of("r7")
    # The first domain takes 1 / H(1000) ≈ 13 % of the recipients; the tenth ~1.3 %.
    assert 0.11 < drawn["d0.example.com"] / 20_000 < 0.16
    assert 0.008 < drawn["d9.example.com"] / 20_000 < 0.02
    assert 500 < len(drawn) <= 1000

    event = {"M": {"k": {"S": "delivered"}, "d": {"S": "old.example.com"}}}
    record = ledger_record(1, 1000.0, 0, "r7")
    record["dynamodb"]["NewImage"]["provider_events"] = {"L": [event]}
    [changed] = with_domains([record], domains)
    [entry] = changed["dynamodb"]["NewImage"]["provider_events"]["L"]
    assert entry["M"]["d"]["S"] == domains.of("r7") and entry["M"]["k"]["S"] == "delivered"
    assert record["dynamodb"]["NewImage"]["provider_events"]["L"][0] is event  # the original is untouched


def test_one_campaign_is_replayed_the_last_in_the_file_unless_named():
    # A bench-scale capture: its per-message campaigns first, then the size (ledger and batch records)
    records = [
        batch_record(1, 1.0, ["r0"], campaign="msg-single"),
        ledger_record(2, 2.0, 3, "r0", campaign="msg-single"),
        batch_record(3, 3.0, ["r0", "r1"], campaign="scale200"),
        ledger_record(4, 4.0, 5, "r0", campaign="scale200"),
        ledger_record(5, 5.0, 9, "r1", campaign="scale200"),
    ]
    assert [r["dynamodb"]["SequenceNumber"] for r in of_campaign(records, None)] == ["3", "4", "5"]
    assert [r["dynamodb"]["SequenceNumber"] for r in of_campaign(records, "msg-single")] == ["1", "2"]
    assert expected_counts(of_campaign(records, None)) == ({"sent": 2}, 2)
    assert of_campaign(records, "other") == [] and of_campaign([], None) == []
