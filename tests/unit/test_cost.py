"""`sendonce cost`: the arithmetic, checked against sums done by hand."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sendonce_ops.cost import PRICES, Assumptions, campaign_cost, cost, seconds_per_message


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
    assert PRICES.ses_email * 1000 == pytest.approx(0.10)


def test_the_seed_campaign_on_resend_single_mode():
    # Given 12,480 recipients: 125 messages of 100 (10,200-byte bodies)
    result = campaign_cost(12_480, "resend", "single")

    assert result.messages == 125
    # Paced: 2 invocations share 10 emails/s, so a message of 100 takes 20 s (> 13 rounds x 135 ms + 50 ms)
    assert result.seconds_per_message == pytest.approx(20.0)
    assert item(result, "invocations").quantity == 125
    assert item(result, "duration").quantity == pytest.approx(125 * 20.0 * 0.5)  # GB-s at 512 MB
    assert item(result, "ledger: 2 conditional writes").quantity == 24_960
    assert item(result, "limiter reservations").quantity == pytest.approx(12_480 * 1.7)
    assert item(result, "publish transaction").quantity == 125 * (2 * 10 + 2)  # 10 KB record + campaign counter, x2
    assert item(result, "marked enqueued").quantity == 125 * 10
    # 12 SendMessageBatch of 10 x 10,200 B = 2 chunks of 64 KB each, then one of 5 messages = 1 chunk
    assert item(result, "SendMessageBatch").quantity == 12 * 2 + 1
    assert item(result, "ReceiveMessage").quantity == 125
    assert item(result, "DeleteMessageBatch").quantity == 125
    assert not [i for i in result.items if i.service == "SES"]

    ledger_wru = 24_960 + 125 * 22 + 125 * 10
    assert result.share("ledger") == pytest.approx(ledger_wru * 0.625e-6)
    assert result.aws_total == pytest.approx(sum(i.quantity * i.unit_price for i in result.items))
    assert result.aws_total == pytest.approx(result.share("ledger") + result.share("limiter") + result.share("pipeline"))


def test_ses_pays_per_email_and_one_more_ledger_write():
    result = campaign_cost(1_000_000, "ses", "single")

    assert item(result, "emails").cost == pytest.approx(100.0)  # $0.10 per 1,000
    assert item(result, "ledger: 3 conditional writes").quantity == 3_000_000
    assert result.seconds_per_message == pytest.approx(100 * 2 / 14)  # SES's default 14/s shared by 2


def test_batch_mode_trades_requests_for_transactional_write_units():
    result = campaign_cost(1_000_000, "resend", "batch")

    assert result.messages == 10_000
    assert item(result, "transactions").quantity == 1_000_000 * 2 * 2  # 2 transactions x 2 units per item
    assert item(result, "BatchGetItem").quantity == 1_000_000
    assert item(result, "send-group records").quantity == 10_000 * 10
    assert item(result, "limiter reservations").quantity == 10_000 * 2.0
    # One request per message at 10 requests/s shared by 2 invocations: 0.2 s, as long as the path
    assert result.seconds_per_message == pytest.approx(0.2)


def test_ledger_time_is_charged_only_when_the_send_rate_does_not_hide_it():
    paced = campaign_cost(10_000, "resend", "single")
    free = campaign_cost(10_000, "resend", "single", assumptions=Assumptions(send_rate=1000.0))

    assert not [i for i in paced.items if "added by ledger" in i.item]
    # 13 rounds of 8 sends, 2 ledger requests of 5 ms each per send: 0.13 s more per message
    assert seconds_per_message("resend", "single", Assumptions(send_rate=1000.0)) == pytest.approx(13 * 0.135 + 0.05)
    assert item(free, "added by ledger").quantity == pytest.approx(100 * 0.13 * 0.5)


def test_storage_is_kept_every_month():
    result = campaign_cost(1_000_000, "resend", "single")

    ledger_bytes = 1_000_000 * (700 + 100)
    records_bytes = 10_000 * (10_200 + 100)
    assert result.storage_gb == pytest.approx((ledger_bytes + records_bytes) / 1024**3)
    assert result.storage_per_month == pytest.approx(result.storage_gb * 0.25)


@pytest.mark.parametrize(
    ("args", "message"),
    [((0, "ses"), "at least 1"), ((10, "smtp"), "provider"), ((10, "ses", "batch"), "needs Resend"),
     ((10, "resend", "bulk"), "mode")],
)
def test_bad_inputs_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        campaign_cost(*args)


def test_the_command_prints_json_with_the_same_figures():
    outcome = CliRunner().invoke(cost, ["--recipients", "12480", "--provider", "resend", "--json"])

    assert outcome.exit_code == 0, outcome.output
    data = json.loads(outcome.output)
    assert data["aws_total"] == pytest.approx(campaign_cost(12_480, "resend").aws_total)
    assert data["messages"] == 125 and data["mode"] == "single"
    assert "not included" in data["provider_note"]


def test_the_command_refuses_batch_mode_on_ses_and_prints_text_otherwise():
    refused = CliRunner().invoke(cost, ["--recipients", "10", "--provider", "ses", "--mode", "batch"])
    text = CliRunner().invoke(cost, ["--recipients", "10", "--provider", "ses"])

    assert refused.exit_code == 2 and "needs Resend" in refused.output
    assert text.exit_code == 0 and "AWS total" in text.output and "ledger's share" in text.output
