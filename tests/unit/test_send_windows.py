"""Send windows (domain/campaigns/windows.py): open and next opening in the window's own time
zone, across daylight-saving changes. What a closed window does: test_window_pauses.py."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sendonce.domain.campaigns.scheduling import iso, parse_instant
from sendonce.domain.campaigns.windows import DAYS, IANA_ZONES, SendWindow

OFFICE = SendWindow.model_validate(
    {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "to": "17:00", "tz": "Europe/Berlin"}
)


def at(text: str) -> int:
    return parse_instant(text)


def test_open_from_the_opening_to_just_before_the_closing_on_its_days():
    assert not OFFICE.is_open(at("2026-12-02T08:59:59+01:00"))
    assert OFFICE.is_open(at("2026-12-02T09:00:00+01:00"))
    assert OFFICE.is_open(at("2026-12-02T16:59:59+01:00"))
    assert not OFFICE.is_open(at("2026-12-02T17:00:00+01:00"))
    assert not OFFICE.is_open(at("2026-12-05T10:00:00+01:00"))  # a Saturday
    assert OFFICE.closing_after(at("2026-12-02T10:00:00+01:00")) == at("2026-12-02T17:00:00+01:00")
    assert OFFICE.closing_after(at("2026-12-02T18:00:00+01:00")) is None


def test_the_next_opening_after_friday_evening_is_monday_morning_across_the_autumn_change():
    # Summer time (UTC+2) ends on Sunday 2026-10-25: Monday 09:00 is UTC+1, i.e. 08:00Z, not 07:00Z.
    friday_evening = at("2026-10-23T18:00:00+02:00")
    opening = OFFICE.next_opening(friday_evening)
    assert iso(opening) == "2026-10-26T08:00:00Z"
    assert not OFFICE.is_open(at("2026-10-26T07:30:00Z")) and OFFICE.is_open(at("2026-10-26T08:00:00Z"))


def test_the_next_opening_across_the_spring_change_and_one_the_change_skips():
    # Summer time begins on Sunday 2026-03-29: Monday 09:00 is UTC+2, i.e. 07:00Z.
    assert iso(OFFICE.next_opening(at("2026-03-27T18:00:00+01:00"))) == "2026-03-30T07:00:00Z"
    night = SendWindow.model_validate({"days": ["sun"], "from": "02:30", "to": "04:00", "tz": "Europe/Berlin"})
    # 02:30 does not exist that night (02:00 -> 03:00): it opens when the clock jumps, 03:00 CEST.
    assert iso(night.next_opening(at("2026-03-28T12:00:00Z"))) == "2026-03-29T01:00:00Z"
    assert night.is_open(at("2026-03-29T01:00:00Z")) and not night.is_open(at("2026-03-29T00:59:00Z"))


def test_already_open_is_its_own_next_opening():
    now = at("2026-12-02T10:00:00+01:00")
    assert OFFICE.next_opening(now) == now


@pytest.mark.parametrize(
    ("window", "says"),
    [
        ({"days": ["mon"], "from": "09:00", "to": "17:00", "tz": "0" * 63}, "not an IANA time zone"),
        ({"days": ["mon"], "from": "09:00", "to": "17:00", "tz": "Mars/Olympus"}, "not an IANA time zone"),
        ({"days": ["someday"], "from": "09:00", "to": "17:00", "tz": "UTC"}, "days"),
        ({"days": [], "from": "09:00", "to": "17:00", "tz": "UTC"}, "days"),
        ({"days": ["mon"], "from": "9", "to": "17:00", "tz": "UTC"}, "from"),
    ],
)
def test_a_bad_window_is_refused_naming_the_field(window, says):
    with pytest.raises(ValidationError, match=says):
        SendWindow.model_validate(window)


def test_a_window_whose_to_is_not_after_its_from_spans_midnight():
    # Issue 36: the schema allows any from/to; every such window means something.
    night = SendWindow.model_validate({"days": ["mon"], "from": "22:00", "to": "06:00", "tz": "Europe/Berlin"})
    assert not night.is_open(at("2026-11-30T21:59:00+01:00"))  # Monday
    assert night.is_open(at("2026-11-30T22:00:00+01:00"))
    assert night.is_open(at("2026-12-01T05:59:00+01:00"))  # Tuesday morning, opened Monday
    assert not night.is_open(at("2026-12-01T06:00:00+01:00"))
    assert not night.is_open(at("2026-12-01T23:00:00+01:00"))  # Tuesday: not a day it opens
    assert night.closing_after(at("2026-11-30T23:00:00+01:00")) == at("2026-12-01T06:00:00+01:00")
    assert night.next_opening(at("2026-12-01T06:00:00+01:00")) == at("2026-12-07T22:00:00+01:00")


def test_a_window_whose_from_equals_its_to_is_open_the_whole_day_and_meeting_days_close_together():
    weekend = SendWindow.model_validate({"days": ["sat", "sun"], "from": "00:00", "to": "00:00", "tz": "UTC"})
    assert weekend.is_open(at("2026-12-05T00:00:00Z")) and weekend.is_open(at("2026-12-06T23:59:59Z"))
    assert not weekend.is_open(at("2026-12-07T00:00:00Z")) and not weekend.is_open(at("2026-12-04T23:59:59Z"))
    assert weekend.closing_after(at("2026-12-05T10:00:00Z")) == at("2026-12-07T00:00:00Z")


def test_every_zone_the_schema_lists_is_accepted_and_loads():
    assert "Europe/Berlin" in IANA_ZONES and "UTC" in IANA_ZONES
    for zone in IANA_ZONES:
        window = SendWindow.model_validate({"days": ["mon"], "from": "09:00", "to": "17:00", "tz": zone})
        assert window.zone.key == zone


_CLOCKS = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.integers(0, 59))
_WINDOWS = st.builds(
    lambda days, opens, closes, tz: SendWindow.model_validate({"days": days, "from": opens, "to": closes, "tz": tz}),
    st.lists(st.sampled_from(DAYS), min_size=1, max_size=7, unique=True),
    _CLOCKS,
    _CLOCKS,
    st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]),
)
_INSTANTS = st.integers(at("2026-01-01T00:00:00Z"), at("2027-12-31T00:00:00Z"))


@settings(max_examples=300, deadline=None)
@given(window=_WINDOWS, now=_INSTANTS)
def test_openings_and_closings_agree_with_is_open_for_any_window(window, now):
    opening = window.next_opening(now)
    assert opening >= now and window.is_open(opening)
    # Closed on every minute before the next opening (sampled: its first, its last).
    if opening > now:
        assert not window.is_open(now) and not window.is_open(opening - 1)
    closing = window.closing_after(opening)
    assert (
        closing is not None
        and closing > opening
        and not window.is_open(closing)
        or (closing is not None and closing - opening >= dt.timedelta(days=7).total_seconds() * 1000)
    )
    assert window.is_open(closing - 1)
