"""Which partition-key value of the ledger holds a delivery.

A campaign's deliveries are spread over `ledger_shards` partition-key values, fixed when
the campaign is created: `<campaign_id>#<k>` with `k` from a stable hash of the recipient
id. One shard is the layout of campaigns created before shards existed: the partition-key
value is the plain `<campaign_id>`, so their ledger records stay where they were written.
A campaign id cannot contain `#` (`models.ID_PATTERN`), so `<id>#<k>` never equals another
campaign's plain id, and the part before the first `#` is always the campaign id.
docs/scale.md says why the default is what it is.
"""

from __future__ import annotations

import hashlib

SEPARATOR = "#"
# A campaign item without `ledger_shards` was created before shards existed.
LEGACY_LEDGER_SHARDS = 1
# The hottest partition-key value must take <= 0.1 write units per recipient; a batch-mode
# recipient with provider events costs 7 units on its ledger item (docs/scale.md).
DEFAULT_LEDGER_SHARDS = 256
# A read of a whole campaign is one Query per shard.
MAX_LEDGER_SHARDS = 1000


def shard_of(recipient_id: str, shards: int) -> int:
    """The recipient's shard in 0..shards-1: the same in every process and every release
    (Python's `hash` is salted per process; this is not)."""
    if shards < 1:
        raise ValueError(f"a campaign has at least one ledger shard, not {shards}")
    digest = hashlib.blake2b(recipient_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def partition_key(campaign_id: str, recipient_id: str, shards: int) -> str:
    """The ledger's partition-key value of one delivery."""
    if shards == LEGACY_LEDGER_SHARDS:
        return campaign_id
    return f"{campaign_id}{SEPARATOR}{shard_of(recipient_id, shards)}"


def partition_keys(campaign_id: str, shards: int) -> list[str]:
    """Every partition-key value a campaign's deliveries can have."""
    if shards == LEGACY_LEDGER_SHARDS:
        return [campaign_id]
    return [f"{campaign_id}{SEPARATOR}{k}" for k in range(shards)]


def campaign_of(partition: str) -> str:
    """The campaign id of a partition-key value, sharded or not."""
    return partition.split(SEPARATOR, 1)[0]


def dealt(key: str, keys: int) -> int:
    """One of `keys` for a key ending in a ledger shard's number (`...#<k>`): `k` modulo
    `keys`, so a campaign's shards share the keys evenly (a hash shares 256 shards over 64
    keys unevenly: the hottest took twice the mean); any other key by a hash."""
    last = key.rsplit(SEPARATOR, 1)[-1]
    if last.isdigit():
        return int(last) % keys
    return shard_of(key, keys)
