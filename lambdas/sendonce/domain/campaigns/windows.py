"""Send windows (issue 20 item 4, not wired yet): the days and local hours a campaign may send
in, in one IANA time zone, and the instants it opens and closes, daylight-saving changes
included. Pure: no clock, no store; callers pass epoch ms.

`window: {days: [mon, tue, wed, thu, fri], from: "09:00", to: "17:00", tz: "Europe/Berlin"}`
is open from `from` (inclusive) to `to` (exclusive), local time, on those days. A local
opening time that a spring-forward change skips opens when the clock jumps past it (02:30 on
the change's night in Berlin opens at 03:00 summer time); one that an autumn change repeats
opens at its first occurrence.
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

    days: tuple[Day, ...] = Field(min_length=1, max_length=7, description="Days it may send, e.g. [mon, tue].")
    opens: str = Field(alias="from", pattern=_CLOCK, description="Local time it opens, HH:MM (inclusive).")
    closes: str = Field(alias="to", pattern=_CLOCK, description="Local time it closes, HH:MM (exclusive).")
    tz: str = Field(min_length=1, max_length=64, description="IANA time zone, e.g. Europe/Berlin.")

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
