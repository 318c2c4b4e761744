"""Send windows (issue 20 item 4): the days and local hours a campaign may send in, in one
IANA time zone, and the instants it opens and closes, daylight-saving changes included.
Pure: no clock, no store; callers pass epoch ms. What a closed window does to a sending
campaign (it pauses, and resumes at the next opening) is campaigns/window_pauses.py.

`window: {days: [mon, tue, wed, thu, fri], from: "09:00", to: "17:00", tz: "Europe/Berlin"}`
is open from `from` (inclusive) to `to` (exclusive), local time, on those days. A local
opening time that a spring-forward change skips opens when the clock jumps past it (02:30 on
the change's night in Berlin opens at 03:00 summer time); one that an autumn change repeats
opens at its first occurrence. A window does not span midnight (from < to): an overnight
window is two days' windows, e.g. 20:00-24:00 written as 20:00-23:59 plus 00:00-06:00 the
next day (one window per campaign: choose the part that matters).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Day = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
DAYS: tuple[Day, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_CLOCK = r"^([01]\d|2[0-3]):[0-5]\d$"


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
    tz: str = Field(min_length=1, max_length=64, description="IANA time zone, e.g. Europe/Berlin.")

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
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. Europe/Berlin, America/New_York)") from None
        return value

    @model_validator(mode="after")
    def _opens_before_it_closes(self) -> SendWindow:
        if self.opens >= self.closes:
            raise ValueError(f"from ({self.opens}) must be before to ({self.closes}); a window does not span midnight")
        return self

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

    def is_open(self, at_ms: int) -> bool:
        local = self._local(at_ms)
        if DAYS[local.weekday()] not in self.days:
            return False
        day = local.date()
        return self._instant(day, self.opens) <= at_ms < self._instant(day, self.closes)

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
        if not self.is_open(at_ms):
            return None
        return self._instant(self._local(at_ms).date(), self.closes)

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
