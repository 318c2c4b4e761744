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

Campaigns sending at once share the rate (domain/sending/shares.py): a consumer asks for
places *for a campaign* (a `Claimant`), and the same conditional `ADD` that takes places in
the slot adds them to the campaign's own count there, which may not pass the campaign's
places in that slot. Who is sending right now is what the slot items say: each reservation
returns the slot item, and a consumer's first in a second reads the previous second's; the
claimants found there this process remembers for `PRESENCE_S`; a campaign whose share gives it no place in a slot, or that finds the slot
full, still says it is there (one write, no place), so the others leave it its share. A paused or finished
campaign asks nothing: within `PRESENCE_S` its share is the others'.

    pk = limiter#<provider>, sk = slot#<epoch second>   reserved sends in that second;
                                                        per campaign: n#<id> places taken,
                                                        w#<id> how it shares, d#<id> the
                                                        dwell of its latest message (ms)
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

from sendonce.domain.sending.shares import Claimant, divide, places_in_slot

DECREASE = 0.7  # factor kept after each provider 429
RECOVERY_PER_SECOND = 0.05  # factor regained per second without a 429
MIN_FACTOR = 0.1
STATE_TTL_S = 2.0  # how long a consumer trusts its copy of the shared factor
SLOT_RETENTION_S = 3600
# A campaign seen in a slot this recently is sending: its share is kept for it. Every
# sending campaign writes to the slot at least once a second (a place, or its presence).
PRESENCE_S = 2.0
# For this much of each one-second slot shares are among the campaigns seen sending in the
# last PRESENCE_S; after it, among those that asked in this slot: a campaign seen a moment
# ago that has no message in hand now does not cost the others its share (work-conserving).
SHARES_BIND_S = 0.5
COUNT_PREFIX, CLAIMANT_PREFIX, DWELL_PREFIX = "n#", "w#", "d#"
SHARE_SPENT = -1
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
        self._allowance: dict[tuple[str, str], _Allowance] = {}  # (provider, campaign or "")
        # provider -> campaign -> (how it shares, when a slot last showed it sending)
        self._seen: dict[str, dict[str, tuple[Claimant, float]]] = {}
        self._this_slot: dict[str, tuple[int, dict[str, Claimant]]] = {}  # provider -> who asked in that slot
        self._slot_read: dict[str, int] = {}  # provider -> the slot read late in it
        self._looked_back: dict[str, int] = {}  # provider -> the slot whose previous one was read
        # (provider, campaign) -> (slot, late part?) where its places ran out
        self._share_spent: dict[tuple[str, str], tuple[int, bool]] = {}
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

    def shares(self, provider: str, claimant: Claimant) -> dict[str, float]:
        """Each campaign's rate now, as this process sees who is sending (itself included)."""
        now = self._clock()
        seen = self._seen.get(provider, {})
        sending = {cid: c for cid, (c, at) in seen.items() if now - at <= PRESENCE_S}
        sending[claimant.campaign_id] = claimant
        return divide(self.rate(provider), sending.values())

    def acquire(
        self,
        provider: str,
        *,
        deadline: float | None = None,
        claimant: Claimant | None = None,
        dwell_ms: int | None = None,
    ) -> bool:
        """Block until one send is allowed; False when `deadline` (epoch s) passes first.
        With a `claimant`, the send is also within that campaign's share of the rate;
        `dwell_ms` (how long its message waited in the queue) is recorded for the operator."""
        if provider not in self._rates:
            return True
        own = (provider, claimant.campaign_id if claimant else "")
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
                # Shares bind in a slot's first part; its rest is for whoever still asks
                # (work-conserving: places a campaign seen a moment ago leaves are not lost).
                phase = (slot, now - slot >= SHARES_BIND_S)
                allowance = self._allowance.setdefault(own, _Allowance())
                at = None
                granted, first = 0, 0
                if allowance.slot == slot and allowance.times:
                    at = allowance.times.pop(0)
                elif self._full.get(provider) != slot and self._share_spent.get(own) != phase:
                    rate = self.rate(provider)
                    capacity = max(1, math.floor(rate))
                    want = max(1, min(self._chunk, capacity))
                    mine = None
                    if claimant is not None:
                        self._look_back(provider, slot)
                        mine = self._places(provider, claimant, slot, late=phase[1])
                        want = min(want, mine)
                    if want > 0:
                        granted, first = self._reserve(provider, slot, want, capacity, claimant, mine, dwell_ms)
                        if first == SHARE_SPENT:
                            self._share_spent[own] = phase
                    elif claimant is not None:  # its share gives it no place in this part of the slot
                        self._present(provider, slot, claimant, dwell_ms)
                        self._share_spent[own] = phase
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
                        self._allowance[own] = _Allowance(slot=slot, times=times)
                    elif want > 0 and self._share_spent.get(own) != phase:
                        self._full[provider] = slot  # other threads here wait without asking
                        if claimant is not None:  # refused, but sending: the others leave it its share
                            self._present(provider, slot, claimant, dwell_ms)
            if at is not None:
                if deadline is not None and at > deadline:
                    return False
                if at > self._clock():
                    self._sleep(at - self._clock())
                return True
            if self._share_spent.get(own) == phase and not phase[1]:
                # Its share of the slot's first part is spent: ask again for what is left after it.
                wait = (slot + SHARES_BIND_S) - self._clock() + random.uniform(0, 0.02)
            else:
                # The slot is full: wait for the next second, with jitter so consumers spread.
                wait = (slot + 1) - self._clock() + random.uniform(0, 0.02)
            if deadline is not None and self._clock() + wait > deadline:
                return False
            self._sleep(max(0.0, wait))

    def _places(self, provider: str, claimant: Claimant, slot: int, *, late: bool) -> int:
        """The claimant's places in the slot: its share of the rate among the campaigns
        sending now; late in the slot, among those that asked in this slot only."""
        if not late:
            shares = self.shares(provider, claimant)
        else:
            in_slot = self._in_slot(provider, slot)
            in_slot[claimant.campaign_id] = claimant
            shares = divide(self.rate(provider), in_slot.values())
        return places_in_slot(shares, slot=slot, campaign_id=claimant.campaign_id)

    def _in_slot(self, provider: str, slot: int) -> dict[str, Claimant]:
        """The campaigns that asked in this slot (its item, read once late in the slot)."""
        if self._slot_read.get(provider) != slot:
            self._slot_read[provider] = slot
            self.requests += 1
            item = self._client.get_item(
                TableName=self._table,
                Key={"pk": {"S": f"limiter#{provider}"}, "sk": {"S": f"slot#{slot}"}},
                ConsistentRead=True,
            ).get("Item")
            self._learn(provider, item or {}, slot=slot)
        seen = self._this_slot.get(provider)
        return dict(seen[1]) if seen and seen[0] == slot else {}

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

    def _reserve(
        self,
        provider: str,
        slot: int,
        want: int,
        capacity: int,
        claimant: Claimant | None = None,
        mine: int | None = None,
        dwell_ms: int | None = None,
    ) -> tuple[int, int]:
        """Reserve up to `want` places in the slot, within the campaign's `mine` places there
        when a claimant asks: (how many, index of the first); (0, SHARE_SPENT) when the slot
        has room but the campaign's places in it are taken."""
        for n in (want, 1) if want > 1 else (1,):
            self.requests += 1
            update = "ADD used :n SET expires_at = :exp"
            condition = "(attribute_not_exists(used) OR used <= :room)"
            names: dict[str, str] = {}
            values = {
                ":n": {"N": str(n)},
                ":room": {"N": str(capacity - n)},
                ":exp": {"N": str(slot + SLOT_RETENTION_S)},
            }
            if claimant is not None:
                update = "ADD used :n, #mine :n SET expires_at = :exp, #who = :who"
                names = self._names(claimant)
                values[":who"] = {"S": claimant.encode()}
                if mine is not None:
                    condition += " AND (attribute_not_exists(#mine) OR #mine <= :myroom)"
                    values[":myroom"] = {"N": str(mine - n)}
                if dwell_ms is not None:
                    update += ", #dwell = :dwell"
                    values[":dwell"] = {"N": str(max(0, int(dwell_ms)))}
                else:
                    names.pop("#dwell")
            request: dict[str, Any] = {
                "TableName": self._table,
                "Key": {"pk": {"S": f"limiter#{provider}"}, "sk": {"S": f"slot#{slot}"}},
                "UpdateExpression": update,
                "ConditionExpression": condition,
                "ExpressionAttributeValues": values,
                "ReturnValues": "ALL_NEW" if claimant is not None else "UPDATED_NEW",
            }
            if names:
                request["ExpressionAttributeNames"] = names
            if claimant is not None:
                request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
            try:
                response = self._client.update_item(**request)
                if claimant is not None:
                    self._learn(provider, response["Attributes"], slot=slot)
                return n, int(response["Attributes"]["used"]["N"]) - n
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                if claimant is not None:
                    item = exc.response.get("Item") or {}
                    self._learn(provider, item, slot=slot)
                    full = int(item.get("used", {}).get("N", "0")) > capacity - 1
                    if not full and mine is not None:
                        # The slot has room, this campaign's share of it does not.
                        mine_now = int(item.get(f"{COUNT_PREFIX}{claimant.campaign_id}", {}).get("N", "0"))
                        if mine_now + 1 > mine:
                            return 0, SHARE_SPENT
        return 0, 0

    @staticmethod
    def _names(claimant: Claimant) -> dict[str, str]:
        cid = claimant.campaign_id
        return {"#mine": COUNT_PREFIX + cid, "#who": CLAIMANT_PREFIX + cid, "#dwell": DWELL_PREFIX + cid}

    def _present(self, provider: str, slot: int, claimant: Claimant, dwell_ms: int | None) -> None:
        """A campaign whose share gives it no place in this slot says it is sending (no place)."""
        self.requests += 1
        names = self._names(claimant)
        update = "SET expires_at = :exp, #who = :who"
        values = {":exp": {"N": str(slot + SLOT_RETENTION_S)}, ":who": {"S": claimant.encode()}}
        if dwell_ms is not None:
            update += ", #dwell = :dwell"
            values[":dwell"] = {"N": str(max(0, int(dwell_ms)))}
        else:
            names.pop("#dwell")
        names.pop("#mine")
        response = self._client.update_item(
            TableName=self._table,
            Key={"pk": {"S": f"limiter#{provider}"}, "sk": {"S": f"slot#{slot}"}},
            UpdateExpression=update,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
        self._learn(provider, response["Attributes"], slot=slot)

    def _look_back(self, provider: str, slot: int) -> None:
        """Once per slot: who sent in the whole previous second. A consumer that writes early
        in each second would otherwise never see those that write late in it."""
        if self._looked_back.get(provider) == slot:
            return
        self._looked_back[provider] = slot
        self.requests += 1
        item = self._client.get_item(
            TableName=self._table, Key={"pk": {"S": f"limiter#{provider}"}, "sk": {"S": f"slot#{slot - 1}"}}
        ).get("Item")
        if item:
            self._learn(provider, item)

    def _learn(self, provider: str, item: Mapping[str, Any], *, slot: int | None = None) -> None:
        """Who a slot item says is sending (every campaign that wrote to it); `slot`: the
        item is the current slot's."""
        now = self._clock()
        seen = self._seen.setdefault(provider, {})
        current = self._this_slot.get(provider)
        if slot is not None and (current is None or current[0] != slot):
            current = self._this_slot[provider] = (slot, {})
        for name, value in item.items():
            if name.startswith(CLAIMANT_PREFIX):
                cid = name.removeprefix(CLAIMANT_PREFIX)
                seen[cid] = (Claimant.decode(cid, value["S"]), now)
                if slot is not None and current is not None:
                    current[1][cid] = seen[cid][0]
        for cid in [cid for cid, (_, at) in seen.items() if now - at > PRESENCE_S]:
            del seen[cid]

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
            self._drop_allowances(provider)  # places reserved at the old rate are dropped

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
            self._drop_allowances(provider)

    def exhausted(self, provider: str, *, reset_s: float) -> None:
        """The provider said none is left in its window (remaining 0), which resets in
        `reset_s`: this consumer starts no send to it before then."""
        if provider not in self._rates:
            return
        with self._lock:
            until = self._clock() + max(0.0, reset_s)
            if until > self._hold_until.get(provider, 0.0):
                self._hold_until[provider] = until
                self._drop_allowances(provider)

    def _drop_allowances(self, provider: str) -> None:
        for own in [own for own in self._allowance if own[0] == provider]:
            del self._allowance[own]

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
