"""Consumers of the shared rate limiter on one virtual timeline, for its tests and its
benchmark (`bench/limiter.py`): the real `DynamoDBRateLimiter` against a real DynamoDB
table (moto's), its consumers as threads whose clock and sleep are virtual. No timed
figure comes out of it: time is the virtual clock's.
"""

from __future__ import annotations

import heapq
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.domain.sending.shares import Claimant

START = 2_000_000_000.0
SEND_S = 0.01  # a consumer thread's time between a place and its next ask


class VirtualTime:
    """Threads on one virtual timeline: one runs at a time, and a thread's sleep hands the
    turn to whichever thread wakes first (ties: the lower index). So their requests reach
    DynamoDB in the order of their times, as concurrent consumers' would. Thread k starts
    at `start + k * stagger`."""

    def __init__(self, count: int, start: float, *, stagger: float = 0.001):
        self.now = [start + k * stagger for k in range(count)]
        self._live = count
        self._lock = threading.Lock()
        self._sleeping: list[tuple[float, int]] = []
        self._turn = [threading.Event() for _ in range(count)]

    def clock(self, k: int) -> Callable[[], float]:
        return lambda: self.now[k]

    def sleep(self, k: int, seconds: float) -> None:
        with self._lock:
            heapq.heappush(self._sleeping, (self.now[k] + max(0.0, seconds), k))
            self._next()
        self._turn[k].wait()
        self._turn[k].clear()

    def done(self, k: int) -> None:
        with self._lock:
            self._live -= 1
            self._next()

    def _next(self) -> None:
        if self._sleeping and len(self._sleeping) >= self._live:
            at, k = heapq.heappop(self._sleeping)
            self.now[k] = at
            self._turn[k].set()


def run_consumers(
    client: Any,
    table_name: str,
    claimants: list[Claimant | None],
    *,
    rate: float,
    slots: int,
    stops: Mapping[str, int] | None = None,
    start: float = START,
    reserve: float = 0.0,
    dwell_ms: Mapping[str, int] | None = None,
    threads: int = 1,
    send_s: float = SEND_S,
    chunk: int = 4,
    stagger: float = 0.001,
) -> list[Counter[str]]:
    """Places per campaign in each of `slots` seconds: one consumer per claimant (`threads`
    threads sharing its limiter, as a Lambda instance's send threads do), each thread asking
    again `send_s` after every place, until the last slot ends (or, for a campaign in
    `stops`, until that slot starts: it paused)."""
    time_ = VirtualTime(len(claimants) * threads, start, stagger=stagger)
    end = start + slots
    places: list[tuple[str, float]] = []
    index = threading.local()

    def consumer(k: int, claimant: Claimant | None) -> list[threading.Thread]:
        limiter = DynamoDBRateLimiter(
            client=client,
            table_name=table_name,
            rates={"resend": rate},
            reserve={"resend": reserve},
            chunk=chunk,
            clock=lambda: time_.now[index.k],
            sleep=lambda seconds: time_.sleep(index.k, seconds),
        )
        name = claimant.campaign_id if claimant else "-"
        stop = start + (stops or {}).get(name, slots)

        def thread(j: int) -> None:
            index.k = j
            try:
                time_.sleep(j, 0)
                while time_.now[j] < stop:
                    dwell = (dwell_ms or {}).get(name)
                    if not limiter.acquire("resend", deadline=stop - 0.001, claimant=claimant, dwell_ms=dwell):
                        break  # no place before it stops
                    places.append((name, time_.now[j]))
                    time_.sleep(j, send_s)
            finally:
                time_.done(j)

        return [threading.Thread(target=thread, args=(k * threads + t,), daemon=True) for t in range(threads)]

    workers = [worker for k, c in enumerate(claimants) for worker in consumer(k, c)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=600)
    taken = [Counter[str]() for _ in range(slots)]
    for campaign, at in places:
        if start <= at < end:
            taken[int(at - start)][campaign] += 1
    return taken
