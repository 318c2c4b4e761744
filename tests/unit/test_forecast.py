"""Mailbox-provider groups and the forecast (issue 32, items 1 and 5): a domain's group from one
table a deployment extends, refused when malformed; the audience after repeats and
suppressions, per group; the ETA from the campaign's share of the rate, its batch size, its
start and its send window."""

from __future__ import annotations

import datetime as dt

import pytest

from sendonce.domain.campaigns.forecast import Sharer, Sharing, ends_at, forecast
from sendonce.domain.campaigns.recipients_file import inline_rows
from sendonce.domain.campaigns.windows import SendWindow
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups, MailboxGroupsError
from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.models import Campaign, Content, Recipient
from sendonce.domain.sending.shares import Claimant
from tests.fakes import FakeSuppressions

NOW_MS = int(dt.datetime(2026, 12, 7, 9, 0, tzinfo=dt.UTC).timestamp() * 1000)  # a Monday


# --- groups ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "group"),
    [
        ("ann@gmail.com", "google"),
        ("ann@GoogleMail.com", "google"),
        ("bob@hotmail.co.uk", "microsoft"),
        ("bob@live.fr", "microsoft"),
        ("bob@outlook.com", "microsoft"),
        ("cy@yahoo.co.jp", "yahoo"),
        ("cy@aol.com", "yahoo"),
        ("di@icloud.com", "apple"),
        ("ed@example.com", "other"),
        ("ed@mail.gmail.com", "other"),  # a pattern is a domain, not its subdomains
        ("ed@hotmail", "other"),  # a first label alone is no domain
    ],
)
def test_a_recipients_domain_maps_to_its_mailbox_providers_group(address, group):
    assert MailboxGroups().of_address(address) == group


def test_a_deployment_extends_the_table_and_counts_list_every_group():
    groups = MailboxGroups().extended({"google": ["corp-gmail.example"], "gmx": ["gmx.*", "web.de"]})

    assert groups.of_domain("gmx.net") == "gmx" and groups.of_domain("corp-gmail.example") == "google"
    assert groups.count(["a@gmx.de", "b@gmail.com", "c@web.de"]) == {
        "google": 1,
        "microsoft": 0,
        "yahoo": 0,
        "apple": 0,
        "gmx": 2,
        "other": 0,
    }


@pytest.mark.parametrize(
    ("more", "named"),
    [
        ({"Gmail": ["gmail.example"]}, "'Gmail'"),
        ({"other": ["x.example"]}, "'other'"),
        ({"mine": []}, "no domain pattern"),
        ({"mine": ["not a domain"]}, "'not a domain'"),
        ({"mine": ["*.example"]}, "'\\*.example'"),
        ({"mine": ["gmail.com"]}, "already in group 'google'"),
        ({"mine": ["hotmail.*"]}, "already in group 'microsoft'"),
    ],
)
def test_a_malformed_table_is_refused_naming_the_group_and_the_pattern(more, named):
    with pytest.raises(MailboxGroupsError, match=named):
        MailboxGroups().extended(more)


# --- the forecast ------------------------------------------------------------------------


def campaign(**changes) -> Campaign:
    return Campaign(
        campaign_id="spring",
        name="Spring",
        provider="resend",
        sender="news@example.com",
        content=Content(subject="s", text="t"),
        **changes,
    )


def forecast_of(c: Campaign, file, sharing: Sharing, *, suppressions=None, **options):
    """The forecast with the default groups, at NOW_MS, suppressing nobody unless told."""
    return forecast(
        c, file, suppressions=suppressions or FakeSuppressions(), groups=MailboxGroups(), sharing=sharing,
        now_ms=NOW_MS, **options,
    )  # fmt: skip


def rows(*addresses: str, ids: list[str] | None = None):
    ids = ids or [f"r{i}" for i in range(len(addresses))]
    return inline_rows(Recipient(recipient_id=i, email=a) for i, a in zip(ids, addresses, strict=True))


