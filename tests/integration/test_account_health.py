"""The SES account's health against moto's server (issue 32, item 4), through the real parts:
the account health handler built by its wiring (boto3's SES v2 GetAccount, answered by the
local stand-in, sendonce_local.moto_patches.ses_account), the DynamoDB campaign store, the
CLI's `campaign status`, and the consumer whose sends moto refuses while the account is
stopped."""

from __future__ import annotations

import boto3
import pytest

from sendonce.domain.deliverability.account_health import AUTOMATIC_ACCOUNT
from sendonce.domain.models import CampaignState
from sendonce.handlers import account_health
from sendonce.settings import AccountHealthSettings
from sendonce.wiring.account_health import build_account_health_service
from sendonce.wiring.clients import clients
from sendonce_local.moto_server import set_ses_account
from tests.integration.operator_helpers import as_json, lambda_context, sendonce

pytestmark = pytest.mark.integration


@pytest.fixture
def check(system):
    """One poll of the deployed handler, as its schedule fires it."""
    service = build_account_health_service(
        AccountHealthSettings(campaigns_table=system.resources.campaigns_table, provider="ses"), clients()
    )
    yield lambda: account_health.lambda_handler({"source": "aws.events"}, lambda_context(), service=service)
    set_ses_account(boto3.Session(), sending_enabled=True, enforcement_status="HEALTHY")


def sending(system, campaign_id: str, provider: str, recipients: int = 3) -> None:
    system.campaign(campaign_id, provider=provider)
    system.operator.publish(campaign_id, system.recipients(recipients))
    assert system.operator.get(campaign_id).state is CampaignState.SENDING


def test_a_disabled_account_has_every_sending_ses_campaign_paused_within_one_poll(system, check):
    # Given two SES campaigns and a Resend one sending (no consumer runs yet)
    sending(system, "ses-a", "ses")
    sending(system, "ses-b", "ses")
    sending(system, "resend-a", "resend")
    assert check()["verdict"] == "healthy"
    # When the SES account's sending is disabled, and the check polls once
    set_ses_account(boto3.Session(), sending_enabled=False)
    answer = check()
    # Then both SES campaigns are paused, with the reason `campaign status` shows
    assert (answer["verdict"], sorted(answer["paused"])) == ("stopped", ["ses-a", "ses-b"])
    status = as_json(sendonce(system, "campaign", "status", "ses-a", "--json"))
    assert (status["state"], status["state_reason"]) == ("paused", "ses account: sending disabled")
    assert system.operator.get("ses-b").state_changed_by == AUTOMATIC_ACCOUNT
    assert system.operator.get("resend-a").state is CampaignState.SENDING
    # And when the account can send again, the record says when; nothing resumes by itself
    set_ses_account(boto3.Session(), sending_enabled=True)
    answer = check()
    assert answer["came_back"] and answer["record"]["back_at_ms"] >= answer["record"]["stopped_at_ms"]
    assert system.operator.get("ses-a").state is CampaignState.PAUSED


def test_probation_pauses_nothing_and_shutdown_pauses(system, check):
    sending(system, "ses-a", "ses")
    set_ses_account(boto3.Session(), enforcement_status="PROBATION")
    assert (check()["verdict"], system.operator.get("ses-a").state) == ("probation", CampaignState.SENDING)

    set_ses_account(boto3.Session(), enforcement_status="SHUTDOWN")

    assert check()["paused"] == ["ses-a"]
    assert system.operator.get("ses-a").state_reason == "ses account: enforcement status SHUTDOWN"


def test_a_send_refused_for_the_account_halts_its_campaign_and_resume_sends_the_rest_once(system, check):
    # Given an SES campaign published while the account cannot send (before any poll)
    set_ses_account(boto3.Session(), sending_enabled=False)
    sending(system, "ses-a", "ses", recipients=4)
    # When a consumer takes its batch: SES refuses with SendingPausedException
    system.poller(batch_size=10).run_until_idle()
    # Then the campaign is halted with the provider's answer, nobody sent, nobody failed
    campaign = system.operator.get("ses-a")
    assert campaign.state is CampaignState.PAUSED and "SendingPausedException" in (campaign.state_reason or "")
    assert system.deliveries("ses") == {}
    # And once the account can send, an operator's resume sends each recipient exactly once
    set_ses_account(boto3.Session(), sending_enabled=True)
    system.operator.resume("ses-a")
    system.poller(batch_size=10).run_until_idle()
    assert sorted(system.deliveries("ses").values()) == [1, 1, 1, 1]
