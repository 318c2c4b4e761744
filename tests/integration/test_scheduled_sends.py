"""Scheduled sends against moto's server: `sendonce campaign publish --at`, reschedule,
unschedule and cancel through the CLI, the schedules they leave in moto's EventBridge
Scheduler, and the local firer (sendonce_local.scheduler_poller) that fires them by a clock
the test moves, invoking the real scheduled-start handler; then the real consumer sends."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import boto3
import pytest

from sendonce.adapters.scheduler import schedule_name
from sendonce.handlers import api
from sendonce_local.resources import SchedulingResources, create_scheduling_resources
from sendonce_local.scheduler_poller import LocalClock, SchedulePoller
from sendonce_ops.sqs_tools import queue_depths
from tests.integration.operator_helpers import (
    api_event,
    as_json,
    lambda_context,
    local_schedule_firer,
    people,
    scheduling_operator,
    sendonce,
    spec_file,
    write_csv,
)

pytestmark = pytest.mark.integration

PLUS_ONE = dt.timezone(dt.timedelta(hours=1))


@dataclass
class Scheduling:
    system: object
    resources: SchedulingResources
    clock: LocalClock
    firer: SchedulePoller

    def cli(self, *args: str):
        return sendonce(self.system, *args, env=self.resources.env())

    def schedules(self) -> list[dict]:
        return self.firer.schedules()

    def operator(self):
        """The operator service as the API function builds it (with the scheduler)."""
        return scheduling_operator(self.system, scheduling=self.resources)


@pytest.fixture
def scheduling(system) -> Scheduling:
    resources = create_scheduling_resources()
    clock, firer = local_schedule_firer(system, resources)
    return Scheduling(system=system, resources=resources, clock=clock, firer=firer)


def _in(seconds: int) -> str:
    """A time `seconds` from now, written with a +01:00 offset, to the second."""
    return (dt.datetime.now(PLUS_ONE) + dt.timedelta(seconds=seconds)).replace(microsecond=0).isoformat()


def _depth(system) -> int:
    return queue_depths(boto3.client("sqs"), system.resources.queue_url)["visible"]


def _create_and_schedule(scheduling: Scheduling, tmp_path, n: int, at: str) -> dict:
    system = scheduling.system
    assert scheduling.cli("campaign", "create", "--spec", str(spec_file(tmp_path / "c.yaml", system))).exit_code == 0
    recipients = write_csv(tmp_path / "people.csv", people(system, n))
    return as_json(
        scheduling.cli(
            "campaign", "publish", "c1", "--recipients", str(recipients), "--batch-size", "5", "--at", at, "--json"
        )
    )


def test_a_campaign_scheduled_a_minute_ahead_starts_by_itself_once_when_the_clock_gets_there(scheduling, tmp_path):
    system = scheduling.system
    at = _in(60)

    # Given a campaign published --at a minute from now
    published = _create_and_schedule(scheduling, tmp_path, 12, at)

    # Then the recipients are recorded, nothing is enqueued, and one schedule waits in moto
    utc = dt.datetime.fromisoformat(at).astimezone(dt.UTC)
    assert (published["accepted"], published["batches_recorded"], published["messages_sent"]) == (12, 3, 0)
    assert published["send_at"] == utc.isoformat().replace("+00:00", "Z")
    assert _depth(system) == 0
    status = as_json(scheduling.cli("campaign", "status", "c1", "--json"))
    assert (status["state"], status["pending"], status["send_at"]) == ("scheduled", 12, published["send_at"])
    [schedule] = scheduling.schedules()
    assert schedule["Name"] == schedule_name("c1")
    assert schedule["ScheduleExpression"] == f"at({utc:%Y-%m-%dT%H:%M:%S})"
    assert (schedule["ActionAfterCompletion"], schedule["Target"]["Arn"]) == (
        "DELETE",
        scheduling.resources.start_function_arn,
    )
    assert schedule["Target"]["RoleArn"] == scheduling.resources.role_arn
    assert json.loads(schedule["Target"]["Input"])["execution_id"] == "<aws.scheduler.execution-id>"

    # When the firer looks before the time: nothing fires
    assert scheduling.firer.fire_due() == []

    # When the local clock moves past the time
    scheduling.clock.advance(61)
    [firing] = scheduling.firer.fire_due()

    # Then the send started (once), the schedule is gone, and the consumer sends everyone once
    assert firing.ok and firing.result["started"] is True and firing.result["batches_enqueued"] == 3
    assert firing.result["job_id"] == f"c1-start-{int(utc.timestamp()) * 1000}"  # the start is a job
    assert firing.event["execution_id"] != "<aws.scheduler.execution-id>"
    assert scheduling.schedules() == []
    assert scheduling.firer.fire_due() == []
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    after = as_json(scheduling.cli("campaign", "status", "c1", "--json"))
    assert (after["state"], after["sent"]) == ("completed", 12)
    assert system.deliveries() == {f"user{i}@{system.domain}": 1 for i in range(12)}


def test_a_schedule_that_fires_twice_sends_nobody_twice(scheduling, tmp_path):
    system = scheduling.system
    _create_and_schedule(scheduling, tmp_path, 7, _in(120))
    [schedule] = scheduling.schedules()

    # When the service fires the same schedule twice (a retry: a new execution id each time)
    first = scheduling.firer.fire(schedule)
    second = scheduling.firer.fire(schedule)

    # Then only the first starts the send; the second says why and enqueues nothing
    assert (first.result["started"], second.result["started"]) == (True, False)
    assert second.result["reason"] == "already started by this schedule"
    assert first.execution_id != second.execution_id
    assert _depth(system) == 2  # 7 recipients in batches of 5: two messages, once
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    assert system.deliveries() == {f"user{i}@{system.domain}": 1 for i in range(7)}


def test_cancel_before_it_fires_deletes_the_schedule_and_sends_nothing(scheduling, tmp_path):
    system = scheduling.system
    _create_and_schedule(scheduling, tmp_path, 4, _in(60))
    [schedule] = scheduling.schedules()

    cancelled = scheduling.cli("campaign", "cancel", "c1", "--reason", "wrong list")
    assert cancelled.exit_code == 0, cancelled.output

    # The schedule is deleted; a firing already under way (the copy read before) starts nothing
    assert scheduling.schedules() == []
    scheduling.clock.advance(61)
    assert scheduling.firer.fire_due() == []
    late = scheduling.firer.fire(schedule)
    assert (late.result["started"], late.result["reason"]) == (False, "campaign is cancelled; nothing started")
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    status = as_json(scheduling.cli("campaign", "status", "c1", "--json"))
    assert (status["state"], status["cancelled"], status["sent"]) == ("cancelled", 4, 0)
    assert system.deliveries() == {}


def test_reschedule_moves_the_schedule_and_unschedule_goes_back_to_draft(scheduling, tmp_path):
    _create_and_schedule(scheduling, tmp_path, 3, _in(60))
    [old] = scheduling.schedules()

    later = _in(3600)
    moved = as_json(scheduling.cli("campaign", "reschedule", "c1", "--at", later, "--json"))
    [schedule] = scheduling.schedules()
    utc = dt.datetime.fromisoformat(later).astimezone(dt.UTC)
    assert moved["state"] == "scheduled" and schedule["ScheduleExpression"] == f"at({utc:%Y-%m-%dT%H:%M:%S})"

    # A firing for the old time (one already in flight) starts nothing
    stale = scheduling.firer.fire(old)
    assert stale.result["started"] is False and "not " in stale.result["reason"]

    text = scheduling.cli("campaign", "unschedule", "c1")
    assert text.exit_code == 0 and "unscheduled c1: now draft" in text.stdout
    assert scheduling.schedules() == []
    assert scheduling.firer.fire(schedule).result["started"] is False


def test_a_time_in_the_past_or_without_an_offset_is_refused_and_nothing_recorded(scheduling, tmp_path):
    system = scheduling.system
    assert scheduling.cli("campaign", "create", "--spec", str(spec_file(tmp_path / "c.yaml", system))).exit_code == 0
    recipients = str(write_csv(tmp_path / "people.csv", people(system, 2)))

    past = scheduling.cli("campaign", "publish", "c1", "--recipients", recipients, "--at", _in(-60))
    naive = scheduling.cli("campaign", "publish", "c1", "--recipients", recipients, "--at", "2030-01-01T09:00:00")

    assert past.exit_code == 2 and "is in the past (now is" in past.stderr
    assert naive.exit_code == 2 and "--at: '2030-01-01T09:00:00' has no UTC offset" in naive.stderr
    assert as_json(scheduling.cli("campaign", "status", "c1", "--json"))["total"] == 0
    assert scheduling.schedules() == []


def test_the_api_schedules_reschedules_and_unschedules(scheduling):
    system = scheduling.system
    service = scheduling.operator()

    def call(method, path, body=None):
        response = api.lambda_handler(api_event(method, path, body), lambda_context(), service=service)
        return response["statusCode"], json.loads(response["body"])

    body = {
        "id": "c1",
        "name": "n",
        "subject": "Hi",
        "from": f"news@{system.domain}",
        "text": "t",
        "provider": "resend",
    }
    assert call("POST", "/campaigns", body)[0] == 201
    recipients = [{"recipient_id": "r0", "email": f"user0@{system.domain}"}]
    at = _in(300)
    code, published = call("POST", "/campaigns/c1/publish", {"recipients": recipients, "send_at": at})
    assert (code, published["batches_recorded"], published["messages_sent"]) == (200, 1, 0)
    assert call("GET", "/campaigns/c1")[1]["send_at"] == published["send_at"]

    code, past = call("POST", "/campaigns/c1/reschedule", {"send_at": _in(-5)})
    assert code == 409 and "is in the past" in past["message"]
    assert call("POST", "/campaigns/c1/reschedule", {"send_at": "2030-01-01T09:00:00"})[0] == 422
    code, moved = call("POST", "/campaigns/c1/reschedule", {"send_at": _in(900)})
    assert (code, moved["state"]) == (200, "scheduled")
    code, draft = call("POST", "/campaigns/c1/unschedule")
    assert (code, draft["state"], draft["send_at"]) == (200, "draft", None)
    assert call("POST", "/campaigns/c1/unschedule")[0] == 409
    assert scheduling.schedules() == []
