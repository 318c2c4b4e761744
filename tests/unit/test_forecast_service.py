"""The forecast as a service (domain/campaigns/forecasting.py) and as a job in parts over an S3
object (domain/campaigns/s3_forecast.py), on fakes: an inline list's bad rows named by index
and field; who shares the rate read from the limiter's slots; a file of one range forecast
exactly as the same rows inline; a file of several ranges counted per range (exact within
each, a repeat across ranges not seen, and the result says so); a part taken twice counted
once; nothing published or written."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from sendonce.domain.campaigns.forecast import AudienceCount, Sharing
from sendonce.domain.campaigns.forecasting import ForecastService, SharingNow
from sendonce.domain.campaigns.recipients_file import RecipientFileError, object_rows
from sendonce.domain.campaigns.s3_forecast import S3Forecast
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.errors import CampaignNotFoundError, InvalidCampaignError
from sendonce.domain.jobs.models import JobKind, JobState
from sendonce.domain.jobs.pages import PartedWork
from sendonce.domain.models import CampaignState
from sendonce.domain.sending.sending_now import SendingNow
from sendonce.domain.sending.shares import Claimant
from tests.fakes import FakeJobQueue, FakeSuppressions
from tests.unit.helpers import World, jobs_of
from tests.unit.test_s3_publish_job import FakeObjects
from tests.unit.test_sending_now import FakeCampaigns, FakeSlots, slot, status
from tests.unit.test_sending_now import campaign as sending_campaign

NOW_MS = int(dt.datetime(2026, 12, 7, 9, 0, tzinfo=dt.UTC).timestamp() * 1000)


class FixedSharing:
    def __init__(self, sharing: Sharing):
        self.value = sharing
        self.asked: list[str] = []

    def sharing(self, campaign):
        self.asked.append(campaign.campaign_id)
        return self.value


def rows_of(*pairs: tuple[str, str]) -> list[dict]:
    return [{"recipient_id": rid, "email": email, "variables": {"name": rid}} for rid, email in pairs]


PEOPLE = rows_of(
    ("r1", "ann@gmail.com"),
    ("r2", "gone@gmail.com"),  # suppressed
    ("r3", "bob@hotmail.co.uk"),
    ("r1", "ann@gmail.com"),  # repeated id
    ("r4", "ANN@gmail.com"),  # ann's address under another id
    ("r5", "not an address"),  # bad
    ("r6", "cy@example.com"),
)


def rig(*, queued: bool = False, range_bytes: int = 1 << 20, suppressions=True):
    world = World()
    world.campaign("c1", state=CampaignState.DRAFT)
    fake_suppressions = FakeSuppressions()
    fake_suppressions.add("gone@gmail.com", SuppressionReason.UNSUBSCRIBED, "test")
    objects = FakeObjects()
    job_queue = FakeJobQueue() if queued else None
    built: dict[str, S3Forecast] = {}

    def parted(service: CampaignService) -> dict[JobKind, PartedWork]:
        forecasts = ForecastService(
            campaigns=service,
            suppressions=fake_suppressions if suppressions else None,
            sharing=FixedSharing(Sharing(rate=10)),
            clock_ms=lambda: NOW_MS,
        )
        built["work"] = S3Forecast(service=service, forecasts=forecasts, objects=objects, range_bytes=range_bytes)
        return {JobKind.FORECAST_S3: built["work"]}

    service = CampaignService(
        campaigns=world.campaigns,
        ledger=world.ledger,
        queue=world.queue,
        provider_names=["resend"],
        jobs=jobs_of(world.campaigns, queue=job_queue, parted=parted),
    )
    return world, service, built["work"], objects, job_queue, fake_suppressions


def csv_of(rows: list[dict]) -> bytes:
    lines = ["recipient_id,email,name\n"] + [
        f"{r['recipient_id']},{r['email']},{r['variables']['name']}\n" for r in rows
    ]
    return "".join(lines).encode()


def start(work, key: str = "list.csv", campaign: str = "c1", dedupe: bool = False):
    return work.start(campaign, bucket="b", key=key, fmt=None, dedupe_addresses=dedupe, by="ops")


# --- a list in hand ------------------------------------------------------------------------


def test_an_inline_list_is_forecast_with_its_bad_rows_named_by_index_and_field():
    world, _, work, _, _, suppressions = rig()
    before = (copy.deepcopy(world.campaigns.campaigns), list(world.queue.published))

    result, tally = work.forecasts.of_rows("c1", object_rows(PEOPLE))

    assert (result.rows_read, result.bad_rows, result.repeated_ids, result.duplicate_addresses) == (7, 1, 1, 1)
    assert (result.suppressed, result.audience, result.suppressions_checked) == (1, 4, True)
    assert result.groups == {"google": 2, "microsoft": 1, "yahoo": 0, "apple": 0, "other": 1}
    assert [(row.line, row.problem) for row in tally.kept if row.problem] == [(5, "email: not a valid email address")]
    assert suppressions.batch_reads == 1  # 5 addresses: one read
    # Then the view the API answers: instants in ISO 8601, exact
    view = result.view(problems=["recipients.5: email: not a valid email address"])
    assert view["starts_at"] == "2026-12-07T09:00:00Z" and view["exact"] is True and view["eta_s"] == 0.4
    assert view["delivery_mode"] == "single" and view["provider"] == "resend"
    # And nothing was written: the campaign as it was, nothing published
    assert (world.campaigns.campaigns, world.queue.published) == before
    assert world.campaigns.campaigns["c1"].state is CampaignState.DRAFT


def test_an_unknown_campaign_fails_before_any_row_is_read():
    _, _, work, _, _, suppressions = rig()
    with pytest.raises(CampaignNotFoundError):
        work.forecasts.of_rows("nope", object_rows(PEOPLE))
    assert suppressions.batch_reads == 0


def test_without_a_suppression_list_the_forecast_says_it_was_not_checked():
    _, _, work, _, _, _ = rig(suppressions=False)
    result, _ = work.forecasts.of_rows("c1", object_rows(PEOPLE))
    assert (result.suppressed, result.audience, result.suppressions_checked) == (0, 5, False)


def test_a_row_that_is_no_recipient_at_all_is_a_bad_row_naming_its_field():
    rows = list(object_rows([{"email": "a@example.com"}, {"recipient_id": "x", "email": "b@example.com", "n": 1}]))
    assert [r.problem for r in rows] == ["recipient_id: Field required", "n: unexpected field"]


def test_counts_of_parts_add_up():
    one = AudienceCount.of({"rows_read": 3, "audience": 2, "ranges": 9}, {"google": 2, "other": 0})
    two = AudienceCount.of({"rows_read": 1, "bad_rows": 1}, {"other": 1})
    merged = one.plus(two)
    assert merged.counts() == {
        "rows_read": 4, "bad_rows": 1, "repeated_ids": 0, "duplicate_addresses": 0, "suppressed": 0, "audience": 2,
    }  # fmt: skip
    assert merged.groups == {"google": 2, "other": 1}


# --- who shares the rate ---------------------------------------------------------------------


def test_sharing_now_is_the_providers_campaigns_in_the_window_with_what_they_have_left():
    # "big" sent in the window with 300 recipients to go, in batch mode (100 a request); an
    # SES campaign shares another provider's rate and is not counted.
    slots = FakeSlots(
        {
            "resend": [slot(1_000_095, 2, {"big": 2}, [Claimant("big", weight=2)])],
            "ses": [slot(1_000_095, 1, {"other": 1}, [Claimant("other")])],
        },
        rates={"resend": 4.0},
    )
    campaigns = FakeCampaigns(
        {
            "big": (sending_campaign("big", mode="batch"), status("big", pending=250, in_progress=50)),
            "other": (sending_campaign("other", provider="ses"), status("other", pending=1, in_progress=0)),
        }
    )
    now = SendingNow(slots=slots, campaigns=campaigns, batch_sizes={"resend": 100, "ses": 1}, clock=lambda: 1_000_100.5)

    sharing = SharingNow(now).sharing(sending_campaign("mine"))

    assert sharing.rate == 4.0 and sharing.batch_size == 100
    assert [(s.claimant.campaign_id, s.requests_left) for s in sharing.others] == [("big", 3)]
    assert {provider for provider, _, _ in slots.reads} == {"resend"}  # its own provider's slots only


def test_a_provider_the_limiter_does_not_pace_takes_the_fallback_rate_else_none():
    now = SendingNow(slots=FakeSlots({}, rates={}), campaigns=FakeCampaigns({}), batch_sizes={}, clock=lambda: 1.0)
    assert SharingNow(now, fallback_rate=lambda provider: 7.0).sharing(sending_campaign("c")).rate == 7.0
    assert SharingNow(now).sharing(sending_campaign("c")).rate == 0.0


# --- an S3 object, a job in parts -------------------------------------------------------------


def test_a_file_of_one_range_is_forecast_exactly_as_the_same_rows_inline():
    world, service, work, objects, _, _ = rig()
    objects.objects[("b", "list.csv")] = csv_of(PEOPLE)
    inline, _ = work.forecasts.of_rows("c1", object_rows(PEOPLE))

    job = start(work)

    assert job.kind is JobKind.FORECAST_S3 and job.state is JobState.DONE and job.params["parts"] == 1
    result = job.result
    expected = inline.view(problems=[])
    same = ("rows_read", "bad_rows", "repeated_ids", "duplicate_addresses", "suppressed", "audience", "groups")
    assert {k: result[k] for k in same} == {k: expected[k] for k in same}
    assert (result["eta_s"], result["ends_at"], result["exact"]) == (expected["eta_s"], expected["ends_at"], True)
    # Problems by the file's line (the header is line 1)
    assert result["problems"] == [
        "5: recipient_id 'r1' repeats line 2; published once",
        "6: same address as line 2, under another recipient_id; published (it gets the email twice; dedupe "
        "addresses to send it once)",
        "7: email: not a valid email address",
    ]
    assert (result["lines"], result["parts"]) == (8, 1)
    # Nothing published, the campaign still a draft
    assert not world.queue.published and service.get("c1").state is CampaignState.DRAFT


def test_a_file_of_several_ranges_is_counted_per_range_and_says_it_is_not_exact():
    # 40 people, ~30 bytes a line, ranges of 200 bytes: 7 ranges. r1 comes again in the last
    # range (another range: not seen), r2 again right after itself (the same range: seen).
    world, service, work, objects, job_queue, _ = rig(queued=True, range_bytes=200)
    people = rows_of(*[(f"r{n}", f"user{n}@gmail.com") for n in range(1, 41)])
    people.insert(2, people[1])
    people.append(people[0])
    objects.objects[("b", "list.csv")] = csv_of(people)

    job = start(work)
    parts = [n for _, n in job_queue.parts]
    for n in reversed(parts):  # any order, each message twice
        service.jobs.work_part(job.job_id, n)
        service.jobs.work_part(job.job_id, n)
    done = service.jobs.get(job.job_id)

    assert done.state is JobState.DONE and len(parts) == done.params["parts"] > 1
    assert done.progress["ranges_done"] == len(parts) and done.progress["rows_read"] == 42
    result = done.result
    assert (result["repeated_ids"], result["audience"], result["exact"]) == (1, 41, False)  # 40 people: 41 is high
    assert result["groups"]["google"] == 41 and result["problems"] == [
        "4: recipient_id 'r2' repeats line 3; published once"
    ]
    assert result["lines"] == 43 and not world.queue.published


def test_an_empty_or_missing_object_or_an_unknown_campaign_is_refused_before_any_job():
    _, service, work, objects, _, _ = rig()
    objects.objects[("b", "empty.csv")] = b""

    with pytest.raises(RecipientFileError, match="empty; nothing to forecast"):
        start(work, key="empty.csv")
    with pytest.raises(RecipientFileError, match="cannot be read"):
        start(work, key="none.csv")
    with pytest.raises(CampaignNotFoundError):
        start(work, campaign="nope")
    with pytest.raises(RecipientFileError, match="cannot tell the format"):
        start(work, key="list.txt")


def test_a_service_not_given_the_kind_says_so_instead_of_failing_unexpectedly():
    world = World()
    service = CampaignService(
        campaigns=world.campaigns, ledger=world.ledger, queue=world.queue, provider_names=["resend"]
    )
    with pytest.raises(InvalidCampaignError, match="'forecast_s3' cannot be run here"):
        service.jobs.parted_work(JobKind.FORECAST_S3)


def test_a_mailbox_groups_cap_slower_than_the_share_sets_the_eta():
    """Issue 32, items 1 and 5: 3 Google recipients (no suppression list here) under a Google cap
    of 0.5/s take 6 s, longer than the 0.5 s its share of 10 requests/s gives the 5 recipients;
    a campaign's own cap on Microsoft (1 recipient at 0.1/s: 10 s) is tighter still."""
    world = World()
    campaign = world.campaign("c1", state=CampaignState.DRAFT)
    forecasts = ForecastService(
        campaigns=world.campaigns,
        suppressions=None,
        sharing=FixedSharing(Sharing(rate=10)),
        caps={"google": 0.5},
        clock_ms=lambda: NOW_MS,
    )
    capped, _ = forecasts.of_rows("c1", object_rows(PEOPLE))
    assert (capped.eta_s, capped.bound_by, capped.group_caps) == (6.0, "google cap", {"google": 0.5})
    assert capped.not_applied == ()

    world.campaigns.campaigns["c1"] = campaign.model_copy(update={"pacing": {"microsoft": 0.1}})
    own, _ = forecasts.of_rows("c1", object_rows(PEOPLE))
    assert (own.eta_s, own.bound_by, own.group_caps) == (10.0, "microsoft cap", {"google": 0.5, "microsoft": 0.1})


