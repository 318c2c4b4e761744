"""The report's aggregates: folded to a bounded number of bars at any length, the busiest
mailbox providers by name, and each ledger change counted once, in the minute it ended."""

from __future__ import annotations

from types import SimpleNamespace

from sendonce.domain.campaigns.report import (
    MAX_DOMAINS,
    MAX_POINTS,
    OTHER_DOMAINS,
    bucket_width,
    build_report,
    fold,
    top_domains,
)
from sendonce.domain.campaigns.report_data import MINUTE_MS, Bucket, LedgerChange, ReportAggregates, increments_of
from sendonce.domain.campaigns.service import DeliveryStatus
from sendonce.domain.models import CampaignState
from sendonce_ops.report_page import render

T0 = 1_764_633_600_000


def status(**counts: int) -> DeliveryStatus:
    fields = dict.fromkeys(
        ("pending", "in_progress", "sent", "failed", "suppressed", "unknown", "cancelled", "dead_lettered"), 0
    )
    fields.update(counts)
    return DeliveryStatus(campaign_id="c1", state=CampaignState.SENDING, total=sum(fields.values()), **fields)


def test_a_week_of_minutes_is_drawn_in_at_most_max_points_bars_and_nothing_is_lost():
    week = [Bucket(T0 + i * MINUTE_MS, {"sent": 100, "failed": i % 2}) for i in range(7 * 24 * 60)]

    width = bucket_width(week)
    folded = fold(week, width)

    assert len(folded) <= MAX_POINTS
    assert width == MINUTE_MS * 42  # 10,080 minutes / 240 bars
    assert sum(b.counts["sent"] for b in folded) == 100 * len(week)
    assert sum(b.counts.get("failed", 0) for b in folded) == len(week) // 2


def test_a_short_campaign_keeps_one_bar_a_minute():
    minutes = [Bucket(T0 + i * MINUTE_MS, {"sent": 1}) for i in range(30)]
    assert bucket_width(minutes) == MINUTE_MS
    assert fold(minutes, MINUTE_MS) == minutes
    assert bucket_width([]) == MINUTE_MS


def test_the_domains_with_most_trouble_are_named_and_the_rest_summed():
    by_domain = {f"d{i}.example": {"delivered": 1000, "bounced": i, "complained": 0} for i in range(30)}

    shown = top_domains(by_domain)

    assert len(shown) == MAX_DOMAINS + 1
    assert list(shown)[0] == "d29.example"
    assert shown[OTHER_DOMAINS]["bounced"] == sum(range(30 - MAX_DOMAINS))
    assert sum(v["delivered"] for v in shown.values()) == 30 * 1000


def test_a_delivery_counts_in_the_minute_it_ended_once_and_an_unknown_later_sent_counts_as_settled():
    changes = [
        LedgerChange(None, "claimed", T0 + 1),
        LedgerChange("claimed", "sent", T0 + 61_000),
        LedgerChange("sent", "sent", T0 + 62_000, new_events=(("delivered", "a.example"),)),  # an event only
        LedgerChange("claimed", "unknown", T0 + 2_000),
        LedgerChange("unknown", "sent", T0 + 130_000),
        LedgerChange("sent", "sent", T0 + 140_000, new_events=(("bounced", "b.example"), ("opened", "b.example"))),
    ]

    increments = increments_of(changes)

    assert increments.outcomes == {(T0 + MINUTE_MS, "sent"): 1, (T0, "unknown"): 1, (T0 + 2 * MINUTE_MS, "sent"): 1}
    assert increments.unknowns_settled == {"sent": 1}
    assert increments.feedback == {("a.example", "delivered"): 1, ("b.example", "bounced"): 1}


