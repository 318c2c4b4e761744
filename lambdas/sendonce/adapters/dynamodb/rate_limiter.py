"""A send-rate limit shared by every concurrent consumer, kept in the campaigns table.

Time is cut into one-second slots; a consumer reserves sends in the current slot with one
conditional `ADD` (the slot's count may not pass the rate) and waits for the next slot when
the current one is full. The count returned tells the consumer which places in the slot it
holds, and `domain/sending/pacing.py` when to use each. A reservation asks for as many
places as the consumer used in the last second, doubling while it runs out: one write a
second covers a steady consumer however fast it sends, and a refused write answers with
what is left. A provider's "slow down" (429) lowers the shared rate for everyone
(multiplicative decrease); it recovers additively while no further 429 arrives.

A provider that states its limit (Resend's `ratelimit-limit` on every answer) teaches it
to every consumer: the learned limit replaces the configured one, shared through the
state item, so the rate follows the team's real limit before the first 429. The rate in
force keeps `reserve` requests per second of the limit unused: against a provider that
counts a sliding second, sends paced at the limit fill it whenever one is a little late.
One in reserve makes that rare; an answer that still says remaining 0 holds this
consumer for as long as the provider's adapter says (`exhausted`; resend/sender.py).

Campaigns sending at once share the rate (domain/sending/shares.py): a consumer asks for
places *for a campaign* (a `Claimant`); the same `ADD` adds them to the campaign's count in
the slot, which may not pass its places there. Who is sending is what the slot items say
(each reservation returns its item; a consumer's first in a second reads the previous
one's, with the state item, in one request), remembered for `PRESENCE_S`. A campaign with
no place in a slot, or that finds it full, still says it is there (one write, unless the
slot already says so). A paused or finished campaign asks nothing: within `PRESENCE_S` its
share is the others'.

    pk = limiter#<provider>, sk = slot#<epoch second>   see limiter_requests.py
    pk = limiter#<provider>, sk = state                 see limiter_state.py
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb.limiter_requests import (
    CLAIMANT_PREFIX,
    COUNT_PREFIX,
    SLOT_RETENTION_S,
    claimant_names,
    reservation,
    slot_key,
)
from sendonce.adapters.dynamodb.limiter_state import LimiterState
from sendonce.domain.sending.pacing import indexed_times, spread_times
from sendonce.domain.sending.shares import Claimant, divide, places_in_slot, rate_in_force

PRESENCE_S = 2.0  # a campaign seen in a slot this recently is sending: its share is kept
# For this much of each slot shares are among the campaigns seen in the last PRESENCE_S;
# after it, among those that asked in this slot (work-conserving).
SHARES_BIND_S = 0.5
SHARE_SPENT = -1
# Below this rate late places are dropped for a provider with a reserve (pacing.py).
STRICT_SPACING_MAX_RATE = 50.0
RESERVE_TRIES = 3  # writes a reservation may take: each refusal says what is left


@dataclass
class _Allowance:
    slot: int = -1
    times: list[float] | None = None  # when each reserved place may be used
    used: int = 0  # places used in the slot
    asked: int = 0  # places the last reservation asked for


@dataclass
class _SlotSeen:
    """A slot's item as last seen: who asked, places taken (all, per campaign). Counts only
    grow in a slot: a share or a slot seen spent is spent without asking."""

    slot: int
    claimants: dict[str, Claimant] = field(default_factory=dict)
    used: int = 0
    counts: dict[str, int] = field(default_factory=dict)


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
        self._this_slot: dict[str, _SlotSeen] = {}  # provider -> the current slot's item, as last seen
        self._slot_read: dict[str, int] = {}  # provider -> the slot read late in it
        self._looked_back: dict[str, int] = {}  # provider -> the slot whose previous one was read
        # (provider, campaign) -> (slot, late part?) where its places ran out
        self._share_spent: dict[tuple[str, str], tuple[int, bool]] = {}
        self._state = LimiterState(client=client, table_name=table_name, clock=clock)
        self._full: dict[str, int] = {}  # provider -> a slot this process saw full
        self._hold_until: dict[str, float] = {}  # provider -> no send before (its window is spent)
        # provider (indexed places) or (provider, campaign) -> the earliest time for the next place
        self._cursor: dict[Any, float] = {}
        self._requests = 0

    @property
    def requests(self) -> int:
        """DynamoDB requests this limiter made."""
        return self._requests + self._state.requests

    def limit(self, provider: str) -> float:
        """The provider's limit: the one it stated (learned by any consumer), else the configured one."""
        return self._state.read(provider).limit or self._rates[provider]

    def rate(self, provider: str) -> float:
        """The rate in force now: the limit less the reserve, times the shared throttle factor."""
        return rate_in_force(self.limit(provider), self._reserved.get(provider, 0.0), self._state.read(provider).factor)

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
                at = self._next_place(provider, own, claimant, phase, now, dwell_ms)
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

    def _next_place(
        self,
        provider: str,
        own: tuple[str, str],
        claimant: Claimant | None,
        phase: tuple[int, bool],
        now: float,
        dwell_ms: int | None,
    ) -> float | None:
        """When this consumer may use its next place (the lock held): one it holds, else one
        it reserves now; None when the slot, or the campaign's share of this part of it, is
        spent."""
        slot = phase[0]
        allowance = self._allowance.setdefault(own, _Allowance())
        if allowance.slot == slot and allowance.times:
            allowance.used += 1
            return allowance.times.pop(0)
        if self._full.get(provider) == slot or self._share_spent.get(own) == phase:
            return None
        if claimant is not None:
            self._read_slots(provider, slot, late=phase[1])
        rate = self.rate(provider)
        capacity = max(1, math.floor(rate))
        want = self._want(allowance, slot, capacity)
        mine = None
        if claimant is not None:
            mine = self._places(provider, claimant, slot, late=phase[1])
            want = min(want, mine)
            if want <= 0:  # its share gives it no place in this part of the slot
                self._share_spent[own] = phase
                self._present(provider, slot, claimant, dwell_ms)
                return None
        seen = self._this_slot.get(provider)
        if seen is not None and seen.slot == slot:
            if claimant is not None and mine is not None and seen.counts.get(claimant.campaign_id, 0) >= mine:
                self._share_spent[own] = phase
                return None
            if seen.used >= capacity:
                self._full[provider] = slot
                if claimant is not None:
                    self._present(provider, slot, claimant, dwell_ms)
                return None
        granted, first = self._reserve(provider, slot, want, capacity, claimant, mine, dwell_ms)
        if not granted:
            if first == SHARE_SPENT:
                self._share_spent[own] = phase
            else:
                self._full[provider] = slot  # other threads here wait without asking
                if claimant is not None:  # refused, but sending: the others leave it its share
                    self._present(provider, slot, claimant, dwell_ms)
            return None
        if self._reserved.get(provider, 0.0) > 0 and rate <= STRICT_SPACING_MAX_RATE:
            times, self._cursor[provider] = indexed_times(
                slot=slot, first=first, count=granted, rate=rate, now=now, cursor=self._cursor.get(provider, 0.0)
            )
        else:
            times, self._cursor[own] = spread_times(
                slot=slot,
                count=granted,
                now=now,
                cursor=self._cursor.get(own, 0.0),
                spacing=1 / rate,
            )
        at = times.pop(0) if times else None
        used = (allowance.used if allowance.slot == slot else 0) + (at is not None)
        self._allowance[own] = _Allowance(slot=slot, times=times, used=used, asked=want)
        return at

    def _want(self, allowance: _Allowance, slot: int, capacity: int) -> int:
        """How many places to ask for: as many as this consumer used in the last second (at
        least `chunk`); twice its last ask when its places in this second ran out. One
        reservation a second covers a steady consumer, however fast it sends."""
        if allowance.slot == slot:
            want = 2 * allowance.asked
        elif allowance.slot == slot - 1:
            want = max(self._chunk, allowance.used)
        else:
            want = self._chunk
        return max(1, min(want, capacity))

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
        self._read_slots(provider, slot, late=True)
        seen = self._this_slot.get(provider)
        return dict(seen.claimants) if seen and seen.slot == slot else {}

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
        """Up to `want` places in the slot, within a claimant's `mine`: (how many, index of the
        first); (0, SHARE_SPENT) when the campaign's places are taken, (0, 0) when the slot is
        full. A refused write answers with the item, so the next asks for what is left."""
        n = want
        for _ in range(RESERVE_TRIES):
            self._requests += 1
            try:
                response = self._client.update_item(
                    **reservation(self._table, provider, slot, n, capacity, claimant, mine, dwell_ms)
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                item = exc.response.get("Item")
                if item is None:  # no item in the answer: ask for one place
                    n = 1
                    continue
                if claimant is not None:
                    self._learn(provider, item, slot=slot)
                room = capacity - int(item.get("used", {}).get("N", "0"))
                if room <= 0:
                    return 0, 0
                if claimant is not None and mine is not None:
                    room_mine = mine - int(item.get(COUNT_PREFIX + claimant.campaign_id, {}).get("N", "0"))
                    if room_mine <= 0:
                        return 0, SHARE_SPENT
                    room = min(room, room_mine)
                n = min(n, room)
                continue
            if claimant is not None:
                self._learn(provider, response["Attributes"], slot=slot)
            return n, int(response["Attributes"]["used"]["N"]) - n
        return 0, 0

    def _present(self, provider: str, slot: int, claimant: Claimant, dwell_ms: int | None) -> None:
        """A campaign whose share gives it no place in this slot says it is sending (no place),
        unless the slot already says so (any consumer of it wrote there)."""
        seen = self._this_slot.get(provider)
        if seen is not None and seen.slot == slot and claimant.campaign_id in seen.claimants:
            return
        self._requests += 1
        names = claimant_names(claimant)
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
            Key=slot_key(provider, slot),
            UpdateExpression=update,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
        self._learn(provider, response["Attributes"], slot=slot)

    def _read_slots(self, provider: str, slot: int, *, late: bool) -> None:
        """What a campaign's reservation reads first, in one request: who sent in the whole
        previous second, once a slot (a consumer that writes early in each second would
        otherwise never see those that write late in it); late in a slot, who asked in it;
        and with them the state item (`LimiterState`; read alone once its copy is 2 s old).
        A batch-mode consumer asks about once a second and found all three due on each
        message: one `BatchGetItem`, not three `GetItem`s (issue 35). A key the batch leaves
        unprocessed is asked for again, up to `RESERVE_TRIES` requests in all."""
        due: dict[str, dict[str, Any]] = {}
        if self._looked_back.get(provider) != slot:
            due["back"] = slot_key(provider, slot - 1)
        if late and self._slot_read.get(provider) != slot:
            due["slot"] = slot_key(provider, slot)
        if not due:
            return
        due["state"] = self._state.key(provider)  # half a read unit more, no request more
        found: dict[str, dict[str, Any]] = {}
        keys = list(due.values())
        for _ in range(RESERVE_TRIES):
            self._requests += 1
            response = self._client.batch_get_item(
                RequestItems={self._table: {"Keys": keys, "ConsistentRead": "slot" in due}}
            )
            found.update((item["sk"]["S"], item) for item in response.get("Responses", {}).get(self._table, []))
            keys = response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", [])
            if not keys:
                break
        left = {key["sk"]["S"] for key in keys}
        for what, key in due.items():
            sk = key["sk"]["S"]
            if sk in left:  # not read: asked for again at the next reservation
                continue
            item = found.get(sk, {})
            if what == "state":
                self._state.adopt(provider, item)
            elif what == "back":
                self._looked_back[provider] = slot
                self._learn(provider, item)
            else:
                self._slot_read[provider] = slot
                self._learn(provider, item, slot=slot)

    def _learn(self, provider: str, item: Mapping[str, Any], *, slot: int | None = None) -> None:
        """Who a slot item says is sending (every campaign that wrote to it); `slot`: the
        item is the current slot's."""
        now = self._clock()
        seen = self._seen.setdefault(provider, {})
        current = None
        if slot is not None:
            current = self._this_slot.get(provider)
            if current is None or current.slot != slot:
                current = self._this_slot[provider] = _SlotSeen(slot)
            current.used = max(current.used, int(item.get("used", {}).get("N", "0")))
        for name, value in item.items():
            if name.startswith(CLAIMANT_PREFIX):
                cid = name.removeprefix(CLAIMANT_PREFIX)
                seen[cid] = (Claimant.decode(cid, value["S"]), now)
                if current is not None:
                    current.claimants[cid] = seen[cid][0]
            elif name.startswith(COUNT_PREFIX) and current is not None:
                cid = name.removeprefix(COUNT_PREFIX)
                current.counts[cid] = max(current.counts.get(cid, 0), int(value["N"]))
        for cid in [cid for cid, (_, at) in seen.items() if now - at > PRESENCE_S]:
            del seen[cid]

    def throttled(self, provider: str) -> None:
        """The provider said "too fast": lower the shared rate for every consumer."""
        if provider not in self._rates:
            return
        self._state.cut(provider)
        with self._lock:
            self._drop_allowances(provider)  # places reserved at the old rate are dropped

    def observed_limit(self, provider: str, limit_per_s: float) -> None:
        """The provider stated its limit (e.g. Resend's `ratelimit-limit`): use it from now
        on, here at once and in every consumer at its next state read."""
        if provider not in self._rates or not limit_per_s or limit_per_s <= 0:
            return
        if self._state.learn(provider, limit_per_s):
            with self._lock:
                self._drop_allowances(provider)

    def exhausted(self, provider: str, *, reset_s: float) -> None:
        """The provider said none is left in its window (remaining 0) for `reset_s`: this
        consumer starts no send to it before then; its places after that stay its own."""
        if provider not in self._rates:
            return
        with self._lock:
            until = self._clock() + max(0.0, reset_s)
            if until > self._hold_until.get(provider, 0.0):
                self._hold_until[provider] = until
                for own, held in self._allowance.items():
                    if own[0] == provider and held.times:
                        held.times = [at for at in held.times if at >= until]

    def _drop_allowances(self, provider: str) -> None:
        self._allowance = {own: held for own, held in self._allowance.items() if own[0] != provider}
