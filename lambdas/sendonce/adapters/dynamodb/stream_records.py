"""Lambda's DynamoDB stream records, as the counters need them (domain/campaigns/counters.py).

A ledger record is any change of a delivery's item: its state before and after, and the
provider events it appended, its mailbox group and, an A/B campaign's, the variant its claim
recorded (for the report's aggregates). A
campaigns-table record counts only when it inserts a batch record (once per batch id);
every other item of that table (the campaign, groups, counters, markers, limiter slots)
counts nothing.

Lambda's event does not say which stream shard a record came from, so the position a
counter item keeps is per partition-key value of the changed item: every change of one
partition-key value is in one shard at a time (DynamoDB orders a stream per item, and a
shard holds one table partition's changes), so its records arrive in sequence order.
The ledger's partition-key values are the campaign's shards (`<campaign>#<k>`); the
campaigns table's batch records are spread likewise (`campaign#<id>#b<k>`, or the plain
`campaign#<id>` for a campaign created before: adapters/dynamodb/batch_records.py).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator
from typing import Any

from sendonce.adapters.dynamodb.batch_records import RECORD_PREFIX, campaign_of_partition
from sendonce.domain.campaigns.counters import BatchRecorded, Change, DeliveryChange, StreamPosition
from sendonce.domain.models import DeliveryState
from sendonce.domain.sending.shards import campaign_of

LEDGER = "ledger"
CAMPAIGNS = "campaigns"


def _state(image: dict[str, Any] | None) -> DeliveryState | None:
    if not image or "state" not in image:
        return None
    return DeliveryState(image["state"]["S"])


def _epoch_ms(when: Any) -> int:
    """Lambda's event gives seconds since the epoch; the DynamoDB Streams API, read through
    boto3 (the local poller, the model), a datetime."""
    if when is None:
        return 0
    if isinstance(when, dt.datetime):
        return int(when.timestamp() * 1000)
    return int(float(when) * 1000)


def _new_events(old: dict[str, Any] | None, new: dict[str, Any] | None) -> tuple[tuple[str, str | None], ...]:
    """The provider events the write appended (`provider_events` only grows): (kind, domain)."""
    before = len(((old or {}).get("provider_events") or {}).get("L", []))
    after = ((new or {}).get("provider_events") or {}).get("L", [])
    found = []
    for entry in after[before:]:
        fields = entry.get("M", {})
        # ledger_events.py's short names; "event" and "domain" in entries written before them
        kind = (fields.get("k") or fields.get("event") or {}).get("S")
        if kind:
            found.append((kind, (fields.get("d") or fields.get("domain") or {}).get("S")))
    return tuple(found)


def _mailbox_group(image: dict[str, Any] | None) -> str | None:
    """The recipient's mailbox-provider group its claim kept (`mgroup`), if any."""
    return ((image or {}).get("mgroup") or {}).get("S")


def _variant(image: dict[str, Any] | None) -> str | None:
    """An A/B campaign's variant its claim recorded (`variant`), if any."""
    return ((image or {}).get("variant") or {}).get("S")


def change_of(record: dict[str, Any]) -> Change | None:
    """The change one stream record makes to the counts; None when it makes none."""
    stream = record["dynamodb"]
    keys = stream["Keys"]
    sequence = int(stream["SequenceNumber"])
    if "recipient_id" in keys and "campaign_id" in keys:
        partition = keys["campaign_id"]["S"]
        old, new = _state(stream.get("OldImage")), _state(stream.get("NewImage"))
        events = _new_events(stream.get("OldImage"), stream.get("NewImage"))
        if old is new and not events:
            return None  # a write that changed neither the state nor the provider events
        return DeliveryChange(
            campaign_id=campaign_of(partition),
            position=StreamPosition(source=LEDGER, shard_id=partition, sequence=sequence),
            old=old,
            new=new,
            at_ms=_epoch_ms(stream.get("ApproximateCreationDateTime")),
            new_events=events,
            mailbox_group=_mailbox_group(stream.get("NewImage")) or _mailbox_group(stream.get("OldImage")),
            recipient_id=keys["recipient_id"]["S"],
            variant=_variant(stream.get("NewImage")) or _variant(stream.get("OldImage")),
        )
    pk, sk = keys.get("pk", {}).get("S", ""), keys.get("sk", {}).get("S", "")
    if record.get("eventName") != "INSERT" or not pk.startswith("campaign#") or not sk.startswith(RECORD_PREFIX):
        return None  # an enqueued marker (`batch-enqueued#`) or a group is no batch record
    body = json.loads(stream["NewImage"]["body"]["S"])
    return BatchRecorded(
        campaign_id=campaign_of_partition(pk),
        position=StreamPosition(source=CAMPAIGNS, shard_id=pk, sequence=sequence),
        batch_id=sk.removeprefix(RECORD_PREFIX),
        recipient_ids=tuple(r["recipient_id"] for r in body["recipients"]),
    )


def changes_of(records: Iterable[dict[str, Any]]) -> Iterator[Change]:
    for record in records:
        change = change_of(record)
        if change is not None:
            yield change