def test_sends_and_deferrals_bounces_complaints_count_per_mailbox_group_in_their_minute():
    changes = [
        LedgerChange("claimed", "sent", T0 + 1_000, mailbox_group="google"),
        LedgerChange("claimed", "sent", T0 + 2_000, mailbox_group="google"),
        LedgerChange("claimed", "failed", T0 + 3_000, mailbox_group="google"),  # not a send
        LedgerChange("claimed", "sent", T0 + 61_000, mailbox_group="yahoo"),
        LedgerChange("sent", "sent", T0 + 62_000, (("delivery_delayed", "gmail.com"),), "google"),
        LedgerChange("sent", "sent", T0 + 63_000, (("bounced", "gmail.com"), ("complained", "gmail.com")), "google"),
        LedgerChange("sent", "sent", T0 + 64_000, (("delivered", "gmail.com"), ("opened", "gmail.com")), "google"),
        LedgerChange("claimed", "sent", T0 + 65_000),  # claimed before groups were kept: no group
        LedgerChange("sent", "sent", T0 + 66_000, mailbox_group="google"),  # a repeat adds nothing
    ]

    outcomes = increments_of(changes).outcomes

    assert {k: n for k, n in outcomes.items() if k[1].startswith("g:")} == {
        (T0, "g:google:sent"): 2,
        (T0 + MINUTE_MS, "g:yahoo:sent"): 1,
        (T0 + MINUTE_MS, "g:google:deferred"): 1,
        (T0 + MINUTE_MS, "g:google:bounced"): 1,
        (T0 + MINUTE_MS, "g:google:complained"): 1,
    }
    assert outcomes[(T0, "sent")] == 2 and outcomes[(T0 + MINUTE_MS, "sent")] == 2  # the outcomes as before


