"""`sendonce cost`: the arithmetic, checked against sums done by hand. The DynamoDB writers'
figures here are a made-up capture (`SYNTHETIC`), so that the sums stay by hand whatever
bench-scale measures; tests/unit/test_cost_model.py holds the model to the real capture."""

from __future__ import annotations

import functools
import json

import pytest
from click.testing import CliRunner

from sendonce_ops.cost import (
    PRICE_SOURCES,
    PRICES,
    Assumptions,
    Measured,
    campaign_cost,
    cost,
    resolve_plan,
    seconds_per_message,
)

# Write units per writer, as bench-scale's capture holds them (measured.json's shape).
SYNTHETIC = Measured.from_dict(
    {
        "how": {"provider": "resend", "mode": "batch", "measured_on": "synthetic"},
        "campaigns": [
            {"recipients": 200, "write_units_per_recipient": 15.0},
            {"recipients": 10_000, "write_units_per_recipient": 14.0},
        ],
        "fit": {
            "write_units": {
                "api: batch records": {"fixed": 0.0, "per_recipient": 0.2},
                "api: campaign items": {"fixed": 10.0, "per_recipient": 0.01},
                "consumer: ledger claims and settles": {"fixed": 0.0, "per_recipient": 4.0},
                "consumer: send groups": {"fixed": 0.0, "per_recipient": 0.1},
                "consumer: campaign item": {"fixed": 0.0, "per_recipient": 0.01},
                "consumer: limiter": {"fixed": 0.0, "per_recipient": 0.02},
                "events: ledger annotations": {"fixed": 0.0, "per_recipient": 4.0},
                "aggregator: counters": {"fixed": 0.0, "per_recipient": 2.5},
                "aggregator: report aggregates": {"fixed": 0.0, "per_recipient": 2.5},
                "aggregator: published markers": {"fixed": 0.0, "per_recipient": 1.0},
                "aggregator: campaign item": {"fixed": 1.0, "per_recipient": 0.0},
            },
            "dynamodb_requests": {"consumer": {"fixed": 4.0, "per_recipient": 0.5}},
            "provider_events_per_recipient": 2.0,
        },
        # One provider request per recipient: the writers of its sending, events and aggregator
        "one_by_one": {
            "recipients": 200,
            "provider_events": 400,
            "writers": {
                "consumer: ledger claims and settles": {"write_units_per_recipient": 2.0},
                "consumer: limiter": {"write_units_per_recipient": 1.7},
                "consumer: campaign item": {"write_units_per_recipient": 0.01},
                "events: ledger annotations": {"write_units_per_recipient": 3.5},
                "aggregator: counters": {"write_units_per_recipient": 3.0},
                "aggregator: report aggregates": {"write_units_per_recipient": 4.0},
                "aggregator: published markers": {"write_units_per_recipient": 1.0},
                "aggregator: campaign item": {"write_units_per_recipient": 0.005},
            },
        },
        # bench-scale --tracking: write units per first open or click
        "tracking": {
            "write_units_per_first": {
                "events: first opens and clicks": 2.0,
                "events: unique opens and clicks per minute": 3.0,
            }
        },
    }
)
campaign_cost = functools.partial(campaign_cost, measured=SYNTHETIC)


def item(result, text: str):
    matches = [i for i in result.items if text in i.item]
    assert len(matches) == 1, [i.item for i in result.items]
    return matches[0]


def test_list_prices_are_the_documented_ones():
    assert PRICES.lambda_gb_second_arm64 == 0.0000133334
    assert PRICES.lambda_request * 1e6 == pytest.approx(0.20)
    assert PRICES.dynamodb_write_request_unit * 1e6 == pytest.approx(0.625)
    assert PRICES.dynamodb_read_request_unit * 1e6 == pytest.approx(0.125)
    assert PRICES.sqs_request * 1e6 == pytest.approx(0.40)
    assert resolve_plan("ses", "none").per_1000 == pytest.approx(0.10)


