"""The campaigns table's batch keys (adapters/dynamodb/batch_records.py): pure functions."""

from __future__ import annotations

from collections import Counter

from sendonce.adapters.dynamodb import batch_records as bk


def test_a_batch_and_its_groups_share_one_shard_key_stable_across_processes():
    key = bk.batch_partition("c1", "b0123456789abcdef01234567", 32)
    assert key == "campaign#c1#b" + str(bk.shard_of("b0123456789abcdef01234567", 32))
    assert bk.batch_partition("c1", bk.batch_of_group("b0123456789abcdef01234567-g12"), 32) == key
    assert bk.batch_of_group("r-gone-b1-g3") == "r-gone-b1"  # only the last `-g<n>` is the group's
    assert bk.campaign_of_partition(key) == "c1"
    assert bk.campaign_of_partition("campaign#c1") == "c1"


def test_one_shard_is_the_plain_campaign_key_of_campaigns_created_before():
    assert bk.batch_partition("c1", "b1", bk.LEGACY_BATCH_SHARDS) == "campaign#c1"
    assert bk.batch_partitions("c1", 1) == ["campaign#c1"]
    assert bk.batch_shards_for(1) == 1 and bk.batch_shards_for(4) == 4
    assert bk.batch_shards_for(256) == bk.DEFAULT_BATCH_SHARDS == 32


def test_ten_batches_over_the_default_shards_rarely_put_four_in_one():
    # The default's argument (docs/scale.md, section 3): a batch costs its shard ~0.31 write
    # units per recipient of the batch, so the hottest of 1,000 recipients' 10 batches must
    # hold at most 3. Over 1,000 campaigns of 10 random-looking batch ids:
    over = sum(
        max(Counter(bk.shard_of(f"b{c:06d}x{n}", bk.DEFAULT_BATCH_SHARDS) for n in range(10)).values()) > 3
        for c in range(1_000)
    )
    assert over <= 20  # expected ~6 (<= 32 x C(10,4) / 32^4 per campaign)


def test_cursors_name_the_shard_and_read_the_previous_releases_bare_sort_key():
    assert bk.decode_cursor(None) == (0, None)
    assert bk.decode_cursor(bk.encode_cursor(5, "batch#b1")) == (5, "batch#b1")
    assert bk.decode_cursor(bk.encode_cursor(7, None)) == (7, None)
    assert bk.decode_cursor("batch#b9") == (0, "batch#b9")
