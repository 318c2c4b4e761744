"""Send windows against moto's server, through the real adapters: the consumer (real boto3,
the real resend SDK against the local Resend server) reads a sending campaign outside its
window, pauses it with the reason and sets the opening's one-time schedule in moto's
EventBridge Scheduler; the local firer fires it by a clock the test moves (the same clock the
consumer reads for windows), invoking the real scheduled-start handler, which resumes the
campaign once; the remaining recipients are sent once. An operator's pause is not resumed."""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass

import pytest

from sendonce.adapters.scheduler import opening_schedule_name
from sendonce.domain.campaigns.scheduling import parse_instant
from sendonce.domain.campaigns.windows import SendWindow
from sendonce.domain.models import Campaign, Content
from sendonce.handlers import api, consumer
from sendonce.wiring.clients import clients
from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime
from sendonce_local.resources import SchedulingResources, create_scheduling_resources
from sendonce_local.scheduler_poller import LocalClock, SchedulePoller
from tests.integration.operator_helpers import (
    api_event,
    as_json,
    lambda_context,
    local_schedule_firer,
    sendonce,
    spec_file,
)

pytestmark = pytest.mark.integration


@dataclass
class Windowed:
    system: object
    resources: SchedulingResources
    clock: LocalClock
    firer: SchedulePoller
    window: SendWindow
    opens_at: dt.datetime  # the window's next opening, in UTC

    def cli(self, *args: str):
        return sendonce(self.system, *args, env=self.resources.env())

    def consume(self) -> None:
        settings = self.system.settings.model_copy(
            update={
                "scheduler_group": self.resources.group_name,
                "scheduler_role_arn": self.resources.role_arn,
                "scheduled_start_function_arn": self.resources.start_function_arn,
            }
        )
        runtime = build_consumer_runtime(
            settings,
            build_consumer_parts(settings, clients()),
            window_clock_ms=lambda: int(self.clock() * 1000),
        )
        handler = functools.partial(consumer.lambda_handler, runtime=runtime)
        self.system.poller(handler=handler).run_until_idle(idle_seconds=1, max_seconds=30)

    def status(self) -> dict:
        return as_json(self.cli("campaign", "status", "c1", "--json"))

    def publish(self, n: int) -> None:
        system = self.system
        system.operator.create(
            Campaign(
                campaign_id="c1",
                name="Office hours",
                provider="resend",
                sender=f"news@{system.domain}",
                content=Content(subject="Hello {{ name }}", text="Hi {{ name }}"),
                window=self.window,
                ledger_shards=4,
            )
        )
        system.operator.publish("c1", iter(system.recipients(n)), batch_size=5)


def _window_opening_soon() -> tuple[SendWindow, dt.datetime]:
    """A window that opens a few minutes from now and is closed now, every day, in a fixed
    offset zone where it is mid-morning (no window spans midnight, whatever the hour here)."""
    now = dt.datetime.now(dt.UTC)
    hours = 10 - now.hour  # the zone's offset that makes it about 10:00 there
    hours = hours + 24 if hours < -12 else hours  # Etc/GMT+12 is the westernmost
    tz = "Etc/GMT" + (f"-{hours}" if hours > 0 else f"+{-hours}")  # Etc/GMT-2 is UTC+2
    local = now.astimezone(SendWindow(days=("mon",), opens="00:00", closes="00:01", tz=tz).zone)
    opens = (local + dt.timedelta(minutes=3)).replace(second=0, microsecond=0)
    closes = opens + dt.timedelta(hours=1)
    days = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
    window = SendWindow(days=days, opens=f"{opens:%H:%M}", closes=f"{closes:%H:%M}", tz=tz)
    return window, opens.astimezone(dt.UTC)


@pytest.fixture
def windowed(system) -> Windowed:
    resources = create_scheduling_resources()
    clock, firer = local_schedule_firer(system, resources)
    window, opens_at = _window_opening_soon()
    return Windowed(system=system, resources=resources, clock=clock, firer=firer, window=window, opens_at=opens_at)


def test_outside_its_window_the_campaign_pauses_and_the_opening_resumes_it_once(windowed):
    system = windowed.system
    waiting = f"window: opens {windowed.opens_at.astimezone(windowed.window.zone).isoformat(timespec='minutes')}"

    # Given a campaign sending before its window opens
    windowed.publish(7)
    windowed.consume()

    # Then nobody is sent anything; it is paused by sendonce with the opening as its reason
    assert system.deliveries() == {}
    status = windowed.status()
    assert (status["state"], status["state_reason"], status["pending"]) == ("paused", waiting, 7)
    shown = windowed.cli("campaign", "status", "c1")
    assert f"paused ({waiting})" in shown.stdout
    # and one schedule waits for the opening, in UTC, invoking the scheduled-start function
    opens_ms = int(windowed.opens_at.timestamp() * 1000)
    [schedule] = windowed.firer.schedules()
    assert schedule["Name"] == opening_schedule_name("c1", opens_ms)
    assert schedule["ScheduleExpression"] == f"at({windowed.opens_at:%Y-%m-%dT%H:%M:%S})"
    assert schedule["Target"]["Arn"] == windowed.resources.start_function_arn
    assert json.loads(schedule["Target"]["Input"])["window_opens_at"] == windowed.opens_at.isoformat().replace(
        "+00:00", "Z"
    )
    assert windowed.firer.fire_due() == []

    # When the clock reaches the opening
    windowed.clock.advance(windowed.opens_at.timestamp() - windowed.clock() + 1)
    [firing] = windowed.firer.fire_due()

    # Then it resumes (once: a retry of the firing resumes nothing more) and everyone is sent once
    assert firing.ok and firing.result["started"] is True, firing.result
    assert windowed.firer.schedules() == []
    retry = windowed.firer.fire(schedule)
    assert retry.result["started"] is False and retry.result["reason"].startswith("already resumed by this opening")
    windowed.consume()
    assert system.deliveries() == {f"user{i}@{system.domain}": 1 for i in range(7)}
    after = windowed.status()
    assert (after["state"], after["sent"]) == ("completed", 7)