def test_the_seed_campaign_on_resend_single_mode():
    # Given 12,480 recipients: 125 messages of 100 (10,200-byte bodies)
    result = campaign_cost(12_480, "resend", "single")

    assert result.messages == 125
    # Paced: 2 invocations share 4 emails/s (the default team's 5 less the reserve), so a
    # message of 100 takes 50 s (> 13 rounds x 135 ms + 50 ms)
    assert result.seconds_per_message == pytest.approx(50.0)
    assert item(result, "invocations").quantity == 125
    assert item(result, "duration").quantity == pytest.approx(125 * 50.0 * 0.5)  # GB-s at 512 MB
    # One by one: the writes per recipient the one-by-one campaign measured; the publish's
    # writers from the batch-mode campaigns' line (fixed + per recipient)
    assert item(result, "ledger claims and settles").quantity == pytest.approx(12_480 * 2.0)
    assert item(result, "consumer: limiter").quantity == pytest.approx(12_480 * 1.7)
    assert item(result, "consumer: campaign item").quantity == pytest.approx(12_480 * 0.01)
    assert item(result, "aggregator: report aggregates").quantity == pytest.approx(12_480 * 4.0)
    assert not [i for i in result.items if "send groups" in i.item]  # batch mode's only
    assert item(result, "api: batch records").quantity == pytest.approx(12_480 * 0.2)
    assert item(result, "api: campaign items").quantity == pytest.approx(10 + 12_480 * 0.01)
    # A write once a campaign (it did not grow with the recipients) stays one, in either mode
    assert item(result, "aggregator: campaign item").quantity == pytest.approx(1.0)
    # 12 SendMessageBatch of 10 x 10,200 B = 2 chunks of 64 KB each, then one of 5 messages = 1 chunk
    assert item(result, "SendMessageBatch").quantity == 12 * 2 + 1
    assert item(result, "ReceiveMessage").quantity == 125
    assert item(result, "DeleteMessageBatch").quantity == 125
    assert not [i for i in result.items if i.service == "SES"]

    ledger_wru = 12_480 * (2.0 + 0.2 + 3.0 + 4.0 + 1.0)  # the ledger's own and the aggregator's
    assert result.share("ledger") == pytest.approx(ledger_wru * 0.625e-6)
    events = 12_480 * 2.001 / 2.0  # the measured events' units, scaled to 2.001 events per email
    assert result.share("events") == pytest.approx(
        events * 3.5 * 0.625e-6 + sum(i.cost for i in result.items if i.service != "DynamoDB" and i.share == "events")
    )
    assert result.aws_total == pytest.approx(sum(i.quantity * i.unit_price for i in result.items))
    assert result.aws_total == pytest.approx(
        sum(result.share(s) for s in ("ledger", "limiter", "pipeline", "events", "observability"))
    )


def test_ses_pays_per_email_and_one_more_ledger_write():
    result = campaign_cost(1_000_000, "ses", "single")

    assert item(result, "emails (plan none)").cost == pytest.approx(100.0)  # $0.10 per 1,000
    # A provider with no idempotency key: mark_in_flight too, 3 conditional writes for 2
    ledger = item(result, "ledger claims and settles")
    assert ledger.quantity == pytest.approx(2.0 * 1.5 * 1_000_000)
    assert [w.basis for w in result.writers if w.writer.name == ledger.item.removeprefix("writes: ")][0].endswith(
        "x1.5: 3 conditional writes per recipient"
    )
    assert result.seconds_per_message == pytest.approx(100 * 2 / 14)  # SES's default 14/s shared by 2


def test_batch_mode_trades_requests_for_transactional_write_units():
    result = campaign_cost(1_000_000, "resend", "batch")

    assert result.messages == 10_000
    assert item(result, "ledger claims and settles").quantity == 1_000_000 * 4.0  # as the capture measured
    assert item(result, "BatchGetItem").quantity == 1_000_000
    assert item(result, "send groups").quantity == pytest.approx(1_000_000 * 0.1)
    assert item(result, "consumer: limiter").quantity == pytest.approx(1_000_000 * 0.02)
    assert result.write_units == pytest.approx(11 + 1_000_000 * (14.34 + 4.0 * (2.001 / 2.0 - 1)))
    # One request per message at 4 requests/s shared by 2 invocations: 0.5 s, longer than the path
    assert result.seconds_per_message == pytest.approx(0.5)