def test_the_report_folds_each_group_like_the_timeline_and_says_where_a_cap_held_it_back():
    campaign = SimpleNamespace(campaign_id="c1", name="n", subject="s", provider="resend", delivery_mode="single")
    minutes = 2 * MAX_POINTS  # two minutes a bar
    aggregates = ReportAggregates(
        outcomes_per_minute=[Bucket(T0 + i * MINUTE_MS, {"sent": 5}) for i in range(minutes)],
        groups_per_minute={
            "yahoo": [Bucket(T0, {"sent": 2, "deferred": 1})],
            "google": [Bucket(T0 + i * MINUTE_MS, {"sent": 3, "held": i % 2}) for i in range(minutes)],
            "comcast": [Bucket(T0 + MINUTE_MS, {"sent": 1})],  # a group the deployment added
        },
    )

    report = build_report(campaign=campaign, status=status(sent=5 * minutes), aggregates=aggregates, now_ms=T0)

    assert list(report.groups_over_time) == ["google", "yahoo", "comcast"]  # the table's order, then added ones
    google = report.groups_over_time["google"]
    assert len(google) == MAX_POINTS and [b.start_ms for b in google] == [b.start_ms for b in report.timeline]
    assert sum(b.counts["sent"] for b in google) == 3 * minutes and google[0].counts == {"sent": 6, "held": 1}
    assert report.held_back() == {"google": minutes // 2}
    page = render(report)
    assert 'data-held="google">240</span> emails to google' in page
    assert 'data-group-total="yahoo-deferred">1<' in page and 'data-group-total="google-sent">1,440<' in page


def test_the_report_takes_its_figures_from_the_status_and_says_when_tracking_is_off():
    campaign = SimpleNamespace(campaign_id="c1", name="n", subject="s", provider="resend", delivery_mode="single")
    aggregates = ReportAggregates(
        outcomes_per_minute=[Bucket(T0, {"sent": 3})],
        duplicates_prevented_per_minute=[Bucket(T0, {"prevented": 2})],
        feedback_by_domain={"a.example": {"delivered": 2, "bounced": 1}},
        unknowns_settled={"not_sent": 1},
    )

    report = build_report(
        campaign=campaign, status=status(sent=3, unknown=1, pending=2), aggregates=aggregates, now_ms=T0
    )

    assert report.figures() == {
        "total": 6,
        "sent": 3,
        "failed": 0,
        "suppressed": 0,
        "unknown": 1,
        "dead_lettered": 0,
        "cancelled": 0,
        "remaining": 2,
        "duplicates_prevented": 2,
        "bounced": 1,
        "complained": 0,
    }
    assert report.unknowns == {"open": 1, "settled_sent": 0, "settled_not_sent": 1}
    assert report.engagement is None and "does not track" in (report.engagement_off_reason or "")


def test_a_batch_with_too_many_domains_or_minutes_fits_one_transaction_with_the_same_totals():
    from sendonce.adapters.dynamodb.report_aggregates import fit, item_count
    from sendonce.domain.campaigns.report_data import ReportIncrements

    increments = ReportIncrements()
    for i in range(300):  # 300 minutes (an aggregator catching up after hours) and 300 domains
        increments.outcomes[(T0 + i * MINUTE_MS, "sent")] += 1
        increments.feedback[(f"d{i}.example", "bounced")] += 1 + i % 3

    fitted = fit(increments, 99)

    assert item_count(fitted) <= 99
    assert sum(fitted.outcomes.values()) == 300
    assert sum(fitted.feedback.values()) == sum(increments.feedback.values())
    assert (OTHER_DOMAINS, "bounced") in fitted.feedback


def test_a_stream_record_names_the_events_a_write_appended_with_their_domains():
    from sendonce.adapters.dynamodb.stream_records import change_of

    def image(state, *events):
        return {
            "state": {"S": state},
            "provider_events": {"L": [{"M": {"event": {"S": k}, "domain": {"S": d}}} for k, d in events]},
        }

    record = {
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"campaign_id": {"S": "c1#3"}, "recipient_id": {"S": "r1"}},
            "SequenceNumber": "100",
            "ApproximateCreationDateTime": T0 / 1000,
            "OldImage": image("sent", ("sent", "a.example")),
            "NewImage": image("sent", ("sent", "a.example"), ("bounced", "a.example")),
        },
    }

    change = change_of(record)

    assert change is not None and change.new_events == (("bounced", "a.example"),) and change.at_ms == T0
    # Read through boto3's DynamoDB Streams client (the local poller), the time is a datetime.
    import datetime as dt

    read = {
        **record,
        "dynamodb": {**record["dynamodb"], "ApproximateCreationDateTime": dt.datetime.fromtimestamp(T0 / 1000, dt.UTC)},
    }
    assert change_of(read).at_ms == T0
    unchanged = {**record, "dynamodb": {**record["dynamodb"], "NewImage": record["dynamodb"]["OldImage"]}}
    assert change_of(unchanged) is None
    # Entries in the short names ledger_events.py writes since 2026-12-07 (a `sent` has no
    # domain), appended after one in the long names of an item written before
    short = {
        **record,
        "dynamodb": {
            **record["dynamodb"],
            "NewImage": {
                "state": {"S": "sent"},
                "provider_events": {
                    "L": [
                        *record["dynamodb"]["OldImage"]["provider_events"]["L"],
                        {"M": {"k": {"S": "delivered"}, "t": {"N": str(T0)}, "d": {"S": "b.example"}}},
                        {"M": {"k": {"S": "sent"}, "t": {"N": str(T0)}, "m": {"S": "m-2"}}},
                    ]
                },
            },
        },
    }
    assert change_of(short).new_events == (("delivered", "b.example"), ("sent", None))


def test_the_aggregators_report_writes_spread_over_keys_of_their_own():
    # One key took every report ADD of a campaign: ~2 write units per recipient (bench-scale),
    # a ceiling of ~500 recipients/s. A campaign's 256 ledger keys now write to many keys.
    from collections import Counter

    from sendonce.adapters.dynamodb.report_aggregates import aggregator_writer, increment_updates, partitions
    from sendonce.domain.campaigns.report_data import ReportIncrements

    writers = Counter(aggregator_writer(f"ledger#c1#{k}") for k in range(256))
    # Dealt, not hashed: each of the 64 keys gets exactly 4 of the 256 ledger shards (a hash
    # gave the hottest up to twice the mean: 0.102 units per recipient in bench-scale).
    assert len(writers) == 64 and set(writers.values()) == {4}
    updates = increment_updates("t", "c1", "w7", ReportIncrements(outcomes=Counter({(0, "sent"): 3})))
    assert {u["Update"]["Key"]["pk"]["S"] for u in updates} == {"report#c1#w7"}
    assert "report#c1#w7" in partitions("c1") and "report#c1" in partitions("c1")  # marks, older items


