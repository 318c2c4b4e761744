"""When a consumer uses the places it reserved in a one-second slot of the shared rate.

Two ways, by the provider:
- `spread_times` (the default): a reservation's places are due from now, 1 / rate apart,
  squeezed into what is left of the slot when they would not fit. A consumer that reserved
  a second's worth in one write starts on them at once and sends them as fast as its
  threads go; had they been due at their index in the slot, one that reserved after
  another would find its places in the second half and lose what it could not send there.
- `indexed_times`, for a provider that counts a sliding second (one paced with a reserve)
  at a low rate: place i of the slot is due at slot start + i / rate, so the places of
  different consumers never meet. A place whose time has passed is used no sooner than
  1 / rate after the last place this consumer used (`cursor`), whichever of its threads
  holds it, and one more than a quarter of 1 / rate late is dropped: shifted places of two
  consumers would meet in a burst.

Neither uses a place after its slot ends.
"""

from __future__ import annotations


def spread_times(*, slot: int, count: int, now: float, cursor: float, spacing: float) -> tuple[list[float], float]:
    """`count` places from now (or the cursor), `spacing` apart, or closer when that would
    pass the slot's end; and the cursor after them."""
    start = max(now, cursor)
    if count <= 0 or start >= slot + 1:
        return [], cursor
    step = min(spacing, (slot + 1 - start) / count)
    return [start + i * step for i in range(count)], start + count * step


def indexed_times(
    *, slot: int, first: int, count: int, rate: float, now: float, cursor: float
) -> tuple[list[float], float]:
    """When to use places `first` … `first + count - 1` of `slot`, and the cursor after them."""
    times: list[float] = []
    cursor = max(now, cursor)
    for i in range(count):
        place = slot + (first + i) / rate
        if place < now - 0.25 / rate:
            continue
        at = max(place, cursor)
        if at >= slot + 1:
            break
        times.append(at)
        cursor = at + 1 / rate
    return times, cursor
