"""The account health check (issue 32, item 4): probation alarms and pauses nothing; an account
that cannot send pauses every sending campaign of its provider, with the reason, once; the
record says since when and when the account came back; resuming stays the operator's."""

from __future__ import annotations

import pytest

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.deliverability.account_health import AUTOMATIC_ACCOUNT, AccountHealthService, next_record
from sendonce.domain.deliverability.ports import AccountState, Enforcement, Verdict
from sendonce.domain.errors import SettingsError
from sendonce.domain.models import Campaign, CampaignState, Content
from sendonce.settings import AccountHealthSettings
from tests.fakes import FakeCampaignStore, FakeHealthRecords, FakeProviderAccount

C = CampaignState


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def world():
    campaigns = FakeCampaignStore()
    for campaign_id, provider, state in (
        ("ses-a", "ses", C.SENDING),
        ("ses-b", "ses", C.SENDING),
        ("ses-paused", "ses", C.PAUSED),
        ("ses-draft", "ses", C.DRAFT),
        ("resend-a", "resend", C.SENDING),
    ):
        campaigns.create(
            Campaign(
                campaign_id=campaign_id,
                name=campaign_id,
                provider=provider,
                sender="news@example.com",
                content=Content(subject="s", text="t"),
                state=state,
            )
        )
    account, records, clock = FakeProviderAccount("ses"), FakeHealthRecords(), Clock()
    service = AccountHealthService(account=account, records=records, campaigns=campaigns, clock_ms=clock)
    return campaigns, account, records, clock, service


def states(campaigns: FakeCampaignStore) -> dict[str, CampaignState]:
    return {c.campaign_id: c.state for c in campaigns.list()}


def test_a_healthy_account_pauses_nothing_and_is_recorded(world):
    campaigns, account, records, clock, service = world

    check = service.check()

    assert check.verdict is Verdict.HEALTHY and check.paused == ()
    assert states(campaigns)["ses-a"] is C.SENDING
    assert records.last("ses").verdict is Verdict.HEALTHY and records.last("ses").checked_ms == clock.now_ms


def test_probation_pauses_nothing(world):
    campaigns, account, records, _, service = world
    account.set(enforcement=Enforcement.PROBATION)

    check = service.check()

    assert check.verdict is Verdict.PROBATION and check.paused == ()
    assert [s for s in states(campaigns).values() if s is C.SENDING] == [C.SENDING] * 3
    assert records.last("ses").reason == "ses account: enforcement status PROBATION"


@pytest.mark.parametrize(
    ("sending_enabled", "enforcement", "reason"),
    [
        (False, Enforcement.HEALTHY, "ses account: sending disabled"),
        (True, Enforcement.SHUTDOWN, "ses account: enforcement status SHUTDOWN"),
        (False, Enforcement.SHUTDOWN, "ses account: sending disabled, enforcement status SHUTDOWN"),
    ],
)
def test_an_account_that_cannot_send_pauses_every_sending_campaign_of_its_provider(
    world, sending_enabled, enforcement, reason
):
    campaigns, account, records, clock, service = world
    account.set(sending_enabled=sending_enabled, enforcement=enforcement)

    check = service.check()

    assert check.verdict is Verdict.STOPPED
    assert check.paused == ("ses-a", "ses-b")
    assert states(campaigns) == {
        "ses-a": C.PAUSED,
        "ses-b": C.PAUSED,
        "ses-paused": C.PAUSED,
        "ses-draft": C.DRAFT,
        "resend-a": C.SENDING,  # another provider's account
    }
    paused = campaigns.get("ses-a")
    assert (paused.state_reason, paused.state_changed_by) == (reason, AUTOMATIC_ACCOUNT)
    assert campaigns.get("ses-paused").state_changed_by != AUTOMATIC_ACCOUNT  # left as it was
    assert records.last("ses").stopped_at_ms == clock.now_ms


def test_a_repeat_pauses_only_what_started_sending_since(world):
    campaigns, account, _, clock, service = world
    account.set(sending_enabled=False)
    service.check()
    lifecycle.apply(campaigns, "ses-a", CampaignEvent.RESUME, by="operator")  # an operator's resume, too early
    first = campaigns.get("ses-b")
    clock.now_ms += 300_000

    check = service.check()

    assert check.paused == ("ses-a",)
    assert campaigns.get("ses-b") == first  # not paused twice: its reason and mark stand
    assert campaigns.marks.count(("ses-b", "halt", AUTOMATIC_ACCOUNT)) == 1


def test_the_record_says_when_the_account_stopped_and_came_back_and_nothing_resumes(world):
    campaigns, account, records, clock, service = world
    account.set(enforcement=Enforcement.SHUTDOWN)
    service.check()
    stopped_at = clock.now_ms
    clock.now_ms += 300_000
    service.check()
    assert records.last("ses").since_ms == stopped_at  # still stopped: since the first check that saw it
    account.set()
    clock.now_ms += 300_000

    check = service.check()

    assert check.came_back and check.verdict is Verdict.HEALTHY
    record = records.last("ses")
    assert (record.verdict, record.stopped_at_ms, record.back_at_ms, record.since_ms) == (
        Verdict.HEALTHY,
        stopped_at,
        clock.now_ms,
        clock.now_ms,
    )
    assert states(campaigns)["ses-a"] is C.PAUSED  # resuming stays the operator's call


def test_an_unknown_enforcement_status_is_kept_and_does_not_pause():
    state = AccountState("ses", sending_enabled=True, enforcement="UNDER_REVIEW")
    assert state.verdict is Verdict.HEALTHY and state.reason == "ses account: enforcement status UNDER_REVIEW"


def test_a_new_stop_clears_the_previous_comeback():
    stopped = AccountState("ses", sending_enabled=False, enforcement=Enforcement.HEALTHY)
    healthy = AccountState("ses", sending_enabled=True, enforcement=Enforcement.HEALTHY)
    record = next_record(None, stopped, 1)
    record = next_record(record, healthy, 2)
    assert (record.stopped_at_ms, record.back_at_ms) == (1, 2)

    record = next_record(record, stopped, 3)

    assert (record.verdict, record.stopped_at_ms, record.back_at_ms, record.since_ms) == (Verdict.STOPPED, 3, None, 3)


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"SENDONCE_CAMPAIGNS_TABLE": "campaigns", "SENDONCE_PROVIDER": "resend"}, "SENDONCE_PROVIDER"),
        ({"SENDONCE_CAMPAIGNS_TABLE": "campaigns"}, "SENDONCE_PROVIDER"),
        ({"SENDONCE_PROVIDER": "ses"}, "SENDONCE_CAMPAIGNS_TABLE"),
    ],
)
def test_the_checks_settings_refuse_a_provider_without_an_account_state_naming_the_variable(environ, named):
    with pytest.raises(SettingsError, match=named):
        AccountHealthSettings.from_env(environ)


def test_the_checks_settings_take_a_provider_with_an_account_state():
    assert AccountHealthSettings.from_env({"SENDONCE_CAMPAIGNS_TABLE": "campaigns", "SENDONCE_PROVIDER": "ses"})
