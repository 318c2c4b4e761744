"""A warm-up ramp per sending domain (issue 32, item 2): what all campaigns whose `from` is at
a domain may send in a day (UTC), by a schedule that starts on a given day and never shrinks.

A schedule is a table of daily caps (`{"start": "2026-12-07", "daily": [500, 1000, 2000]}`)
or a named ramp (`"ramp": "double-from-500"`: 500, 1,000, 2,000, ... until it passes
`RAMP_CEILING`). Day n after the start has the n-th cap; a day before the start, the first;
a day after the table's last, none (the domain is warm).

The consumers count each day's sends in one item per domain and day (adapters/dynamodb/
warmup.py), taking places before the provider is asked: a day never hands out more than its
cap. A send that finds the day's cap reached is not made; the campaign pauses itself with the
reason (`warm-up: 2,000 of 2,000 today (example.com); opens 2026-12-08T00:00:00Z`) and the
next day's opening resumes it with its remaining recipients, as a send window's does
(campaigns/window_pauses.py).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sendonce.domain.errors import HaltProviderError, InvalidCampaignError

DAY_MS = 86_400_000
RAMP = re.compile(r"double-from-([1-9][0-9]{0,6})")
RAMP_CEILING = 1_000_000  # a named ramp ends (the domain is warm) once a day's cap passes this
REASON_PREFIX = "warm-up: "
_DOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+")


class WarmupError(InvalidCampaignError):
    """A warm-up table that cannot be used; the message names the domain and the field."""


class DayCapReachedError(HaltProviderError):
    """The sending domain's cap for today is reached: nothing more is sent for it today. Its
    campaign pauses until `opens_at_ms` (the next day) with `pause_reason`."""

    def __init__(self, reason: str, *, opens_at_ms: int):
        super().__init__(reason)
        self.opens_at_ms = opens_at_ms


@dataclass(frozen=True)
class WarmupSchedule:
    start: dt.date
    daily: tuple[int, ...]

    def cap_on(self, day: dt.date) -> int | None:
        """The day's cap; None once the schedule has ended (the domain is warm)."""
        n = max(0, (day - self.start).days)
        return self.daily[n] if n < len(self.daily) else None


def ramp(first: int) -> tuple[int, ...]:
    caps = [first]
    while caps[-1] <= RAMP_CEILING:
        caps.append(caps[-1] * 2)
    return tuple(caps)


def parse_schedule(domain: str, value: object) -> WarmupSchedule:
    where = f"warmup.{domain}"
    if not isinstance(value, Mapping):
        raise WarmupError(f"{where}: expected {{start: YYYY-MM-DD, daily: [caps]}} or {{start, ramp: double-from-N}}")
    unknown = set(value) - {"start", "daily", "ramp"}
    if unknown:
        raise WarmupError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    try:
        start = dt.date.fromisoformat(str(value.get("start")))
    except ValueError:
        raise WarmupError(f"{where}.start: {value.get('start')!r} is not a day (YYYY-MM-DD)") from None
    if ("daily" in value) == ("ramp" in value):
        raise WarmupError(f"{where}: give daily (a table of daily caps) or ramp (double-from-N), one of them")
    if "ramp" in value:
        match = RAMP.fullmatch(str(value["ramp"]))
        if match is None:
            raise WarmupError(f"{where}.ramp: {value['ramp']!r}; the named ramp is double-from-N (N from 1)")
        return WarmupSchedule(start, ramp(int(match[1])))
    daily = value["daily"]
    if not isinstance(daily, list) or not daily:
        raise WarmupError(f"{where}.daily: expected a list of daily caps")
    for i, cap in enumerate(daily):
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise WarmupError(f"{where}.daily[{i}]: {cap!r} is not a whole number of emails from 1")
        if i and cap < daily[i - 1]:
            raise WarmupError(
                f"{where}.daily[{i}]: {cap:,} is less than the day before's {daily[i - 1]:,} (a ramp never shrinks)"
            )
    return WarmupSchedule(start, tuple(daily))


def parse_warmup(value: object) -> dict[str, WarmupSchedule]:
    """`{domain: schedule}`, every domain a domain name (lower case)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WarmupError("warmup: expected a mapping of sending domain -> schedule")
    schedules = {}
    for domain, schedule in value.items():
        name = str(domain).strip().lower()
        if not _DOMAIN.fullmatch(name):
            raise WarmupError(f"warmup: {domain!r} is not a domain name")
        schedules[name] = parse_schedule(name, schedule)
    return schedules


def domain_of(sender: str) -> str:
    """The domain of a `from` (`News <news@example.com>` or `news@example.com`), lower case."""
    address = sender.rsplit("<", 1)[-1].rstrip(">").strip()
    return address.rpartition("@")[2].lower()


def day_of(now_ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).date()


def next_day_ms(now_ms: int) -> int:
    return (now_ms // DAY_MS + 1) * DAY_MS


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pause_reason(domain: str, cap: int, opens_at_ms: int) -> str:
    return f"{REASON_PREFIX}{cap:,} of {cap:,} today ({domain}); opens {iso(opens_at_ms)}"


def waits_for(reason: str | None, opens_at_ms: int) -> bool:
    """Whether a campaign paused with `reason` waits for the warm-up opening at `opens_at_ms`."""
    return reason is not None and reason.startswith(REASON_PREFIX) and reason.endswith(f"; opens {iso(opens_at_ms)}")


@dataclass(frozen=True)
class Warmup:
    """The deployment's warm-up schedules, by sending domain."""

    schedules: Mapping[str, WarmupSchedule] = field(default_factory=dict)

    def cap(self, sender: str, now_ms: int) -> tuple[str, int] | None:
        """(domain, today's cap) for a campaign sending as `sender`; None: not warming up."""
        domain = domain_of(sender)
        schedule = self.schedules.get(domain)
        cap = schedule.cap_on(day_of(now_ms)) if schedule else None
        return None if cap is None else (domain, cap)