def test_ledger_time_is_charged_only_when_the_send_rate_does_not_hide_it():
    paced = campaign_cost(10_000, "resend", "single")
    free = campaign_cost(10_000, "resend", "single", assumptions=Assumptions(send_rate=1000.0))

    assert not [i for i in paced.items if "added by ledger" in i.item]
    # 13 rounds of 8 sends, 2 ledger requests of 5 ms each per send: 0.13 s more per message
    assert seconds_per_message("resend", "single", Assumptions(send_rate=1000.0)) == pytest.approx(13 * 0.135 + 0.05)
    assert item(free, "added by ledger").quantity == pytest.approx(100 * 0.13 * 0.5)


def test_storage_is_kept_every_month():
    result = campaign_cost(1_000_000, "resend", "single")

    ledger_bytes = 1_000_000 * (1000 + 100)
    records_bytes = 10_000 * (10_200 + 100)
    assert result.storage_gb == pytest.approx((ledger_bytes + records_bytes) / 1024**3)
    assert result.storage_per_month == pytest.approx(result.storage_gb * 0.25)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, "ses"), "at least 1"),
        ((10, "smtp"), "provider"),
        ((10, "ses", "batch"), "needs a provider that sends batches \\(resend\\)"),
        ((10, "resend", "bulk"), "mode"),
    ],
)
def test_bad_inputs_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        campaign_cost(*args)


def test_the_command_prints_json_with_the_same_figures():
    outcome = CliRunner().invoke(cost, ["--recipients", "12480", "--provider", "resend", "--json"])

    assert outcome.exit_code == 0, outcome.output
    data = json.loads(outcome.output)
    shipped = campaign_cost(12_480, "resend", measured=Measured.load())  # the command's figures
    assert data["aws_total"] == pytest.approx(shipped.aws_total)
    assert data["dynamodb_write_units"] == pytest.approx(shipped.write_units)
    assert data["messages"] == 125 and data["mode"] == "single"
    assert "not included" in data["provider_note"]


def test_the_command_refuses_batch_mode_on_ses_and_prints_text_otherwise():
    refused = CliRunner().invoke(cost, ["--recipients", "10", "--provider", "ses", "--mode", "batch"])
    text = CliRunner().invoke(cost, ["--recipients", "10", "--provider", "ses"])

    assert refused.exit_code == 2 and "needs a provider that sends batches (resend)" in refused.output
    assert text.exit_code == 0 and "AWS total" in text.output and "ledger's share" in text.output


def test_every_ses_event_is_an_eventbridge_event_and_an_events_invocation():
    # Given 1,000 SES emails, 2 % bouncing, 0.1 % complaints, no open/click tracking
    result = campaign_cost(1_000, "ses")

    events = 1_000 * (2 + 0.001)  # Send, then Delivery or Bounce, plus Complaints
    assert item(result, "SES events").quantity == pytest.approx(events)
    assert item(result, "SES events").unit_price == PRICES.eventbridge_event
    assert item(result, "one invocation per event").quantity == pytest.approx(events)
    assert item(result, "events function: run time").quantity == pytest.approx(events * 0.03 * 0.25)  # 256 MB
    # The events function's writes: per event as measured one by one (2 events per recipient there)
    assert item(result, "events: ledger annotations").quantity == pytest.approx(events * 3.5 / 2.0)
    # A counted campaign's brakes read its totals: its sent events write no 'sent' shard.
    assert not [i for i in result.items if "events: sent shards" in i.item]
    assert not [i for i in result.items if i.service == "API Gateway"]
    assert result.share("events") == pytest.approx(sum(i.cost for i in result.items if i.share == "events"))


def test_resend_webhooks_are_api_gateway_requests_and_tracking_adds_events():
    plain = campaign_cost(10_000, "resend")
    tracked = campaign_cost(10_000, "resend", assumptions=Assumptions(open_rate=0.3, click_rate=0.03))

    assert item(plain, "webhook requests").quantity == pytest.approx(10_000 * 2.001)
    assert item(plain, "webhook requests").unit_price == pytest.approx(1.00e-6)
    assert item(tracked, "webhook requests").quantity == pytest.approx(10_000 * 2.331)
    assert not [i for i in plain.items if i.service == "EventBridge"]


