"""The local firer of EventBridge Scheduler schedules (sendonce_local.scheduler_poller) with a
fake scheduler client: when a one-time schedule is due, the event it delivers, and what
happens to the schedule after a firing that succeeded or failed."""

from __future__ import annotations

import json

from botocore.exceptions import ClientError

from sendonce_local.scheduler_poller import LocalClock, SchedulePoller, due_at, render_input

TARGET = "arn:aws:lambda:us-east-1:123456789012:function:start"


class FakeSchedulerClient:
    def __init__(self, schedules):
        self.items = {s["Name"]: s for s in schedules}
        self.deleted: list[str] = []

    def get_paginator(self, name):
        client = self

        class Paginator:
            def paginate(self, **request):
                yield {"Schedules": [{"Name": n, "GroupName": s["GroupName"]} for n, s in client.items.items()]}

        return Paginator()

    def get_schedule(self, Name, GroupName):  # noqa: N803 - boto3's names
        return self.items[Name]

    def delete_schedule(self, Name, GroupName):  # noqa: N803
        if Name not in self.items:
            raise ClientError({"Error": {"Code": "ResourceNotFoundException"}}, "DeleteSchedule")
        self.deleted.append(Name)
        del self.items[Name]


def _schedule(name="c1", expression="at(2026-12-02T08:00:00)", zone="UTC"):
    return {
        "Name": name,
        "GroupName": "g",
        "Arn": f"arn:aws:scheduler:us-east-1:123456789012:schedule/g/{name}",
        "ScheduleExpression": expression,
        "ScheduleExpressionTimezone": zone,
        "ActionAfterCompletion": "DELETE",
        "Target": {
            "Arn": TARGET,
            "Input": json.dumps({"campaign_id": name, "execution_id": "<aws.scheduler.execution-id>"}),
        },
    }


def test_a_one_time_schedule_is_due_at_its_instant_in_its_time_zone():
    assert due_at(_schedule()) == 1796198400.0  # 2026-12-02T08:00:00Z
    assert due_at(_schedule(expression="at(2026-12-02T09:00:00)", zone="Europe/Berlin")) == 1796198400.0
    assert due_at(_schedule(expression="rate(5 minutes)")) is None


def test_the_context_attributes_are_replaced_in_the_input():
    text = '{"e": "<aws.scheduler.execution-id>", "n": "<aws.scheduler.attempt-number>"}'
    rendered = render_input(text, schedule_arn="a", scheduled_time="t", execution_id="x1", attempt=2)
    assert json.loads(rendered) == {"e": "x1", "n": "2"}


def test_a_due_schedule_fires_once_and_is_deleted_and_a_failed_one_stays_for_a_retry():
    client = FakeSchedulerClient([_schedule("c1"), _schedule("c2", expression="at(2026-12-02T09:00:00)")])
    calls = []

    def handler(event, context):
        calls.append(event)
        if event["campaign_id"] == "c2" and len(calls) < 3:
            raise RuntimeError("table unreachable")
        return {"started": True}

    clock = LocalClock(wall=lambda: 1796198400.0 - 1)
    firer = SchedulePoller(client=client, handlers={TARGET: handler}, clock=clock)

    assert firer.fire_due() == []  # a second early
    clock.advance(1)
    [c1] = firer.fire_due()
    assert c1.ok and client.deleted == ["c1"] and c1.event["execution_id"] not in ("", "<aws.scheduler.execution-id>")

    clock.advance(3600)
    [failed] = firer.fire_due()
    [retried] = firer.fire_due()
    assert (failed.ok, retried.ok) == (False, True)
    assert failed.execution_id != retried.execution_id
    assert client.deleted == ["c1", "c2"] and firer.fire_due() == []