def test_feedback_is_summed_per_mailbox_provider_group_before_the_top_domains_are_kept():
    # Issue 32, item 6: every domain counted, folded into its group (the page's table).
    by_domain = {f"d{i}.example": {"delivered": 10, "bounced": 1} for i in range(30)}
    by_domain |= {"gmail.com": {"delivered": 50, "complained": 2}, "hotmail.co.uk": {"bounced": 4}}
    campaign = SimpleNamespace(campaign_id="c1", name="n", subject="s", provider="ses", delivery_mode="single")

    report = build_report(
        campaign=campaign,
        status=status(sent=3),
        aggregates=ReportAggregates(feedback_by_domain=by_domain),
        now_ms=T0,
    )

    assert report.feedback_by_group == {
        "google": {"delivered": 50, "complained": 2},
        "microsoft": {"bounced": 4},
        "other": {"delivered": 300, "bounced": 30},  # all 30, not only the top domains
    }
    html = render(report)
    assert '<td data-group="google-complained">2</td>' in html and '<td data-group="other-delivered">300</td>' in html


def test_a_tracking_campaigns_report_counts_unique_opens_and_clicks_and_says_opens_are_an_estimate():
    from sendonce.domain.models import Tracking

    tracked = SimpleNamespace(
        campaign_id="c1", name="n", subject="s", provider="ses", delivery_mode="single", tracking=Tracking(opens=True)
    )
    aggregates = ReportAggregates(
        outcomes_per_minute=[Bucket(T0, {"sent": 10})],
        engagement_per_minute=[Bucket(T0, {"opened": 3, "clicked": 1}), Bucket(T0 + 5 * MINUTE_MS, {"opened": 1})],
    )

    report = build_report(campaign=tracked, status=status(sent=10), aggregates=aggregates, now_ms=T0)

    assert report.engagement == {"opened": 4}  # clicks are not tracked: not shown, whatever was kept
    assert [b.counts.get("opened") for b in report.engagement_over_time] == [3, 1]
    page = render(report)
    assert 'data-engagement="opened">4<' in page and "(40.0% of those sent)" in page
    assert "opens are an estimate" in page and 'data-engagement="clicked"' not in page


def test_an_ab_campaign_awaiting_its_winner_says_how_it_will_be_picked():
    from sendonce.domain.campaigns.report_data import REST
    from sendonce.domain.campaigns.variants import AbTest, VariantFigures

    campaign = SimpleNamespace(
        campaign_id="ab",
        name="n",
        subject="s",
        provider="ses",
        delivery_mode="single",
        tracking=None,
        ab_test=AbTest(variants=("A", "B", "C"), share=0.3, pick_by="clicks", after_s="2d"),
        decision=None,
    )
    aggregates = ReportAggregates(variants={"A": VariantFigures(sent=7, clicked=1), REST: VariantFigures()})

    page = render(build_report(campaign=campaign, status=status(sent=7), aggregates=aggregates, now_ms=T0))

    assert 'data-variant="A-sent">7<' in page and 'data-variant="C-sent">0<' in page
    assert 'data-variant="rest-sent">0<' in page and "14.3%" in page  # 1 click of 7 sent
    assert "Awaiting the winner" in page and "30% of the recipients" in page and "2d after the start" in page
    assert "unique clicks per email sent" in page and "sendonce campaign pick ab VARIANT" in page
    assert 'class="winner"' not in page and "tracks neither opens nor clicks: its figures pick no winner" in page
    plain = render(
        build_report(
            campaign=SimpleNamespace(**{**campaign.__dict__, "ab_test": None}),
            status=status(),
            aggregates=aggregates,
            now_ms=T0,
        )
    )
    assert 'id="variants"' not in plain
