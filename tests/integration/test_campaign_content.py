"""A campaign's content lives in its own item, apart from its small, often updated state
(issue 17): written once at creation, read once per campaign by a consumer process; a
campaign created by the previous version (content on the state item) keeps working. Its share
of the provider's rate (issue 31) is stored on the state item."""

from __future__ import annotations

import time

import boto3
import pytest

from bench.capacity import item_size, write_units
from sendonce.domain.models import Campaign, CampaignState, Content
from tests.model.world import Clock, Rig

pytestmark = pytest.mark.integration
BIG_HTML = "<p>Hi {{ name }}</p>" + "<p>" + "spring collection " * 3000 + "</p>"  # ~54 KB


class ContentReads:
    def __init__(self, client):
        self.count = 0
        client.meta.events.register("provide-client-params.dynamodb.GetItem", self._count)

    def _count(self, params, **_):
        self.count += params["Key"]["sk"]["S"] == "content" if "sk" in params["Key"] else 0


@pytest.fixture
def rig(aws_env):
    client = boto3.client("dynamodb")
    rig = Rig(client, provider="resend", mode="single", clock=Clock(int(time.time() * 1000)), recipients=3)
    rig.client = client
    return rig


def _item(rig, campaign_id: str, sk: str) -> dict | None:
    table = rig.store._table
    return rig.client.get_item(TableName=table, Key={"pk": {"S": f"campaign#{campaign_id}"}, "sk": {"S": sk}}).get(
        "Item"
    )


def test_the_content_is_written_apart_and_read_once_per_campaign_by_a_consumer(rig):
    # Given a campaign with a 54 KB template
    rig.operator.create(
        Campaign(
            campaign_id="big",
            name="big",
            provider="resend",
            sender="news@example.com",
            content=Content(subject="Hi {{ name }}", html=BIG_HTML, text="Hello {{ name }}"),
        )
    )
    state, content = _item(rig, "big", "campaign"), _item(rig, "big", "content")
    # Then its state item is small (one write unit per update) and the content item holds the templates
    assert "content" not in state and state["subject"]["S"] == "Hi {{ name }}"
    assert item_size(state) < 1024 and write_units(item_size(state)) == 1
    assert item_size(content) > 50_000 and content["content"]["M"]["html"]["S"] == BIG_HTML
    assert rig.store.get("big").content is None and rig.store.content("big").html == BIG_HTML
    # When three messages of it are delivered by one consumer process
    reads = ContentReads(rig.client)
    rig.operator.publish("big", rig.people, batch_size=1)
    rig.drain()
    # Then every recipient was sent, and the content read once
    assert sum(n for (c, _), n in rig.provider.accepted.items() if c == "big") == 3
    assert reads.count == 1
    assert rig.store.get("big").state is CampaignState.COMPLETED


def test_a_campaign_created_with_its_content_on_the_state_item_keeps_working(rig):
    # Given a campaign item as the previous version wrote it: content on the state item, no content item
    legacy = {
        "pk": {"S": "campaign#old"},
        "sk": {"S": "campaign"},
        "campaign_id": {"S": "old"},
        "name": {"S": "old"},
        "provider": {"S": "resend"},
        "sender": {"S": "news@example.com"},
        "content": {"M": {"subject": {"S": "Hi {{ name }}"}, "text": {"S": "Hello {{ name }}"}}},
        "state": {"S": "draft"},
        "delivery_mode": {"S": "single"},
        "open_batches": {"N": "0"},
        "version": {"N": "0"},
    }
    rig.client.put_item(TableName=rig.store._table, Item=legacy)
    assert _item(rig, "old", "content") is None
    assert rig.store.content("old").text == "Hello {{ name }}" and rig.store.get("old").subject == "Hi {{ name }}"
    # Written before campaigns shared the rate: an equal, uncapped share
    old = rig.store.get("old")
    assert (old.weight, old.priority, old.max_rate) == (1, "normal", None)
    # When it is published and delivered
    rig.operator.publish("old", rig.people, batch_size=1)
    rig.drain()
    # Then it sends and completes as before
    assert sum(n for (c, _), n in rig.provider.accepted.items() if c == "old") == 3
    assert rig.store.get("old").state is CampaignState.COMPLETED


def test_a_campaigns_share_of_the_rate_is_stored_with_it_and_read_back(rig):
    # Given a campaign with a weight, a priority and a fractional max_rate (DynamoDB takes no float)
    shares = {"weight": 7, "priority": "high", "max_rate": 2.5}
    rig.operator.create(
        Campaign(
            campaign_id="shared",
            name="shared",
            provider="resend",
            sender="news@example.com",
            content=Content(subject="Hi {{ name }}", text="Hello {{ name }}"),
            **shares,
        )
    )

    # Then the state item holds them as DynamoDB types, and every read gives them back
    state = _item(rig, "shared", "campaign")
    assert (state["weight"], state["priority"], state["max_rate"]) == ({"N": "7"}, {"S": "high"}, {"N": "2.5"})
    read = rig.store.get("shared")
    listed = next(c for c in rig.store.list(None) if c.campaign_id == "shared")
    assert {k: getattr(read, k) for k in shares} == {k: getattr(listed, k) for k in shares} == shares
