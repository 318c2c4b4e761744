"""The caps per mailbox-provider group (domain/deliverability/group_caps.py), shared by every
consumer of every campaign through the campaigns table.

Time is cut into one-second slots, as for the provider's rate (rate_limiter.py). A consumer
takes a request's places in the current slot with one conditional `ADD`: the slot's count
may not pass the group's cap, nor the campaign's count its own cap. A refused write answers
with the item, so the next asks for what is left; a request that does not fit whole takes
what is left and the rest from the next slots (a request is at most half a cap, so
that happens only when the cap was cut). No place is handed out in a slot's last
`LATE_IN_SLOT_S`: a request sent then could reach the provider in the next second, on top
of that second's cap.

One-by-one sends (one place each) take `chunk` places at a time and use them within the
slot: a write per a few recipients, never per recipient.

A deferral cuts the group's factor (limiter_state.py's state item for `group#<name>`, cut
multiplicatively, recovering additively): the caps in force are the configured ones times
the factor. A process cuts it at most once a second, so a storm of deferral events is a
write a second, not a write per event.

    pk = limiter#group#<group>, sk = slot#<epoch second>   used: places taken in the second;
                                                           n#<campaign>: the campaign's
    pk = limiter#group#<group>, sk = state                 factor, cut_at (limiter_state.py)
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb.limiter_state import LimiterState
from sendonce.domain.deliverability.group_caps import GROUP_SHARE_OF_CAP
from sendonce.domain.deliverability.ports import GroupPlaces, PlacesTaken

SLOT_RETENTION_S = 3600
LATE_IN_SLOT_S = 0.2  # no place is handed out in a slot's last 200 ms
CUT_EVERY_S = 1.0  # a process cuts a group's factor at most this often
RESERVE_TRIES = 3


def state_key(group: str) -> str:
    """The limiter state's name for a group (`limiter#group#<group>`)."""
    return f"group#{group}"


@dataclass
class _Held:
    slot: int = -1
    left: int = 0  # places taken in the slot and not yet used
    used: int = 0  # places used in the slot
    asked: int = 0  # places the last reservation in the slot asked for
    used_before: int = 0  # places used in the previous slot


class DynamoDBGroupCaps:
    def __init__(
        self,
        *,
        client: Any,
        table_name: str,
        chunk: int = 4,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._client = client
        self._table = table_name
        self._chunk = max(1, chunk)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], _Held] = {}  # (group, campaign) -> places held in a slot
        self._state = LimiterState(client=client, table_name=table_name, clock=clock)
        self._last_cut: dict[str, float] = {}
        self._requests = 0

    @property
    def requests(self) -> int:
        return self._requests + self._state.requests

    def in_force(self, cap: float | None, group: str) -> int | None:
        """A cap in whole places per second, times the group's shared factor (at least 1)."""
        if cap is None:
            return None
        return max(1, math.floor(cap * self._state.read(state_key(group)).factor))

    def take(self, places: GroupPlaces, *, deadline: float | None = None) -> PlacesTaken | None:
        if places.cap is None and places.campaign_cap is None:
            return PlacesTaken()
        needed = max(1, places.count)
        own = (places.group, places.campaign_id)
        asked_at, full = self._clock(), False  # full: a slot it asked in had no place left

        def taken() -> PlacesTaken:
            return PlacesTaken(held_s=round(self._clock() - asked_at, 3) if full else 0.0)

        while True:
            now = self._clock()
            slot = int(now)
            if now - slot < 1 - LATE_IN_SLOT_S:
                with self._lock:
                    held = self._held.setdefault(own, _Held())
                    if held.slot != slot:
                        before = held.used if held.slot == slot - 1 else 0
                        self._held[own] = held = _Held(slot=slot, used_before=before)
                    used = min(held.left, needed)
                    held.left -= used
                    held.used += used
                    needed -= used
                    if needed == 0:
                        return taken()
                    want = self._want(held, needed)
                    held.asked = want
                got = self._reserve(places, slot, want, least=needed)
                with self._lock:
                    held = self._held[own]
                    if held.slot == slot:
                        used = min(got, needed)
                        held.left += got - used
                        held.used += used
                        needed -= used
                if needed == 0:
                    return taken()
                if got > 0:
                    continue  # the slot may have room for more: one more write says
                full = True
            wait = (slot + 1) - self._clock() + random.uniform(0, 0.02)
            if deadline is not None and self._clock() + wait > deadline:
                return None
            self._sleep(max(0.0, wait))

    def _want(self, held: _Held, needed: int) -> int:
        """How many places to ask for: a request's own, or, sending one by one, as many as
        this consumer used in the last second (at least `chunk`), twice its last ask when
        they ran out in this one; `_reserve` keeps it within half the cap, so that
        other consumers find room."""
        if needed > 1:
            return needed
        if held.asked:
            return 2 * held.asked
        return max(self._chunk, held.used_before)

    def _reserve(self, places: GroupPlaces, slot: int, want: int, *, least: int) -> int:
        """Up to `want` places of the slot within both caps, and at least `least` (a request
        waits for a slot it fits in whole) unless `least` is more than the caps in force (it
        then takes what is left, slot after slot); 0 when they are not to be had."""
        total = self.in_force(places.cap, places.group)
        mine = self.in_force(places.campaign_cap, places.group)
        capacity = min(c for c in (total, mine) if c is not None)
        least = 1 if least > capacity else min(least, want)
        n = min(want, max(least, math.ceil(capacity * GROUP_SHARE_OF_CAP)))
        for _ in range(RESERVE_TRIES):
            if n < max(1, least):
                return 0
            self._requests += 1
            try:
                self._client.update_item(**self._reservation(places, slot, n, total, mine))
                return n
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                item = exc.response.get("Item") or {}
                rooms = [n]
                if total is not None:
                    rooms.append(total - int(item.get("used", {}).get("N", "0")))
                if mine is not None:
                    rooms.append(mine - int(item.get(f"n#{places.campaign_id}", {}).get("N", "0")))
                n = min(rooms)
        return 0

    def _reservation(
        self, places: GroupPlaces, slot: int, n: int, total: int | None, mine: int | None
    ) -> dict[str, Any]:
        conditions = []
        values: dict[str, Any] = {":n": {"N": str(n)}, ":exp": {"N": str(slot + SLOT_RETENTION_S)}}
        if total is not None:
            conditions.append("(attribute_not_exists(used) OR used <= :room)")
            values[":room"] = {"N": str(total - n)}
        if mine is not None:
            conditions.append("(attribute_not_exists(#mine) OR #mine <= :myroom)")
            values[":myroom"] = {"N": str(mine - n)}
        return {
            "TableName": self._table,
            "Key": {"pk": {"S": f"limiter#{state_key(places.group)}"}, "sk": {"S": f"slot#{slot}"}},
            "UpdateExpression": "ADD used :n, #mine :n SET expires_at = :exp",
            "ConditionExpression": " AND ".join(conditions),
            "ExpressionAttributeNames": {"#mine": f"n#{places.campaign_id}"},
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def deferred(self, group: str) -> None:
        now = self._clock()
        with self._lock:
            if now - self._last_cut.get(group, -math.inf) < CUT_EVERY_S:
                return
            self._last_cut[group] = now
            # Places taken at the old caps are dropped: the slowdown starts now.
            self._held = {own: held for own, held in self._held.items() if own[0] != group}
        self._state.cut(state_key(group))

    def factor(self, group: str) -> float:
        """The group's shared factor now (1: not slowed)."""
        return self._state.read(state_key(group)).factor
