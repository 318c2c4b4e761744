"""The shared limiter's slot items, read for the operator (`LimiterSlots`,
domain/sending/sending_now.py): a window of seconds is one Query on the provider's
partition (`pk = limiter#<provider>`, `sk BETWEEN slot#<first> AND slot#<last>`; epoch
seconds have 10 digits until 2286, so the keys' string order is time order). The key layout
and the per-campaign attributes are limiter_requests.py's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sendonce.adapters.dynamodb.limiter_requests import CLAIMANT_PREFIX, COUNT_PREFIX, DWELL_PREFIX
from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.adapters.providers.descriptor import Pace
from sendonce.domain.sending.sending_now import SlotUsage
from sendonce.domain.sending.shares import Claimant

SLOT_PREFIX = "slot#"


class DynamoDBLimiterSlots:
    def __init__(self, *, client: Any, table_name: str, paces: Mapping[str, Pace]):
        """`paces`: each provider's pace as the consumers are configured with it; looked up
        only when a rate in force is asked for (the CLI's reads the consumer's settings)."""
        self._client = client
        self._table = table_name
        self._paces = paces
        self.requests = 0

    def read(self, provider: str, *, first: int, last: int) -> list[SlotUsage]:
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :first AND :last",
            "ExpressionAttributeValues": {
                ":pk": {"S": f"limiter#{provider}"},
                ":first": {"S": f"{SLOT_PREFIX}{first}"},
                ":last": {"S": f"{SLOT_PREFIX}{last}"},
            },
        }
        found = []
        while True:
            self.requests += 1
            page = self._client.query(**request)
            found.extend(slot_usage(item) for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return found
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def rate(self, provider: str) -> float | None:
        """The limiter's own `rate`: one read of the provider's state item."""
        if provider not in self._paces:
            return None
        pace = self._paces[provider]
        limiter = DynamoDBRateLimiter(
            client=self._client,
            table_name=self._table,
            rates={provider: pace.rate},
            reserve={provider: pace.reserve} if pace.reserve else None,
        )
        self.requests += 1
        return limiter.rate(provider)


def slot_usage(item: Mapping[str, Any]) -> SlotUsage:
    places, claimants, dwell = {}, {}, {}
    for name, value in item.items():
        if name.startswith(COUNT_PREFIX):
            places[name.removeprefix(COUNT_PREFIX)] = int(value["N"])
        elif name.startswith(CLAIMANT_PREFIX):
            cid = name.removeprefix(CLAIMANT_PREFIX)
            claimants[cid] = Claimant.decode(cid, value["S"])
        elif name.startswith(DWELL_PREFIX):
            dwell[name.removeprefix(DWELL_PREFIX)] = int(value["N"])
    return SlotUsage(
        slot=int(item["sk"]["S"].removeprefix(SLOT_PREFIX)),
        used=int(item.get("used", {}).get("N", "0")),
        places=places,
        claimants=claimants,
        dwell_ms=dwell,
    )
