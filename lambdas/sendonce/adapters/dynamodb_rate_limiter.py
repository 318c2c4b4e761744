"""A send-rate limit shared by every concurrent consumer, kept in the campaigns table.

Time is cut into one-second slots; a consumer reserves a few sends in the current slot
with one conditional `ADD` (the slot's count may not pass the rate) and waits for the
next slot when the current one is full. The count returned tells the consumer which
places in the slot it holds; place i is used at slot start + i / rate, so sends are
paced evenly through the second rather than bunched at its start. A provider's
"slow down" (429) lowers the shared rate for everyone (multiplicative decrease); it
recovers additively while no further 429 arrives.

    pk = limiter#<provider>, sk = slot#<epoch second>   reserved sends in that second
    pk = limiter#<provider>, sk = state                 throttle factor and when it was cut
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

DECREASE = 0.7  # factor kept after each provider 429
RECOVERY_PER_SECOND = 0.05  # factor regained per second without a 429
MIN_FACTOR = 0.1
STATE_TTL_S = 2.0  # how long a consumer trusts its copy of the shared factor
SLOT_RETENTION_S = 3600


@dataclass
class _Allowance:
    slot: int = -1
    times: list[float] | None = None  # when each reserved place may be used


class DynamoDBRateLimiter:
    def __init__(
        self,
        *,
        client: Any,
        table_name: str,
        rates: Mapping[str, float],
        chunk: int = 4,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._client = client
        self._table = table_name
        self._rates = dict(rates)
        self._chunk = chunk
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._allowance: dict[str, _Allowance] = {}
        self._factor: dict[str, tuple[float, float]] = {}  # provider -> (factor, read_at)
        self._full: dict[str, int] = {}  # provider -> a slot this process saw full
        self.requests = 0

    def rate(self, provider: str) -> float:
        """The rate in force now: the configured rate times the shared throttle factor."""
        return self._rates[provider] * self._shared_factor(provider)

    def acquire(self, provider: str, *, deadline: float | None = None) -> bool:
        """Block until one send is allowed; False when `deadline` (epoch s) passes first."""
        if provider not in self._rates:
            return True
        while True:
            with self._lock:
                now = self._clock()
                slot = int(now)
                allowance = self._allowance.setdefault(provider, _Allowance())
                at = None
                if allowance.slot == slot and allowance.times:
                    at = allowance.times.pop(0)
                elif self._full.get(provider) != slot:
                    rate = self.rate(provider)
                    capacity = max(1, math.floor(rate))
                    want = max(1, min(self._chunk, capacity))
                    granted, first = self._reserve(provider, slot, want, capacity)
                    if granted:
                        # A place whose time has passed is spent no sooner than 1/rate after
                        # the previous one (no catch-up burst), and never after its slot ends.
                        times, cursor = [], now
                        for i in range(granted):
                            at_i = max(slot + (first + i) / rate, cursor)
                            if at_i >= slot + 1:
                                break
                            times.append(at_i)
                            cursor = at_i + 1 / rate
                        if times:
                            at = times.pop(0)
                        self._allowance[provider] = _Allowance(slot=slot, times=times)
                    else:
                        self._full[provider] = slot  # other threads here wait without asking
            if at is not None:
                if deadline is not None and at > deadline:
                    return False
                if at > self._clock():
                    self._sleep(at - self._clock())
                return True
            # The slot is full: wait for the next second, with jitter so consumers spread.
            wait = (slot + 1) - self._clock() + random.uniform(0, 0.02)
            if deadline is not None and self._clock() + wait > deadline:
                return False
            self._sleep(max(0.0, wait))

    def _reserve(self, provider: str, slot: int, want: int, capacity: int) -> tuple[int, int]:
        """Reserve up to `want` places in the slot: (how many, index of the first)."""
        for n in (want, 1) if want > 1 else (1,):
            self.requests += 1
            try:
                response = self._client.update_item(
                    TableName=self._table,
                    Key={"pk": {"S": f"limiter#{provider}"}, "sk": {"S": f"slot#{slot}"}},
                    UpdateExpression="ADD used :n SET expires_at = :exp",
                    ConditionExpression="attribute_not_exists(used) OR used <= :room",
                    ExpressionAttributeValues={
                        ":n": {"N": str(n)},
                        ":room": {"N": str(capacity - n)},
                        ":exp": {"N": str(slot + SLOT_RETENTION_S)},
                    },
                    ReturnValues="UPDATED_NEW",
                )
                return n, int(response["Attributes"]["used"]["N"]) - n
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
        return 0, 0

    def throttled(self, provider: str) -> None:
        """The provider said "too fast": lower the shared rate for every consumer."""
        if provider not in self._rates:
            return
        now = self._clock()
        factor = max(MIN_FACTOR, self._shared_factor(provider) * DECREASE)
        self.requests += 1
        self._client.put_item(
            TableName=self._table,
            Item={
                "pk": {"S": f"limiter#{provider}"},
                "sk": {"S": "state"},
                "factor": {"N": f"{factor:.4f}"},
                "cut_at": {"N": f"{now:.3f}"},
            },
        )
        with self._lock:
            self._factor[provider] = (factor, now)
            self._allowance.pop(provider, None)  # places reserved at the old rate are dropped

    def _shared_factor(self, provider: str) -> float:
        now = self._clock()
        cached = self._factor.get(provider)
        if cached and now - cached[1] < STATE_TTL_S:
            return cached[0]
        self.requests += 1
        item = self._client.get_item(
            TableName=self._table, Key={"pk": {"S": f"limiter#{provider}"}, "sk": {"S": "state"}}
        ).get("Item")
        factor = 1.0
        if item:
            cut = float(item["factor"]["N"])
            factor = min(1.0, cut + RECOVERY_PER_SECOND * max(0.0, now - float(item["cut_at"]["N"])))
        self._factor[provider] = (factor, now)
        return factor
