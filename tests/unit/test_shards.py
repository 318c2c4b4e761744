"""The ledger's partition-key values: stable across processes and releases, spread evenly,
and a one-shard campaign keyed exactly as before shards existed."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from pydantic import ValidationError

from sendonce.domain.campaigns.input_rules import describe_validation_error
from sendonce.domain.campaigns.spec import CampaignSpec
from sendonce.domain.models import ID_PATTERN
from sendonce.domain.sending.shards import (
    DEFAULT_LEDGER_SHARDS,
    MAX_LEDGER_SHARDS,
    campaign_of,
    dealt,
    partition_key,
    partition_keys,
    shard_of,
)


def test_a_recipient_shard_is_the_same_in_every_process_and_release():
    # Pinned values: a change here moves every delivery of every sharded campaign to
    # another partition-key value, where its ledger record is not found (a second send).
    assert [shard_of(f"r{i}", 128) for i in range(6)] == PINNED
    assert partition_key("spring", "r0", 128) == f"spring#{PINNED[0]}"


PINNED = [37, 48, 106, 81, 55, 47]  # blake2b-64 of the id, modulo the shard count


def test_recipients_spread_evenly_over_the_shards():
    counts = Counter(shard_of(f"user-{i}", DEFAULT_LEDGER_SHARDS) for i in range(100_000))

    assert len(counts) == DEFAULT_LEDGER_SHARDS
    mean = 100_000 / DEFAULT_LEDGER_SHARDS
    assert max(counts.values()) <= 1.25 * mean
    assert min(counts.values()) >= 0.75 * mean


def test_one_shard_is_the_plain_campaign_id_as_before_shards():
    assert partition_key("c1", "r7", 1) == "c1"
    assert partition_keys("c1", 1) == ["c1"]


def test_every_key_of_a_campaign_is_among_its_partitions_and_gives_its_campaign_back():
    keys = {partition_key("c-1_x", f"r{i}", 16) for i in range(1000)}

    assert keys == set(partition_keys("c-1_x", 16))
    assert {campaign_of(k) for k in keys} == {"c-1_x"}
    assert campaign_of("c-1_x") == "c-1_x"


def test_a_campaign_id_cannot_hold_the_separator_so_keys_never_collide_with_a_plain_id():
    assert not re.match(ID_PATTERN, "c1#0")
    assert all(re.match(ID_PATTERN, k) is None for k in partition_keys("c1", 4))


def test_shards_must_be_positive():
    with pytest.raises(ValueError, match="at least one"):
        shard_of("r1", 0)


SPEC = {"id": "c1", "name": "n", "subject": "s", "from": "a@example.com", "text": "t", "provider": "ses"}


def test_a_spec_gets_the_default_shard_count_and_may_choose_another():
    assert CampaignSpec.model_validate(SPEC).to_campaign().ledger_shards == DEFAULT_LEDGER_SHARDS
    assert CampaignSpec.model_validate({**SPEC, "ledger_shards": 4}).to_campaign().ledger_shards == 4


@pytest.mark.parametrize("bad", [0, -1, MAX_LEDGER_SHARDS + 1, "8", 2.5, True])
def test_a_shard_count_out_of_bounds_is_refused_by_name(bad):
    with pytest.raises(ValidationError) as raised:
        CampaignSpec.model_validate({**SPEC, "ledger_shards": bad})

    assert describe_validation_error(raised.value) == [
        ("ledger_shards", f"must be a whole number from 1 to {MAX_LEDGER_SHARDS} (see docs/scale.md)")
    ]


def test_ledger_shards_are_dealt_evenly_and_other_keys_hashed():
    # A campaign's 256 ledger shards over 128 counter keys: exactly 2 each, whatever the campaign.
    assert set(Counter(dealt(f"ledger#c1#{k}", 128) for k in range(256)).values()) == {2}
    assert dealt("ledger#c1#200", 128) == 72
    # A key with no shard number (a plain campaign id, a batch shard `b7`) is hashed, stably.
    assert dealt("campaigns#campaign#c1#b7", 128) == shard_of("campaigns#campaign#c1#b7", 128)
    assert 0 <= dealt("ledger#c1", 16) < 16


def test_a_campaign_has_a_counter_key_per_ledger_shard_up_to_128():
    from sendonce.adapters.dynamodb.counters import counter_keys_for

    assert [counter_keys_for(n) for n in (1, 8, 128, 256, 1000)] == [1, 8, 128, 128, 128]
    # Fewer shards than 128: each shard's counter item has a key of its own.
    assert sorted(dealt(f"ledger#c1#{k}", counter_keys_for(8)) for k in range(8)) == list(range(8))
