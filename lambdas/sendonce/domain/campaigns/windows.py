"""Send windows (issue 20 item 4): the days and local hours a campaign may send in, in one
IANA time zone, and the instants it opens and closes, daylight-saving changes included.
Pure: no clock, no store; callers pass epoch ms. What a closed window does to a sending
campaign (it pauses, and resumes at the next opening) is campaigns/window_pauses.py.

`window: {days: [mon, tue, wed, thu, fri], from: "09:00", to: "17:00", tz: "Europe/Berlin"}`
is open from `from` (inclusive) to `to` (exclusive), local time, on those days. A local
opening time that a spring-forward change skips opens when the clock jumps past it (02:30 on
the change's night in Berlin opens at 03:00 summer time); one that an autumn change repeats
opens at its first occurrence. A window whose `to` is not after its `from` spans midnight:
`mon 22:00-06:00` opens Monday 22:00 and closes Tuesday 06:00, and `from` equal to `to` is
open the whole day from then (24 hours, or 23/25 across a daylight-saving change). The days
are the days a window *opens*. Every window the schema allows means something: the API refuses
none for its times.

The zones are those of the `tzdata` package (pinned): the same list in the API's documents,
in the validator and on Lambda (whose runtime ships no zoneinfo of its own).
"""

from __future__ import annotations

import datetime as dt
import importlib.resources
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

Day = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
DAYS: tuple[Day, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_CLOCK = r"^([01]\d|2[0-3]):[0-5]\d$"
# A window's stretches that meet (24-hour windows on consecutive days) close together: at most
# a week of them, after which an always-open window is said to close a week on.
_DAYS_MERGED = 7


def _iana_zones() -> tuple[str, ...]:
    listed = importlib.resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return tuple(sorted(line.strip() for line in listed.splitlines() if line.strip()))


IANA_ZONES = _iana_zones()
_ZONES = frozenset(IANA_ZONES)


class SendWindow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    days: tuple[Day, ...] = Field(
        min_length=1,
        max_length=7,
        json_schema_extra={"uniqueItems": True},
        description="Days it may send, e.g. [mon, tue]; each once.",
    )
    opens: str = Field(alias="from", pattern=_CLOCK, description="Local time it opens, HH:MM (inclusive).")
    closes: str = Field(alias="to", pattern=_CLOCK, description="Local time it closes, HH:MM (exclusive).")
    tz: str = Field(
        min_length=1,
        max_length=64,
        json_schema_extra={"enum": list(IANA_ZONES)},
        description="IANA time zone, e.g. Europe/Berlin.",
    )

    @field_validator("opens", "closes", mode="before")
    @classmethod
    def _yaml_clock(cls, value: object) -> object:
        # YAML 1.1 reads an unquoted 17:00 as the sexagesimal number 1020 (minutes): back to HH:MM.
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 24 * 60:
            return f"{value // 60:02d}:{value % 60:02d}"
        return value

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        if value not in _ZONES:
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. Europe/Berlin, America/New_York)")
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):  # pragma: no cover - tzdata lists what it holds
            raise ValueError(f"{value!r}: no zone data for it on this machine") from None
        return value

    @field_validator("days")
    @classmethod
    def _each_day_once(cls, value: tuple[Day, ...]) -> tuple[Day, ...]:
        repeated = sorted({d for d in value if value.count(d) > 1}, key=DAYS.index)
        if repeated:
            raise ValueError(f"{', '.join(repeated)} given more than once")
        return value

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def _local(self, at_ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC).astimezone(self.zone)

    def _instant(self, day: dt.date, clock: str) -> int:
        """The epoch ms of `clock` on `day`, local: a time a spring-forward change skips maps
        to the instant the clock jumps past it; a repeated one to its first occurrence."""
        hour, minute = (int(part) for part in clock.split(":"))
        naive = dt.datetime.combine(day, dt.time(hour, minute))
        first = naive.replace(tzinfo=self.zone, fold=0)
        if first.astimezone(dt.UTC).astimezone(self.zone).replace(tzinfo=None) == naive:
            return int(first.timestamp() * 1000)
        probe = naive.replace(tzinfo=self.zone, fold=1).astimezone(dt.UTC)  # the wall time before the gap
        while probe.astimezone(self.zone).replace(tzinfo=None) < naive:
            probe += dt.timedelta(minutes=1)
        return int(probe.timestamp() * 1000)

    def _stretch(self, day: dt.date) -> tuple[int, int]:
        """The instants the window opening on `day` opens and closes (the next day's `to` when
        it spans midnight)."""
        closes_on = day + dt.timedelta(days=1) if self.closes <= self.opens else day
        return self._instant(day, self.opens), self._instant(closes_on, self.closes)

    def _open_stretch(self, at_ms: int) -> tuple[int, int] | None:
        today = self._local(at_ms).date()
        for day in (today - dt.timedelta(days=1), today):  # one opening yesterday may still be open
            if DAYS[day.weekday()] in self.days:
                opens, closes = self._stretch(day)
                if opens <= at_ms < closes:
                    return opens, closes
        return None

    def is_open(self, at_ms: int) -> bool:
        return self._open_stretch(at_ms) is not None

    def next_opening(self, at_ms: int) -> int:
        """The first instant at or after `at_ms` when the window is open."""
        if self.is_open(at_ms):
            return at_ms
        start = self._local(at_ms).date()
        for offset in range(8):
            day = start + dt.timedelta(days=offset)
            if DAYS[day.weekday()] in self.days:
                opening = self._instant(day, self.opens)
                if opening >= at_ms:
                    return opening
        raise AssertionError("a window with at least one day opens within a week")  # pragma: no cover

    def closing_after(self, at_ms: int) -> int | None:
        """When the open window at `at_ms` closes (None: it is closed then)."""
        stretch = self._open_stretch(at_ms)
        if stretch is None:
            return None
        closes = stretch[1]
        for _ in range(_DAYS_MERGED):
            following = self._open_stretch(closes)
            if following is None:
                break
            closes = following[1]
        return closes

    def local_iso(self, at_ms: int) -> str:
        """An instant in the window's zone, to the minute with its offset: 2026-12-07T09:00+01:00."""
        return self._local(at_ms).isoformat(timespec="minutes")

    def pause_reason(self, opens_at_ms: int) -> str:
        """The reason of a pause the window took, waiting for the opening at `opens_at_ms`:
        shown in status, and the condition under which that opening resumes the campaign."""
        return f"{PAUSE_REASON_PREFIX}{self.local_iso(opens_at_ms)}"

    def describe(self) -> str:
        return f"{','.join(self.days)} {self.opens}-{self.closes} {self.tz}"


PAUSE_REASON_PREFIX = "window: opens "
