"""A recipient's first open and first click (domain/deliverability/engagement.py), and the
campaign's unique opens and clicks per minute, in the campaigns table.

    pk = engagement#<campaign>#<k>, sk = r#<recipient id>     opened, clicked: the first's epoch ms
    pk = report#<campaign>#w<k>, sk = minute#<minute>#w<k>    opened, clicked: unique, by the
                                                              minute of each recipient's first

`k` is the recipient's one of REPORT_WRITERS keys (a hash of its id): the report's writer keys
(report_aggregates.py), whose minute items take these two numbers beside the aggregator's
(ADDs commute), so the report reads no key more. No raw address is kept: the recipient's id.
An A/B campaign's event also adds to its variant's count (`v:<variant>:opened`, ...; the
rest's under `v:*:...`: report_data.variant_count) in the same ADD, and moves it with the
total when an earlier event arrives late: no item, write or key more.

One event: a consistent read of the recipient's item, then, unless the time recorded is at or
before the event's (a repeat: nothing to do), one transaction that sets the new first time on
condition that the item still holds what was read, and adds 1 to the new first's minute (and
-1 to the old one's, when an earlier event arrived late). A retried event finds its own time
and writes nothing; two racing events: the loser's condition fails and it reads again. Each
first costs one read and a 2-item transaction (4 write units, 2 on each of two keys of 64):
at most ~0.06 write units a recipient on any key with opens and clicks on every recipient
(an A/B campaign's too: its variant counts are numbers of the same items in the same writes).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb.report_aggregates import MINUTE, REPORT_WRITERS, writer_partition
from sendonce.domain.campaigns.report_data import minute_of, variant_count
from sendonce.domain.sending.shards import shard_of

KINDS = ("opened", "clicked")
ATTEMPTS = 5


def engagement_key(campaign_id: str, recipient_id: str) -> tuple[dict[str, Any], int]:
    """The recipient's item key, and its writer number."""
    k = shard_of(recipient_id, REPORT_WRITERS)
    return {"pk": {"S": f"engagement#{campaign_id}#{k}"}, "sk": {"S": f"r#{recipient_id}"}}, k


class EngagementRaceError(Exception):
    """Events of one recipient kept changing its item: the event is retried by its source."""


class DynamoDBEngagement:
    def __init__(self, *, client: Any, table_name: str):
        self._client = client
        self._table = table_name

    def record(self, campaign_id: str, recipient_id: str, kind: str, at_ms: int, *, variant: str | None = None) -> str:
        if kind not in KINDS:
            raise ValueError(f"engagement kind must be one of {KINDS}, not {kind!r}")
        key, k = engagement_key(campaign_id, recipient_id)
        for _ in range(ATTEMPTS):
            item = self._client.get_item(
                TableName=self._table,
                Key=key,
                ConsistentRead=True,
                ProjectionExpression="#k",
                ExpressionAttributeNames={"#k": kind},
            ).get("Item", {})
            old = int(item[kind]["N"]) if kind in item else None
            if old is not None and old <= at_ms:
                return "repeat"
            try:
                self._client.transact_write_items(
                    TransactItems=self._writes(campaign_id, key, k, kind, at_ms, old, variant)
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                continue  # another event of this recipient's moved it first: read again
            return "first" if old is None else "earlier"
        raise EngagementRaceError(f"{kind} of {campaign_id}/{recipient_id}: {ATTEMPTS} conflicting writes")

    def _writes(
        self,
        campaign_id: str,
        key: dict[str, Any],
        k: int,
        kind: str,
        at_ms: int,
        old: int | None,
        variant: str | None,
    ) -> list[dict[str, Any]]:
        names = {"#k": kind}
        if old is None:
            condition, values = "attribute_not_exists(#k)", {":t": {"N": str(at_ms)}}
        else:
            condition, values = "#k = :old", {":t": {"N": str(at_ms)}, ":old": {"N": str(old)}}
        writes: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": key,
                    "UpdateExpression": "SET #k = :t",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            }
        ]
        moves = {minute_of(at_ms): 1}
        if old is not None:
            moves[minute_of(old)] = moves.get(minute_of(old), 0) - 1
        writer = f"w{k}"
        # The variant's count rides in the same ADD as the total, moved with it.
        counted, update = (
            ({"#k": kind, "#v": variant_count(variant, kind)}, "ADD #k :n, #v :n") if variant else (names, "ADD #k :n")
        )
        for minute, n in sorted(moves.items()):
            if n:
                writes.append(
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": {
                                "pk": {"S": writer_partition(campaign_id, writer)},
                                "sk": {"S": f"{MINUTE}{minute:013d}#{writer}"},
                            },
                            "UpdateExpression": update,
                            "ExpressionAttributeNames": counted,
                            "ExpressionAttributeValues": {":n": {"N": str(n)}},
                        }
                    }
                )
        return writes
