"""A send-rate limit shared by every concurrent consumer, kept in the campaigns table.

Time is cut into one-second slots; a consumer reserves a few sends in the current slot
with one conditional `ADD` (the slot's count may not pass the rate) and waits for the
next slot when the current one is full. The count returned tells the consumer which
places in the slot it holds; place i is used at slot start + i / rate, so sends are
paced evenly through the second rather than bunched at its start. A place whose time has
passed is used no sooner than 1 / rate after the last place this consumer used, whichever
of its threads holds it, so a consumer that fell behind does not catch up in a burst; for
a provider paced with a reserve at 50/s or less, a place more than a quarter of 1 / rate
late is dropped instead, so places of different consumers never meet either. A provider's
"slow down" (429) lowers the shared rate for everyone (multiplicative decrease); it
recovers additively while no further 429 arrives.

A provider that states its limit (Resend's `ratelimit-limit` on every answer) teaches it
to every consumer: the learned limit replaces the configured one, shared through the
state item, so the rate follows the team's real limit before the first 429. The rate in
force keeps `reserve` requests per second of the limit unused: against a provider that
counts a sliding second, sends paced at exactly the limit collide whenever one arrives a
little late and the next a little early, and every answer says remaining 0. With one
place in reserve the window never fills from our own sends, so an answer with remaining
0 means the team is busy elsewhere, and the next send waits for the reset the answer
names (`exhausted`).

    pk = limiter#<provider>, sk = slot#<epoch second>   reserved sends in that second
    pk = limiter#<provider>, sk = state                 throttle factor and when it was cut;
                                                        the learned limit and when it was seen
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
# Below this rate (a place is worth 20 ms or more) late places are dropped for a provider
# with a reserve; above it dropping them would burn a reservation per few places.
STRICT_SPACING_MAX_RATE = 50.0


@dataclass(frozen=True)
class _SharedState:
    factor: float  # the throttle factor, recovered to now
    limit: float | None  # the limit the provider stated, if any consumer has seen one
    read_at: float


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
        reserve: Mapping[str, float] | None = None,
        chunk: int = 4,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._client = client
        self._table = table_name
        self._rates = dict(rates)
        self._reserved = dict(reserve or {})
        self._chunk = chunk
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._allowance: dict[str, _Allowance] = {}
        self._state: dict[str, _SharedState] = {}  # provider -> the state item as last read
        self._full: dict[str, int] = {}  # provider -> a slot this process saw full
        self._hold_until: dict[str, float] = {}  # provider -> no send before (its window is spent)
        self._cursor: dict[str, float] = {}  # provider -> the earliest time for this consumer's next place
        self.requests = 0

    def limit(self, provider: str) -> float:
        """The provider's limit: the one it stated (learned by any consumer), else the configured one."""
        return self._shared_state(provider).limit or self._rates[provider]

    def rate(self, provider: str) -> float:
        """The rate in force now: the limit less the reserve, times the shared throttle factor."""
        limit = self.limit(provider)
        paced = max(limit - self._reserved.get(provider, 0.0), limit / 2)
        return paced * self._shared_state(provider).factor

    def acquire(self, provider: str, *, deadline: float | None = None) -> bool:
        """Block until one send is allowed; False when `deadline` (epoch s) passes first."""
        if provider not in self._rates:
            return True
        while True:
            hold = self._hold_until.get(provider, 0.0)
            if hold > self._clock():
                if deadline is not None and hold > deadline:
                    return False
                self._sleep(hold - self._clock())
                continue
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
                        # the previous one this consumer spent, whichever thread holds it (no
                        # catch-up burst), and never after its slot ends.
                        # Against a provider that counts a sliding second (one with a reserve)
                        # at a low rate, a place more than a quarter of 1/rate late is dropped
                        # instead: shifted places of two consumers would meet in a burst.
                        strict = self._reserved.get(provider, 0.0) > 0 and rate <= STRICT_SPACING_MAX_RATE
                        times, cursor = [], max(now, self._cursor.get(provider, 0.0))
                        for i in range(granted):
                            place = slot + (first + i) / rate
                            if strict and place < now - 0.25 / rate:
                                continue
                            at_i = max(place, cursor)
                            if at_i >= slot + 1:
                                break
                            times.append(at_i)
                            cursor = at_i + 1 / rate
                        self._cursor[provider] = cursor
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

    def acquire_background(self, provider: str, *, share: float = 0.5, deadline: float | None = None) -> bool:
        """One request at a lower priority than sending (an audit's reads): a place in the
        current second only while less than `share` of its capacity is taken, so that
        consumers arriving later in the second still find the rest; else the next second.
        Every place it takes is one fewer for sending in that second: the team's limit is
        one budget. False when `deadline` (epoch s) passes first."""
        if provider not in self._rates:
            return True
        while True:
            now = self._clock()
            hold = self._hold_until.get(provider, 0.0)
            if hold > now:
                if deadline is not None and hold > deadline:
                    return False
                self._sleep(hold - now)
                continue
            slot = int(now)
            room = max(1, math.floor(max(1, math.floor(self.rate(provider))) * share))
            granted, _ = self._reserve(provider, slot, 1, room)
            if granted:
                return True
            wait = (slot + 1) - self._clock() + random.uniform(0, 0.05)
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
        state = self._shared_state(provider)
        factor = max(MIN_FACTOR, state.factor * DECREASE)
        self.requests += 1
        # SET, not a put: the learned limit on the same item stays.
        self._client.update_item(
            TableName=self._table,
            Key=self._state_key(provider),
            UpdateExpression="SET #factor = :f, cut_at = :t",
            ExpressionAttributeNames={"#factor": "factor"},
            ExpressionAttributeValues={":f": {"N": f"{factor:.4f}"}, ":t": {"N": f"{now:.3f}"}},
        )
        with self._lock:
            self._state[provider] = _SharedState(factor=factor, limit=state.limit, read_at=now)
            self._allowance.pop(provider, None)  # places reserved at the old rate are dropped

    def observed_limit(self, provider: str, limit_per_s: float) -> None:
        """The provider stated its limit (e.g. Resend's `ratelimit-limit`): use it from now
        on, here at once and in every consumer at its next state read. Written only when it
        differs from what this consumer last knew, so a steady limit costs no request."""
        if provider not in self._rates or not limit_per_s or limit_per_s <= 0:
            return
        state = self._shared_state(provider)
        if state.limit == limit_per_s:
            return
        now = self._clock()
        self.requests += 1
        self._client.update_item(
            TableName=self._table,
            Key=self._state_key(provider),
            UpdateExpression="SET #limit = :l, limit_seen_at = :t",
            ExpressionAttributeNames={"#limit": "limit"},
            ExpressionAttributeValues={":l": {"N": f"{limit_per_s:g}"}, ":t": {"N": f"{now:.3f}"}},
        )
        with self._lock:
            self._state[provider] = _SharedState(factor=state.factor, limit=limit_per_s, read_at=state.read_at)
            self._allowance.pop(provider, None)

    def exhausted(self, provider: str, *, reset_s: float) -> None:
        """The provider said none is left in its window (remaining 0), which resets in
        `reset_s`: this consumer starts no send to it before then."""
        if provider not in self._rates:
            return
        with self._lock:
            until = self._clock() + max(0.0, reset_s)
            if until > self._hold_until.get(provider, 0.0):
                self._hold_until[provider] = until
                self._allowance.pop(provider, None)

    @staticmethod
    def _state_key(provider: str) -> dict[str, Any]:
        return {"pk": {"S": f"limiter#{provider}"}, "sk": {"S": "state"}}

    def _shared_state(self, provider: str) -> _SharedState:
        now = self._clock()
        cached = self._state.get(provider)
        if cached and now - cached.read_at < STATE_TTL_S:
            return cached
        self.requests += 1
        item = self._client.get_item(TableName=self._table, Key=self._state_key(provider)).get("Item") or {}
        factor = 1.0
        if "factor" in item:
            cut = float(item["factor"]["N"])
            factor = min(1.0, cut + RECOVERY_PER_SECOND * max(0.0, now - float(item["cut_at"]["N"])))
        limit = float(item["limit"]["N"]) if "limit" in item else None
        state = _SharedState(factor=factor, limit=limit, read_at=now)
        self._state[provider] = state
        return state
