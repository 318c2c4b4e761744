"""The benchmark's core on tiny campaigns: every figure is reported, and the counts that
do not depend on the machine are exact. No timing assertions: the machine is shared."""

from __future__ import annotations

import json

import pytest

from bench.core import BenchConfig, run_benchmark

pytestmark = pytest.mark.integration

MESSAGE_SIZE = 10
# The bench's campaigns get the default 256 shards; here 4, since an uncounted campaign's
# completion check reads every shard (5,552 Queries of the smoke's 186 s on a loaded CI run).
SHARDS = 4

TINY = BenchConfig(
    name="smoke",
    recipients=20,
    rate_per_second=20.0,
    rate_limited_seconds=2.0,
    min_rate_per_second=5.0,
    send_concurrency=4,
    pollers=2,
    latency_ms=(5.0, 20.0),
    message_samples=1,
    message_size=MESSAGE_SIZE,
    ses_recipients=10,
    limiter_unthrottled=False,
    cold_start_runs=1,
    default_team_recipients=10,
    phase_timeout_s=120.0,
    ledger_shards=SHARDS,
)

REPORTED = (
    "rate_ratio",
    "ledger_overhead_ratio",
    "ledger_overhead_ratio_unthrottled",
    "ddb_requests_per_recipient",
    "ddb_requests_per_recipient_ses",
    "ddb_requests_per_duplicate",
    "ddb_requests_per_recipient_batch_mode",
    "ddb_requests_per_duplicate_batch_mode",
    "write_units_per_recipient",
    "write_units_per_duplicate",
    "write_units_per_recipient_batch_mode",
    "batch_vs_sequential_ratio",
    "batch_vs_sequential_ratio_batch_mode",
    "cold_start_import_ms",
    "default_team_429s",
    "default_team_rate_ratio",
    "default_team_old_defaults_429s",
    "default_team_batch_vs_one_by_one_ratio",
    "machine",
    "goals",
)


@pytest.fixture(scope="module")
def result(moto):
    return run_benchmark(TINY, moto_endpoint=moto.endpoint)


def test_the_report_is_one_json_object_with_every_figure(result):
    assert json.loads(json.dumps(result)) == result
    assert all(key in result for key in REPORTED), [key for key in REPORTED if key not in result]
    assert set(result["goals"]) == {
        "rate_ratio",
        "ledger_overhead_ratio",
        "ledger_overhead_ratio_unthrottled",
        "default_team_429s",
        "default_team_batch_vs_one_by_one_ratio",
    }


def test_dynamodb_requests_per_recipient_are_exact(result):
    # Resend single mode: claim + mark_sent; SES adds mark_in_flight; a redelivered
    # recipient costs the one failed claim, which returns the old item. Once per campaign,
    # the consumer that settles the last open batch reads the ledger (one Query per ledger
    # shard) to complete it.
    assert result["ddb_requests_per_recipient"] == pytest.approx(2.0 + SHARDS / TINY.recipients)
    assert result["ddb_requests_per_recipient_ses"] == pytest.approx(3.0 + SHARDS / TINY.ses_recipients)
    assert result["ddb_requests_per_duplicate"] == 1.0
    # Batch mode, per message: BatchGetItem, group put, claim and completion transactions (no
    # group lookup: none of its recipients has a record yet); a redelivered message: the
    # BatchGetItem, then, its recipients recorded, the group lookup that tells whether its
    # recorded group may have gone out (and is still inside the key window), and the refused
    # claim transaction.
    assert result["ddb_requests_per_recipient_batch_mode"] == pytest.approx(4 / MESSAGE_SIZE + SHARDS / TINY.recipients)
    # The send group's one request on a first attempt: its put, no lookup.
    assert result["ddb_requests_per_recipient_by_purpose"]["batch_mode_fresh"]["send_group"] == pytest.approx(
        1 / MESSAGE_SIZE
    )
    assert result["ddb_requests_per_duplicate_batch_mode"] == pytest.approx(3 / MESSAGE_SIZE)
    # The suppression list (in the bench, as deployed): one consistent BatchGetItem per message
    # on every path, read by its first send (was one GetItem per recipient); a message of
    # ended deliveries reads none.
    by_purpose = result["ddb_requests_per_recipient_by_purpose"]
    for path in ("single_fresh", "batch_mode_fresh", "ses_fresh"):
        assert by_purpose[path]["suppressions"] == pytest.approx(1 / MESSAGE_SIZE), path
    for path in ("single_duplicate", "batch_mode_duplicate"):
        assert "suppressions" not in by_purpose[path], path
    # One consistent GetItem of the campaign per message, and one more in the completion check.
    assert result["ddb_requests_per_recipient_by_purpose"]["single_fresh"]["campaign_read"] == pytest.approx(
        1 / MESSAGE_SIZE + 1 / TINY.recipients
    )


def test_write_units_follow_the_item_sizes(result):
    assert result["ledger_item_bytes"]["max"] <= 1024  # so every ledger write is one unit
    assert result["write_units_per_recipient"] == 2.0
    assert result["write_units_per_recipient_ses"] == 3.0
    assert result["write_units_per_duplicate"] == 1.0  # a failed conditional write still costs
    assert result["write_units_per_recipient_batch_mode"] >= 4.0  # 2 transactions x 2 units per item


def test_ratios_and_timings_are_reported(result):
    for key in (
        "rate_ratio",
        "ledger_overhead_ratio",
        "ledger_overhead_ratio_unthrottled",
        "batch_vs_sequential_ratio",
        "batch_vs_sequential_ratio_batch_mode",
        "cold_start_import_ms",
        "default_team_batch_vs_one_by_one_ratio",
    ):
        assert isinstance(result[key], float) and result[key] > 0, key
    # At the team's limit the batch-mode message went as one request, the one-by-one path as one
    # a recipient: the team's phase sent each once, and the message's time is what the ratio says.
    batch = result["phases"]["default_team_batch_mode"]
    assert batch["provider_429s"] == 0
    assert result["default_team_batch_vs_one_by_one_ratio"] == pytest.approx(
        result["default_team_batch_message_s"] / result["default_team_one_by_one_s_per_message"], abs=0.002
    )
    assert result["rate_configured_per_s"] >= TINY.min_rate_per_second