def test_an_operators_pause_is_not_resumed_by_the_window(windowed):
    system = windowed.system
    windowed.publish(3)
    windowed.consume()
    [schedule] = windowed.firer.schedules()

    # When the operator pauses the window-paused campaign, the pause becomes theirs
    paused = windowed.cli("campaign", "pause", "c1", "--reason", "legal review")
    assert paused.exit_code == 0, paused.output
    assert windowed.status()["state_reason"] == "legal review"

    # Then the opening's firing resumes nothing and says why
    windowed.clock.advance(windowed.opens_at.timestamp() - windowed.clock() + 1)
    [firing] = windowed.firer.fire_due()
    assert firing.result["started"] is False
    assert "legal review" in firing.result["reason"] and "nothing resumed" in firing.result["reason"]
    windowed.consume()
    assert system.deliveries() == {}
    assert windowed.status()["state"] == "paused"
    assert windowed.firer.fire(schedule).result["started"] is False

    # The operator's resume sends (inside the window now, by the moved clock)
    resumed = windowed.cli("campaign", "resume", "c1")
    assert resumed.exit_code == 0, resumed.output
    windowed.consume()
    assert system.deliveries() == {f"user{i}@{system.domain}": 1 for i in range(3)}


@pytest.mark.parametrize(
    ("window", "says"),
    [
        ("{days: [mon, funday], from: '09:00', to: '17:00', tz: Europe/Berlin}", "window.days.1"),
        ("{days: [mon], from: '09:00', to: '17:00', tz: Mars/Olympus}", "window.tz"),
        ("{days: [mon], from: '17:00', to: '09:00', tz: '000'}", "window.tz"),
        ("{days: [mon], from: '9am', to: '17:00', tz: UTC}", "window.from"),
    ],
)
def test_a_bad_window_in_a_spec_is_refused_naming_the_field(windowed, tmp_path, window, says):
    path = spec_file(tmp_path / "c.yaml", windowed.system)
    path.write_text(path.read_text() + f"window: {window}\n")
    result = windowed.cli("campaign", "create", "--spec", str(path))
    assert result.exit_code != 0
    assert says in result.output + result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_a_window_in_a_yaml_spec_is_kept(windowed, tmp_path):
    path = spec_file(tmp_path / "c.yaml", windowed.system)
    # Unquoted, YAML reads 17:00 as a number; the spec reads it as written.
    path.write_text(path.read_text() + "window: {days: [mon, tue], from: '09:00', to: 17:00, tz: Europe/Berlin}\n")
    created = windowed.cli("campaign", "create", "--spec", str(path))
    assert created.exit_code == 0, created.output
    campaign = windowed.system.operator.get("c1")
    assert campaign.window == SendWindow(days=("mon", "tue"), opens="09:00", closes="17:00", tz="Europe/Berlin")


def test_the_api_takes_a_window_and_refuses_a_bad_one_naming_the_field(windowed):
    system = windowed.system

    def create(campaign_id: str, window: dict) -> tuple[int, dict]:
        body = {
            "id": campaign_id,
            "name": "n",
            "subject": "Hi",
            "from": f"news@{system.domain}",
            "text": "t",
            "provider": "resend",
            "window": window,
        }
        response = api.lambda_handler(api_event("POST", "/campaigns", body), lambda_context(), service=system.operator)
        return response["statusCode"], json.loads(response["body"])

    good = {"days": ["sat", "sun"], "from": "10:00", "to": "12:30", "tz": "America/New_York"}
    assert create("ok", good)[0] == 201
    assert system.operator.get("ok").window == SendWindow.model_validate(good)
    code, refused = create("bad", {**good, "tz": "Atlantis/Capital"})
    assert code == 422 and "window.tz" in json.dumps(refused) and "IANA" in json.dumps(refused)
    # A `to` before `from` spans midnight (issue 36: every pair the schema allows is a window).
    assert create("overnight", {**good, "from": "13:00"})[0] == 201
    overnight = system.operator.get("overnight").window
    saturday_afternoon = parse_instant("2026-12-05T14:00:00-05:00")
    assert overnight.closing_after(saturday_afternoon) == parse_instant("2026-12-06T12:30:00-05:00")