def test_a_sending_domain_warming_up_spreads_the_audience_over_its_days():
    """Issue 32, items 2 and 5: 2 a day for example.com, 1 taken today already; 5 recipients
    need today's last place, tomorrow's 2, and the day after (the ramp over) for the other 2."""
    from sendonce.domain.deliverability import warmup

    world = World()
    world.campaign("c1", state=CampaignState.DRAFT)  # news@example.com
    ramp = warmup.Warmup({"example.com": warmup.WarmupSchedule(warmup.day_of(NOW_MS), (2, 2))})
    forecasts = ForecastService(
        campaigns=world.campaigns,
        suppressions=None,
        sharing=FixedSharing(Sharing(rate=10)),
        warm=ramp,
        sent_on=lambda domain, day: 1 if (domain, day) == ("example.com", "2026-12-07") else 0,
        clock_ms=lambda: NOW_MS,
    )

    result, _ = forecasts.of_rows("c1", object_rows(PEOPLE))

    assert (result.audience, result.warmup_left_today, result.warmup_days, result.bound_by) == (5, 1, 3, "warm-up")
    day_after_tomorrow = warmup.next_day_ms(warmup.next_day_ms(NOW_MS))
    assert day_after_tomorrow < result.ends_at_ms <= day_after_tomorrow + 1_000  # 2 at 10/s past midnight
