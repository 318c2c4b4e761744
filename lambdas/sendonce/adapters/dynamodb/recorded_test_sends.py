"""Test sends, recorded in the campaigns table beside their campaign, one item each:

    pk = campaign#<id>, sk = test#<ISO time>#<test_send_id>   who, when, the outcome per address
                                                              (fingerprints, never addresses)

Not on the campaign item (which a test send must not change) and not in the ledger. The sort
key orders them by time, so the newest are one Query read backwards.
"""

from __future__ import annotations

from typing import Any

from sendonce.domain.models import TestSendRecord

_PREFIX = "test#"


class DynamoDBTestSendLog:
    def __init__(self, *, client: Any, table_name: str):
        self._client = client
        self._table = table_name

    def record(self, entry: TestSendRecord) -> None:
        self._client.put_item(
            TableName=self._table,
            Item={
                "pk": {"S": f"campaign#{entry.campaign_id}"},
                "sk": {"S": f"{_PREFIX}{entry.at}#{entry.test_send_id}"},
                "body": {"S": entry.model_dump_json()},
            },
            ConditionExpression="attribute_not_exists(pk)",
        )

    def _query(self, campaign_id: str, **extra: Any) -> dict[str, Any]:
        response: dict[str, Any] = self._client.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :t)",
            ExpressionAttributeValues={":pk": {"S": f"campaign#{campaign_id}"}, ":t": {"S": _PREFIX}},
            ConsistentRead=True,
            **extra,
        )
        return response

    def recent(self, campaign_id: str, *, limit: int) -> tuple[list[TestSendRecord], int]:
        newest = self._query(campaign_id, ScanIndexForward=False, Limit=max(limit, 1))
        records = [TestSendRecord.model_validate_json(item["body"]["S"]) for item in newest["Items"]][:limit]
        count, start = 0, None
        while True:  # test sends are few (a handful per campaign): counting them is a short read
            page = self._query(campaign_id, Select="COUNT", **({"ExclusiveStartKey": start} if start else {}))
            count += int(page["Count"])
            start = page.get("LastEvaluatedKey")
            if not start:
                return records, count
