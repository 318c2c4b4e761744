"""A warm-up ramp per sending domain (issue 32, item 2) against moto's server, through the real
adapters: the consumer (real boto3, the real resend SDK against the local Resend server) takes
each day's places in the domain's day item, pauses the campaign when the day's cap is reached
and sets the next day's opening in moto's EventBridge Scheduler; the local firer fires it by a
clock the test moves (the clock the consumer reads for days), invoking the real scheduled-start
handler, which resumes the campaign with exactly its remaining recipients."""

from __future__ import annotations

import datetime as dt
import functools
import json

import boto3
import pytest

from sendonce.adapters.dynamodb.report_aggregates import DynamoDBReportAggregates
from sendonce.adapters.dynamodb.warmup import DynamoDBWarmupBudget
from sendonce.domain.campaigns.report import ReportService
from sendonce.domain.deliverability import warmup
from sendonce.domain.models import Campaign, Content
from sendonce.handlers import consumer
from sendonce.wiring.clients import clients
from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime
from sendonce_local.resources import create_scheduling_resources
from tests.integration.operator_helpers import as_json, local_schedule_firer, sendonce

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", ["single", "batch"])
def test_the_days_cap_pauses_the_campaign_and_the_next_day_sends_exactly_the_rest(system, mode):
    resources = create_scheduling_resources()
    clock, firer = local_schedule_firer(system, resources)
    today = dt.datetime.fromtimestamp(clock(), dt.UTC).date()
    schedule = {system.domain: {"start": today.isoformat(), "daily": [4, 5]}}
    settings = system.settings.model_copy(
        update={
            "warmup": json.dumps(schedule),
            "scheduler_group": resources.group_name,
            "scheduler_role_arn": resources.role_arn,
            "scheduled_start_function_arn": resources.start_function_arn,
        }
    )

    def consume() -> None:
        runtime = build_consumer_runtime(
            settings, build_consumer_parts(settings, clients()), window_clock_ms=lambda: int(clock() * 1000)
        )
        system.poller(handler=functools.partial(consumer.lambda_handler, runtime=runtime)).run_until_idle(
            idle_seconds=1, max_seconds=60
        )

    def status() -> dict:
        return as_json(sendonce(system, "campaign", "status", "c1", "--json", env=resources.env()))

    system.operator.create(
        Campaign(
            campaign_id="c1",
            name="Warming up",
            provider="resend",
            delivery_mode=mode,
            sender=f"News <news@{system.domain}>",
            content=Content(subject="Hello {{ name }}", text="Hi {{ name }}"),
            ledger_shards=4,
        )
    )
    # 12 recipients, messages of 2 (batch mode: a send group of 2 takes 2 places)
    system.operator.publish("c1", iter(system.recipients(12)), batch_size=2)

    # Day one: 4, then the campaign pauses itself with the reason, until tomorrow
    consume()
    tomorrow = warmup.next_day_ms(int(clock() * 1000))
    assert sum(system.deliveries().values()) == 4
    first = status()
    assert first["state"] == "paused"
    assert first["state_reason"] == f"warm-up: 4 of 4 today ({system.domain}); opens {warmup.iso(tomorrow)}"
    assert (first["sent"], first["pending"]) == (4, 8)
    [schedule_item] = firer.schedules()
    assert json.loads(schedule_item["Target"]["Input"])["window_opens_at"] == warmup.iso(tomorrow)
    assert firer.fire_due() == []  # not before midnight
    day_item = DynamoDBWarmupBudget(client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table)
    assert day_item.sent(system.domain, today.isoformat()) <= 4

    # Day two: the opening resumes it (once), 5 more, paused again
    clock.advance(tomorrow / 1000 - clock() + 1)
    [firing] = firer.fire_due()
    assert firing.ok and firing.result["started"] is True, firing.result
    assert firer.fire(schedule_item).result["started"] is False  # a retry resumes nothing more
    consume()
    assert sum(system.deliveries().values()) == 9
    assert status()["state_reason"].startswith(f"warm-up: 5 of 5 today ({system.domain})")

    # Day three: the ramp has ended, the rest go; everyone exactly once
    clock.advance(warmup.next_day_ms(int(clock() * 1000)) / 1000 - clock() + 1)
    [firing] = firer.fire_due()
    assert firing.result["started"] is True, firing.result
    consume()
    assert system.deliveries() == {f"user{i}@{system.domain}": 1 for i in range(12)}
    assert (status()["state"], status()["sent"]) == ("completed", 12)

    # The report's timeline marks where the warm-up held it back, and each day's opening
    reports = ReportService(
        campaigns=system.operator,
        aggregates=DynamoDBReportAggregates(
            client=boto3.client("dynamodb"), table_name=system.resources.campaigns_table
        ),
        clock=lambda: int(clock() * 1000),
    )
    marks = [(m.event, m.reason) for m in reports.report("c1").marks]
    held = [reason for event, reason in marks if event == "window_close"]
    assert [r.split(" today")[0] for r in held] == ["warm-up: 4 of 4", "warm-up: 5 of 5"], marks
    assert sum(1 for event, _ in marks if event == "window_open") == 2, marks