def test_the_audience_leaves_out_repeats_and_suppressed_addresses_and_is_counted_per_group():
    suppressions = FakeSuppressions()
    suppressions.add("gone@gmail.com", SuppressionReason.UNSUBSCRIBED, "test")
    file = rows(
        "ann@gmail.com", "gone@gmail.com", "bob@hotmail.com", "ann@gmail.com", "ed@example.com", "x@example.com",
        ids=["a", "g", "b", "a2", "e", "e"],
    )  # fmt: skip

    result = forecast_of(campaign(), file, Sharing(rate=10), suppressions=suppressions)

    assert (result.rows_read, result.repeated_ids, result.duplicate_addresses) == (6, 1, 1)
    assert (result.suppressed, result.audience) == (1, 4)  # a2 repeats ann's address: sent to each
    assert result.groups == {"google": 2, "microsoft": 1, "yahoo": 0, "apple": 0, "other": 1}


def test_dedupe_addresses_sends_a_repeated_address_once():
    file = rows("ann@gmail.com", "ann@gmail.com")
    result = forecast_of(campaign(), file, Sharing(rate=10), dedupe_addresses=True)
    assert (result.audience, result.duplicate_addresses) == (1, 1)


def test_the_eta_is_the_campaigns_share_of_the_rate_among_the_campaigns_sending_now():
    file = rows(*[f"u{i}@example.com" for i in range(600)])
    # "big" keeps sending (what it has left is unknown); its own earlier slot is not another
    others = (Sharer(Claimant("big", weight=2)), Sharer(Claimant("spring")))

    result = forecast_of(campaign(), file, Sharing(rate=30, others=others))

    assert (result.rate, result.campaigns_sharing) == (10, 1)  # weight 1 of 3
    assert result.eta_s == 60.0 and result.ends_at_ms == NOW_MS + 60_000


def test_the_others_drain_what_they_have_left_and_their_share_comes_back():
    # Three campaigns of 50 requests each share 5 requests/s with a new one of 200: 1.25/s
    # each until they end at 40 s (the new one has sent 50), then the new one alone: 150 / 5.
    file = rows(*[f"u{i}@example.com" for i in range(200)])
    others = tuple(Sharer(Claimant(f"small{n}"), requests_left=50) for n in range(3))

    result = forecast_of(campaign(), file, Sharing(rate=5, others=others))

    assert (result.rate, result.campaigns_sharing) == (1.25, 3)
    assert result.eta_s == pytest.approx(70.0)


def test_a_campaign_that_never_gets_a_place_never_ends():
    result = forecast_of(campaign(), rows("a@example.com"), Sharing(rate=0))
    assert (result.ends_at_ms, result.eta_s) == (None, None)


def test_batch_mode_carries_up_to_the_providers_batch_per_request_and_max_rate_caps_it():
    file = rows(*[f"u{i}@example.com" for i in range(1000)])
    result = forecast_of(campaign(delivery_mode="batch", max_rate=2), file, Sharing(rate=5, batch_size=100))
    assert (result.rate, result.recipients_per_request, result.eta_s) == (2, 100, 5.0)


def test_a_scheduled_campaign_starts_at_its_send_at():
    start = NOW_MS + 3_600_000
    result = forecast_of(campaign(send_at_ms=start), rows("a@example.com", "b@example.com"), Sharing(rate=1))
    assert (result.starts_at_ms, result.ends_at_ms) == (start, start + 2_000)


def test_a_send_window_holds_the_send_outside_its_hours():
    window = SendWindow(days=("mon", "tue"), opens="10:00", closes="11:00", tz="UTC")
    c = campaign(window=window)
    hour = 3_600_000
    # Monday 09:00: waits for 10:00, sends an hour, then Tuesday 10:00 for the rest.
    assert ends_at(c, hour, NOW_MS) == NOW_MS + 2 * hour
    assert ends_at(c, 1.5 * hour, NOW_MS) == NOW_MS + 25 * hour + hour // 2
    # Nothing to send: done at once; never a place: never.
    assert ends_at(c, 0, NOW_MS) == NOW_MS and ends_at(c, None, NOW_MS) is None
