"""A local stand-in for EventBridge Scheduler's firing, against moto's server.

moto stores schedules (CreateSchedule, UpdateSchedule, DeleteSchedule, ListSchedules) but
never fires one. ``SchedulePoller`` does: it lists the schedules of the given groups, and
each one-time schedule (``at(...)`` in its ``ScheduleExpressionTimezone``) that is due by
its clock is fired the way the service fires a Lambda target:

- the target's ``Input``, with the context attributes replaced
  (``<aws.scheduler.execution-id>`` a new id per attempt, ``<aws.scheduler.scheduled-time>``,
  ``<aws.scheduler.schedule-arn>``, ``<aws.scheduler.attempt-number>``), is the event;
- the handler registered for the target's ARN runs in process with a Lambda context;
- on success a schedule with ``ActionAfterCompletion: DELETE`` is deleted; if the handler
  raises, the schedule stays and the next tick fires it again (a retry, new execution id).

The clock is ``LocalClock``: wall time plus an offset tests (and the local stack) move, so
a campaign scheduled a minute ahead starts without waiting a minute. ``fire`` fires one
schedule at once whatever the time (a test fires a schedule twice with it, as the
service's retries may).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from botocore.exceptions import ClientError

from sendonce_local.poller import Handler, LocalLambdaContext

logger = logging.getLogger(__name__)

_AT = re.compile(r"at\((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\)")


class LocalClock:
    """Wall time plus an offset that only moves forward."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self.offset_s = 0.0

    def __call__(self) -> float:
        return self._wall() + self.offset_s

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self.offset_s += seconds


def due_at(schedule: Mapping[str, Any]) -> float | None:
    """When a one-time schedule fires (epoch seconds); None for a rate or cron schedule."""
    match = _AT.fullmatch(str(schedule.get("ScheduleExpression", "")))
    if match is None:
        return None
    zone = ZoneInfo(schedule.get("ScheduleExpressionTimezone") or "UTC")
    return dt.datetime.fromisoformat(match[1]).replace(tzinfo=zone).timestamp()


def render_input(text: str, *, schedule_arn: str, scheduled_time: str, execution_id: str, attempt: int) -> str:
    for name, value in (
        ("schedule-arn", schedule_arn),
        ("scheduled-time", scheduled_time),
        ("execution-id", execution_id),
        ("attempt-number", str(attempt)),
    ):
        text = text.replace(f"<aws.scheduler.{name}>", value)
    return text


@dataclass(frozen=True)
class Firing:
    name: str
    group: str
    execution_id: str
    event: dict[str, Any]
    result: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class SchedulePoller:
    def __init__(
        self,
        *,
        client: Any,
        handlers: Mapping[str, Handler],
        group_names: Sequence[str] | None = None,
        clock: Callable[[], float] | None = None,
        function_timeout_s: float = 900.0,
        interval_s: float = 0.5,
    ) -> None:
        self._client = client
        self._handlers = dict(handlers)
        self._groups = list(group_names) if group_names else None
        self.clock = clock or LocalClock()
        self._timeout_s = function_timeout_s
        self._interval_s = interval_s
        self._attempts: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired: list[Firing] = []

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule of the groups, in full (ListSchedules gives only the target's ARN)."""
        found = []
        for group in self._groups or [None]:
            request = {"GroupName": group} if group else {}
            for page in self._client.get_paginator("list_schedules").paginate(**request):
                for summary in page.get("Schedules", []):
                    try:
                        found.append(self._client.get_schedule(Name=summary["Name"], GroupName=summary["GroupName"]))
                    except ClientError:  # deleted meanwhile
                        continue
        return found

    def fire_due(self) -> list[Firing]:
        """Fire every one-time schedule due by the clock; returns what each firing did."""
        now = self.clock()
        return [self.fire(s) for s in self.schedules() if (due := due_at(s)) is not None and due <= now]

    def fire(self, schedule: Mapping[str, Any]) -> Firing:
        target = schedule["Target"]
        name, group = schedule["Name"], schedule.get("GroupName") or "default"
        key = f"{group}/{name}"
        self._attempts[key] = attempt = self._attempts.get(key, 0) + 1
        execution_id = str(uuid.uuid4())
        due = due_at(schedule)
        scheduled_time = (
            dt.datetime.fromtimestamp(due, dt.UTC).isoformat().replace("+00:00", "Z") if due is not None else ""
        )
        event = json.loads(
            render_input(
                target.get("Input") or "{}",
                schedule_arn=schedule.get("Arn", ""),
                scheduled_time=scheduled_time,
                execution_id=execution_id,
                attempt=attempt,
            )
        )
        handler = self._handlers.get(target["Arn"])
        if handler is None:
            firing = Firing(name, group, execution_id, event, error=f"no local handler for {target['Arn']}")
        else:
            context = LocalLambdaContext(
                function_name=target["Arn"].rsplit(":", 1)[-1],
                invoked_function_arn=target["Arn"],
                timeout_s=self._timeout_s,
            )
            try:
                firing = Firing(name, group, execution_id, event, result=handler(event, context))
            except Exception as exc:  # the service retries: the schedule stays for the next tick
                logger.exception("scheduled target failed", extra={"schedule": key})
                firing = Firing(name, group, execution_id, event, error=f"{type(exc).__name__}: {exc}")
        if firing.ok and schedule.get("ActionAfterCompletion") == "DELETE":
            try:
                self._client.delete_schedule(Name=name, GroupName=group)
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                    raise
        self.fired.append(firing)
        return firing

    def start(self) -> SchedulePoller:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="schedule-poller", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.fire_due()
            except Exception:  # moto unreachable for a moment: try again next tick
                logger.exception("listing schedules failed")
            self._stop.wait(self._interval_s)

    def __enter__(self) -> SchedulePoller:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
