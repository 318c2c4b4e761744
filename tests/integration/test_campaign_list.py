"""Listing campaigns: the campaigns table's sparse index of campaign items (never a Scan,
never the ledger), over moto's server, through the store, the HTTP API and the CLI."""

from __future__ import annotations

import json

import boto3
import pytest

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.domain.models import CampaignState
from sendonce.handlers import api
from tests.integration.operator_helpers import OPERATOR_ARN, api_event, as_json, lambda_context, sendonce

pytestmark = pytest.mark.integration


def call(system, path: str) -> tuple[int, dict]:
    response = api.lambda_handler(api_event("GET", path, None, OPERATOR_ARN), lambda_context(), service=system.operator)
    return response["statusCode"], json.loads(response["body"])


def test_the_store_lists_every_campaign_across_index_pages_and_only_campaign_items(system):
    # Given five campaigns, two with published batches (more items under the same pk)
    for i in (4, 0, 3, 1, 2):
        system.campaign(f"c{i}")
    system.operator.publish("c1", system.recipients(3))
    system.operator.pause("c1")
    system.operator.publish("c3", system.recipients(250))
    # And the limiter's slots in the same table
    client = boto3.client("dynamodb")
    for second in range(3):
        client.put_item(
            TableName=system.resources.campaigns_table,
            Item={"pk": {"S": "limiter#resend"}, "sk": {"S": f"slot#{second}"}, "used": {"N": "5"}},
        )
    operations: list[str] = []
    client.meta.events.register("provide-client-params.dynamodb", lambda model, **_: operations.append(model.name))
    # When the store reads two keys per index request (so the answer spans many pages)
    store = DynamoDBCampaignStore(client=client, table_name=system.resources.campaigns_table, page_size=2)

    every = [c.campaign_id for c in store.list()]
    paused = [c.campaign_id for c in store.list(CampaignState.PAUSED)]
    sending = [(c.campaign_id, c.open_batches) for c in store.list(CampaignState.SENDING)]

    # Then each campaign appears once, by id, and no batch item is taken for a campaign
    assert every == ["c0", "c1", "c2", "c3", "c4"]
    assert paused == ["c1"]
    assert sending == [("c3", 3)]
    assert list(store.list(CampaignState.CANCELLED)) == []
    # And nothing was scanned: the index holds campaign items only
    assert "Scan" not in operations and set(operations) == {"Query", "BatchGetItem"}


def test_get_campaigns_filters_by_state_and_refuses_an_unknown_state_naming_it(system):
    system.campaign("c1")
    system.campaign("c2")
    system.operator.publish("c2", system.recipients(2))

    every = call(system, "/campaigns")
    drafts = call(system, "/campaigns?state=draft")
    sending = call(system, "/campaigns?state=sending")
    bogus = call(system, "/campaigns?state=bogus")

    assert every[0] == 200 and [c["campaign_id"] for c in every[1]["campaigns"]] == ["c1", "c2"]
    assert drafts == (200, {"campaigns": [{**every[1]["campaigns"][0]}]})
    [item] = sending[1]["campaigns"]
    assert (item["campaign_id"], item["state"], item["delivery_mode"], item["open_batches"]) == (
        "c2",
        "sending",
        "single",
        1,
    )
    assert item["from"] == f"news@{system.domain}" and item["updated_at"]
    assert bogus[0] == 422 and bogus[1]["detail"][0]["loc"] == ["query", "state"]
    assert bogus[1]["message"].startswith("query.state: ")
    assert "'draft'" in bogus[1]["message"]  # says what a state may be


def test_campaign_list_prints_a_table_or_json_and_refuses_an_unknown_state(system):
    system.campaign("c1")
    system.campaign("c2", delivery_mode="batch")
    system.operator.publish("c2", system.recipients(1))

    table = sendonce(system, "campaign", "list")
    listed = as_json(sendonce(system, "campaign", "list", "--json"))
    drafts = as_json(sendonce(system, "campaign", "list", "--state", "draft", "--json"))
    none = sendonce(system, "campaign", "list", "--state", "cancelled")
    bogus = sendonce(system, "campaign", "list", "--state", "bogus")

    assert table.exit_code == 0
    rows = [line for line in table.stdout.splitlines() if " c1 " in line or " c2 " in line]
    assert len(rows) == 2 and "draft" in rows[0] and "single" in rows[0]
    assert "sending" in rows[1] and "batch" in rows[1]
    assert [c["campaign_id"] for c in listed["campaigns"]] == ["c1", "c2"]
    assert {"campaign_id", "state", "delivery_mode", "updated_at", "open_batches"} <= set(listed["campaigns"][1])
    assert [c["campaign_id"] for c in drafts["campaigns"]] == ["c1"]
    assert none.exit_code == 0 and "no campaign is cancelled" in none.stdout
    assert bogus.exit_code == 2 and "--state" in bogus.stderr and "bogus" in bogus.stderr
