"""A delivered recipient's ledger item stays under 1 KB through its `sent` and `delivered`
events, so that each event's annotation costs one write unit, not two (issue 35). Through
the real consumer in both modes, the local Resend server's signed webhooks and the events
function, against moto; sizes by DynamoDB's rules (sendonce_local/write_units.py). The
campaign id (in the item's key and its send group's key) is a realistic 21 characters and
the recipients' domain 20."""

from __future__ import annotations

import boto3
import pytest

from sendonce.adapters.dynamodb.ledger_keys import LedgerKeys
from sendonce.domain.models import DeliveryKey
from sendonce_local.write_units import KB, item_size

pytestmark = pytest.mark.integration

CAMPAIGN = "spring-launch-2026-eu"


def raw_item(system, recipient_id: str) -> dict:
    key = LedgerKeys(system.shards_of).key(DeliveryKey(campaign_id=CAMPAIGN, recipient_id=recipient_id))
    return boto3.client("dynamodb").get_item(TableName=system.resources.ledger_table, Key=key, ConsistentRead=True)[
        "Item"
    ]


@pytest.mark.parametrize("mode", ["single", "batch"])
def test_a_delivered_recipients_item_stays_under_one_kilobyte(system, deliverability, mode):
    system.campaign(CAMPAIGN, delivery_mode=mode)
    system.operator.publish(CAMPAIGN, system.recipients(4))
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    assert system.resend.wait_for_webhooks(30)

    for rid in ("r0", "r1", "r2", "r3"):
        item = raw_item(system, rid)
        recorded = deliverability.ledger_item(CAMPAIGN, rid)
        assert recorded["last_event"] == "delivered" and len(recorded["provider_events"]) == 2
        sizes = {name: item_size({name: value}) for name, value in item.items()}
        assert item_size(item) < KB, sorted(sizes.items(), key=lambda kv: -kv[1])
