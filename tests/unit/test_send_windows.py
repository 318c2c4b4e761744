"""Send windows (domain/campaigns/windows.py): open and next opening in the window's own time
zone, across daylight-saving changes. What a closed window does: test_window_pauses.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sendonce.domain.campaigns.scheduling import iso, parse_instant
from sendonce.domain.campaigns.windows import SendWindow

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
        ({"days": ["mon"], "from": "17:00", "to": "09:00", "tz": "UTC"}, "must be before to"),
        ({"days": ["mon"], "from": "09:00", "to": "17:00", "tz": "Mars/Olympus"}, "not an IANA time zone"),
        ({"days": ["someday"], "from": "09:00", "to": "17:00", "tz": "UTC"}, "days"),
        ({"days": [], "from": "09:00", "to": "17:00", "tz": "UTC"}, "days"),
        ({"days": ["mon"], "from": "9", "to": "17:00", "tz": "UTC"}, "from"),
    ],
)
def test_a_bad_window_is_refused_naming_the_field(window, says):
    with pytest.raises(ValidationError, match=says):
        SendWindow.model_validate(window)
