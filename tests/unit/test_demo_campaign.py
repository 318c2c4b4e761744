"""The demo's campaign spreads its ledger over fewer keys than a deployment's default, and
says so: ample for its rate, and 16 times fewer queries and position writes on moto."""

from __future__ import annotations

from sendonce.domain.sending.shards import DEFAULT_LEDGER_SHARDS
from sendonce_local.demo.campaign import DEMO_LEDGER_SHARDS, demo_campaign


def test_the_demo_campaign_has_16_ledger_shards_and_a_deployment_keeps_256():
    campaign = demo_campaign("incident-7-sendonce", "resend", "batch")
    assert (campaign.ledger_shards, DEMO_LEDGER_SHARDS, DEFAULT_LEDGER_SHARDS) == (16, 16, 256)
