"""When a consumer uses the places it reserved (domain/sending/pacing.py)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from sendonce.domain.sending.pacing import indexed_times, spread_times

SLOT = 1_000


def test_a_second_of_places_reserved_at_its_start_is_spread_through_it():
    times, cursor = spread_times(slot=SLOT, count=150, now=SLOT + 0.0, cursor=0.0, spacing=1 / 150)
    assert len(times) == 150 and times[0] == SLOT and times[-1] < SLOT + 1
    assert min(b - a for a, b in itertools.pairwise(times)) > 1 / 151
    assert cursor <= SLOT + 1


def test_places_reserved_late_in_the_slot_fit_in_what_is_left_of_it():
    times, _ = spread_times(slot=SLOT, count=4, now=SLOT + 0.9, cursor=0.0, spacing=0.25)
    assert len(times) == 4 and all(SLOT + 0.9 <= t < SLOT + 1 for t in times)


def test_a_new_reservation_starts_after_the_last_place_of_the_previous_one():
    first, cursor = spread_times(slot=SLOT, count=4, now=SLOT + 0.0, cursor=0.0, spacing=0.1)
    second, _ = spread_times(slot=SLOT, count=4, now=SLOT + 0.05, cursor=cursor, spacing=0.1)
    assert second[0] >= first[-1] + 0.1 - 1e-9


@given(
    count=st.integers(1, 500),
    now=st.floats(0, 0.999),
    cursor=st.floats(0, 1.2),
    spacing=st.floats(0.0001, 1),
)
def test_spread_places_are_in_order_within_the_slot_and_never_closer_than_asked_unless_time_runs_short(
    count, now, cursor, spacing
):
    times, after = spread_times(slot=SLOT, count=count, now=SLOT + now, cursor=SLOT + cursor, spacing=spacing)
    assert all(SLOT + now <= t < SLOT + 1 for t in times)
    assert times == sorted(times)
    if times:
        assert len(times) == count
        gaps = [b - a for a, b in itertools.pairwise(times)]
        fits = (SLOT + 1 - times[0]) / count
        assert all(abs(g - min(spacing, fits)) < 1e-9 for g in gaps)
        assert after <= SLOT + 1 + 1e-9


def test_indexed_places_are_due_at_their_index_and_late_ones_are_dropped():
    times, cursor = indexed_times(slot=SLOT, first=2, count=3, rate=4, now=SLOT + 0.0, cursor=0.0)
    assert times == [SLOT + 0.5, SLOT + 0.75] and cursor == SLOT + 1.0  # place 4 would be at the slot's end
    late, _ = indexed_times(slot=SLOT, first=0, count=3, rate=4, now=SLOT + 0.5, cursor=0.0)
    assert late == [SLOT + 0.5]  # places 0 and 1 are past: dropped