def test_tracking_prices_the_first_opens_and_clicks_and_leaves_the_ledger_as_it_is():
    # Given bench-scale --tracking's figures in the capture (write units per first open or click)
    plain = campaign_cost(10_000, "resend")
    tracked = campaign_cost(10_000, "resend", assumptions=Assumptions(open_rate=0.3, click_rate=0.03))
    per_first = SYNTHETIC.per_first
    assert per_first == {"events: first opens and clicks": 2.0, "events: unique opens and clicks per minute": 3.0}

    def units(result, name):
        return next(w for w in result.writers if w.writer.name == name)

    # Then each engagement writer costs its units per first x 0.33 firsts an email (an upper
    # bound: every open and click taken as a first), and nothing without tracking
    for name, units_per_first in per_first.items():
        assert units(tracked, name).write_units == pytest.approx(10_000 * 0.33 * units_per_first)
        assert "upper bound" in units(tracked, name).basis
        assert units(plain, name).write_units == 0 and units(plain, name).basis == "tracking off: none"
    # and opens and clicks are never ledger annotations: those stay as without tracking
    annotations = "events: ledger annotations"
    assert units(tracked, annotations).write_units == pytest.approx(units(plain, annotations).write_units)
    assert tracked.write_units == pytest.approx(plain.write_units + 10_000 * 0.33 * sum(per_first.values()))


def test_logs_and_emf_metrics_are_charged_from_the_bytes_each_invocation_writes():
    result = campaign_cost(12_480, "resend")

    events = 12_480 * 2.001
    log_bytes = 125 * (300 + 565 + 250) + events * (300 + 500 + 240)
    assert item(result, "log ingestion").quantity == pytest.approx(log_bytes / 1024**3)
    assert item(result, "log ingestion").unit_price == 0.50
    assert item(result, "log storage").quantity == pytest.approx(log_bytes / 1024**3)
    # 125 messages x 50 s / 2 invocations = 52 min: one hour of 8 metrics out of 730
    metrics = item(result, "EMF custom metrics")
    assert "1 h" in metrics.item and metrics.quantity == pytest.approx(8 / 730)
    assert result.share("observability") > 0


def test_the_ses_plan_sets_the_price_and_an_unconfirmed_plan_needs_its_figures():
    pro = resolve_plan("ses", "pro", per_1000=0.05, monthly_fee=20.0)
    result = campaign_cost(100_000, "ses", plan=pro)

    assert item(result, "emails (plan pro)").cost == pytest.approx(5.0)
    assert "20.00 a month" in result.provider_note and "given by the caller" in result.provider_note
    assert resolve_plan("ses", "none").per_1000 == 0.10
    for name in ("essentials", "pro", "enterprise"):
        with pytest.raises(ValueError, match="could not be confirmed"):
            resolve_plan("ses", name)
    with pytest.raises(ValueError, match="must be one of"):
        resolve_plan("ses", "gold")


def test_the_command_takes_the_ses_plan_and_refuses_an_unpriced_one():
    refused = CliRunner().invoke(cost, ["--recipients", "10", "--provider", "ses", "--ses-plan", "essentials"])
    priced = CliRunner().invoke(
        cost,
        [
            "--recipients",
            "1000",
            "--provider",
            "ses",
            "--ses-plan",
            "essentials",
            "--ses-price-per-1000",
            "0.08",
            "--json",
        ],
    )

    assert refused.exit_code == 2 and "--ses-price-per-1000" in refused.output
    assert priced.exit_code == 0, priced.output
    data = json.loads(priced.output)
    assert data["ses_plan"]["name"] == "essentials" and data["ses_plan"]["per_1000"] == 0.08
    assert [i for i in data["items"] if i["item"] == "emails (plan essentials)"][0]["cost"] == pytest.approx(0.08)


def test_every_price_has_a_dated_source_and_the_docs_table_lists_each_one():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text()
    priced = {f for f in PRICES.__dataclass_fields__ if f != "as_of"}
    assert priced <= {s.price for s in PRICE_SOURCES}
    for source in PRICE_SOURCES:
        assert source.source and source.as_of
        assert f"`{source.price}`" in doc, source.price
