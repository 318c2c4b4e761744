"""A sending domain's warm-up count per day (domain/deliverability/warmup.py), shared by every
consumer through the campaigns table.

    pk = warmup#<domain>, sk = day#<YYYY-MM-DD>   sent: places taken that day

A request takes its places with one conditional `ADD` (the day's count may not pass the cap).
One-by-one sends take `chunk` places a write and use them that day, so the key takes a write
per `chunk` recipients (0.1 write units a recipient at 10), never one a recipient; places a
process holds when it ends are never used (the day sends less than its cap, never more). A
refused write answers with the item: a request that does not fit whole takes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

RETENTION_S = 90 * 86_400  # a day's item is kept 90 days (TTL), for the report


class DynamoDBWarmupBudget:
    def __init__(self, *, client: Any, table_name: str, chunk: int = 10, clock: Callable[[], float] = time.time):
        self._client = client
        self._table = table_name
        self._chunk = max(1, chunk)
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], int] = {}  # (domain, day) -> places taken, not yet used
        self.requests = 0

    def take(self, domain: str, day: str, count: int, cap: int, *, whole: bool = True) -> int:
        count = max(1, count)
        # One reservation at a time in a process: a thread that finds no places held waits for
        # the one reserving, whose chunk it may then use (a write a chunk, not a thread).
        with self._lock:
            held = self._held.get((domain, day), 0)
            if held >= count:
                self._held[(domain, day)] = held - count
                return count
            want = count - held
            got = self._reserve(domain, day, want if want > 1 else self._chunk, least=want if whole else 1, cap=cap)
            if whole and got < want:
                return 0
            self._held = {k: v for k, v in self._held.items() if k[1] == day}  # earlier days' places lapse
            have = held + got
            taken = min(have, count)
            self._held[(domain, day)] = have - taken
            return taken

    def _reserve(self, domain: str, day: str, want: int, *, least: int, cap: int) -> int:
        n = min(want, cap)
        for _ in range(3):
            if n < least:
                return 0
            self.requests += 1
            try:
                self._client.update_item(
                    TableName=self._table,
                    Key={"pk": {"S": f"warmup#{domain}"}, "sk": {"S": f"day#{day}"}},
                    UpdateExpression="ADD sent :n SET expires_at = if_not_exists(expires_at, :exp), #cap = :cap",
                    ConditionExpression="attribute_not_exists(sent) OR sent <= :room",
                    ExpressionAttributeNames={"#cap": "cap"},
                    ExpressionAttributeValues={
                        ":n": {"N": str(n)},
                        ":room": {"N": str(cap - n)},
                        ":cap": {"N": str(cap)},
                        ":exp": {"N": str(int(self._clock()) + RETENTION_S)},
                    },
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return n
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                sent = int((exc.response.get("Item") or {}).get("sent", {}).get("N", "0"))
                n = min(n, cap - sent)
        return 0

    def sent(self, domain: str, day: str) -> int:
        """Places taken on the day (an operator's read)."""
        item = self._client.get_item(
            TableName=self._table, Key={"pk": {"S": f"warmup#{domain}"}, "sk": {"S": f"day#{day}"}}
        ).get("Item")
        return int(item["sent"]["N"]) if item else 0
