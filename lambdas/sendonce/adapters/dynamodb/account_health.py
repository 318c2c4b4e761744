"""The account health check's record, one item per provider in the campaigns table:

    pk = account#<provider>, sk = health    `verdict`, `reason`, `since_ms`, `checked_ms`,
                                            `stopped_at_ms`, `back_at_ms` (when known)

No attribute named `state`: the campaigns-by-state index lists items that have one.
Written once per check (every few minutes), by the check alone: a plain PutItem.
"""

from __future__ import annotations

from typing import Any

from sendonce.domain.deliverability.ports import HealthRecord, Verdict

SORT_KEY = "health"
_NUMBERS = ("since_ms", "checked_ms", "stopped_at_ms", "back_at_ms")


def health_key(provider: str) -> dict[str, Any]:
    return {"pk": {"S": f"account#{provider}"}, "sk": {"S": SORT_KEY}}


class DynamoDBHealthRecords:
    def __init__(self, *, client: Any, table_name: str):
        self._client = client
        self._table = table_name

    def last(self, provider: str) -> HealthRecord | None:
        item = self._client.get_item(TableName=self._table, Key=health_key(provider), ConsistentRead=True).get("Item")
        if not item:
            return None
        numbers = {name: int(item[name]["N"]) for name in _NUMBERS if name in item}
        return HealthRecord(
            provider=provider,
            verdict=Verdict(item["verdict"]["S"]),
            reason=item["reason"]["S"],
            since_ms=numbers["since_ms"],
            checked_ms=numbers["checked_ms"],
            stopped_at_ms=numbers.get("stopped_at_ms"),
            back_at_ms=numbers.get("back_at_ms"),
        )

    def record(self, record: HealthRecord) -> None:
        item: dict[str, Any] = {
            **health_key(record.provider),
            "verdict": {"S": record.verdict.value},
            "reason": {"S": record.reason},
        }
        for name in _NUMBERS:
            value = getattr(record, name)
            if value is not None:
                item[name] = {"N": str(value)}
        self._client.put_item(TableName=self._table, Item=item)
