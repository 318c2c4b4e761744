"""Warm-up ramps per sending domain (issue 32, item 2): the schedules as data, what bad input is
told, and the consumer pausing on the day's cap (with fakes; the model check and
tests/integration/test_warmup.py drive the real adapters)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from sendonce.domain.deliverability import warmup
from sendonce.domain.errors import SettingsError
from sendonce.domain.models import CampaignState, DeliveryState
from sendonce.settings import ConsumerSettings
from sendonce_cdk.config import SendonceConfig
from sendonce_cdk.context_values import ConfigError
from tests.fakes import FakeScheduler
from tests.unit.helpers import World, batch

DAY = dt.date(2026, 12, 7)


def test_a_table_caps_each_day_from_its_start_and_ends_warm():
    schedule = warmup.parse_schedule("example.com", {"start": "2026-12-07", "daily": [500, 1000, 1000]})

    assert [schedule.cap_on(DAY + dt.timedelta(days=n)) for n in (-3, 0, 1, 2, 3)] == [500, 500, 1000, 1000, None]


def test_the_named_ramp_doubles_from_its_first_day_until_past_a_million():
    schedule = warmup.parse_schedule("example.com", {"start": "2026-12-07", "ramp": "double-from-500"})

    assert schedule.daily[:4] == (500, 1000, 2000, 4000) and schedule.daily[-1] > warmup.RAMP_CEILING
    assert schedule.cap_on(DAY + dt.timedelta(days=len(schedule.daily))) is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (
            {"start": "2026-12-07", "daily": [500, 400]},
            "warmup.example.com.daily[1]: 400 is less than the day before's 500",
        ),
        (
            {"start": "2026-12-07", "daily": [0]},
            "warmup.example.com.daily[0]: 0 is not a whole number of emails from 1",
        ),
        ({"start": "2026-12-07", "daily": []}, "warmup.example.com.daily: expected a list of daily caps"),
        ({"start": "soon", "daily": [5]}, "warmup.example.com.start: 'soon' is not a day (YYYY-MM-DD)"),
        ({"start": "2026-12-07", "ramp": "triple-from-5"}, "warmup.example.com.ramp: 'triple-from-5'"),
        ({"start": "2026-12-07"}, "give daily (a table of daily caps) or ramp (double-from-N), one of them"),
        ({"start": "2026-12-07", "daily": [5], "every": 2}, "warmup.example.com: unknown field(s) every"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(value, says):
    with pytest.raises(warmup.WarmupError, match=re.escape(says)):
        warmup.parse_warmup({"example.com": value})


def test_the_functions_settings_and_the_construct_refuse_a_shrinking_ramp():
    base = {
        "SENDONCE_LEDGER_TABLE": "ledger",
        "SENDONCE_CAMPAIGNS_TABLE": "campaigns",
        "SENDONCE_DEAD_LETTER_QUEUE_URL": "http://q",
    }
    shrinking = '{"example.com": {"start": "2026-12-07", "daily": [500, 400]}}'
    with pytest.raises(SettingsError, match=re.escape("warmup.example.com.daily[1]: 400 is less")):
        ConsumerSettings.from_env({**base, "SENDONCE_WARMUP": shrinking})
    with pytest.raises(ConfigError, match=re.escape("warmup: 'not a domain' is not a domain name")):
        SendonceConfig.from_context({"warmup": {"not a domain": {"start": "2026-12-07", "daily": [5]}}})
    good = ConsumerSettings.from_env({**base, "SENDONCE_WARMUP": shrinking.replace("400", "600")})
    assert good.warmup_schedules.cap("News <news@Example.com>", 1_796_600_000_000) == ("example.com", 500)


def test_the_reason_names_the_day_and_the_opening_it_waits_for():
    opens = warmup.next_day_ms(int(dt.datetime(2026, 12, 7, 15, tzinfo=dt.UTC).timestamp() * 1000))
    reason = warmup.pause_reason("example.com", 2000, opens)

    assert reason == "warm-up: 2,000 of 2,000 today (example.com); opens 2026-12-08T00:00:00Z"
    assert warmup.waits_for(reason, opens) and not warmup.waits_for("window: opens ...", opens)
    assert warmup.domain_of("News <news@Mail.Example.com>") == "mail.example.com"


class FakeBudget:
    def __init__(self, left: int):
        self.left = left

    def take(self, domain, day, count, cap, *, whole=True):
        got = count if self.left >= count else (0 if whole else self.left)
        self.left -= got
        return got


def test_one_by_one_the_days_cap_pauses_the_campaign_until_tomorrow_and_the_rest_stay_pending():
    world, scheduler = World(), FakeScheduler()
    world.campaign()  # news@example.com
    now_ms = world.clock()
    schedules = warmup.Warmup({"example.com": warmup.WarmupSchedule(warmup.day_of(now_ms), (3,))})
    service = world.service(warmup=schedules, warmup_budget=FakeBudget(3), scheduler=scheduler, send_concurrency=1)

    report = world.process(batch(n=5), service=service)

    assert report.sent == 3 and world.provider.deliveries() == {f"user{i}@example.com": 1 for i in range(3)}
    campaign = world.campaigns.campaigns["c1"]
    tomorrow = warmup.next_day_ms(now_ms)
    assert campaign.state is CampaignState.PAUSED and warmup.waits_for(campaign.state_reason, tomorrow)
    assert scheduler.openings == {"c1": {tomorrow}}
    # r3 is released to pending; r4 never claimed (the halt stops the batch): both wait for tomorrow
    assert {world.ledger.state_of("c1", f"r{i}") for i in (3, 4)} <= {None, DeliveryState.PENDING}
