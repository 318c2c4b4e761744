"""cloudformation.py: a stack update that changes a DynamoDB table keeps it."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from tests.integration.moto_patches.helpers import (
    PROFILES,
    moto_as,
)

pytestmark = pytest.mark.integration


def _table_stack(*, upgraded: bool) -> str:
    """A stack with one table, and an output that reads its ARN (a Fn::GetAtt of it); the
    upgrade adds an index, a stream and a TTL, all updated in place by CloudFormation."""
    properties: dict[str, Any] = {
        "TableName": "ledger",
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
    }
    if upgraded:
        properties["AttributeDefinitions"] = [
            *properties["AttributeDefinitions"],
            {"AttributeName": "state", "AttributeType": "S"},
        ]
        properties["GlobalSecondaryIndexes"] = [
            {
                "IndexName": "by-state",
                "KeySchema": [{"AttributeName": "state", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ]
        properties["StreamSpecification"] = {"StreamViewType": "NEW_AND_OLD_IMAGES"}
        properties["TimeToLiveSpecification"] = {"AttributeName": "expires_at", "Enabled": True}
    template: dict[str, Any] = {
        "Resources": {"Table": {"Type": "AWS::DynamoDB::Table", "Properties": properties}},
        "Outputs": {"Arn": {"Value": {"Fn::GetAtt": ["Table", "Arn"]}}},
    }
    if upgraded:  # a new resource that reads the stream's ARN, as a stream mapping does
        template["Resources"]["StreamName"] = {
            "Type": "AWS::SSM::Parameter",
            "Properties": {"Name": "stream", "Type": "String", "Value": {"Fn::GetAtt": ["Table", "StreamArn"]}},
        }
    return json.dumps(template)


@pytest.mark.parametrize("profile", PROFILES)
def test_a_stack_update_keeps_a_changed_table_with_the_fixes_only(profile: str) -> None:
    with moto_as(profile):
        # Given a stack holding a table with an item in it
        cloudformation, dynamodb = boto3.client("cloudformation"), boto3.client("dynamodb")
        cloudformation.create_stack(StackName="s", TemplateBody=_table_stack(upgraded=False))
        dynamodb.put_item(TableName="ledger", Item={"pk": {"S": "kept"}, "state": {"S": "sent"}})

        # When an update adds an index, a stream and a TTL to it
        if profile == "stock":
            # Stock: the new resource reads a stream the table does not have yet, or the update
            # drops the table from the stack and the first read of its Fn::GetAtt fails.
            with pytest.raises(Exception, match="undefined resource|LatestStreamArn"):  # moto's error or botocore's
                cloudformation.update_stack(StackName="s", TemplateBody=_table_stack(upgraded=True))
                cloudformation.describe_stacks(StackName="s")
            return
        cloudformation.update_stack(StackName="s", TemplateBody=_table_stack(upgraded=True))

        # Then (patched) the same table holds the item and has the index, the stream and the TTL
        described = dynamodb.describe_table(TableName="ledger")["Table"]
        assert [i["IndexName"] for i in described["GlobalSecondaryIndexes"]] == ["by-state"]
        assert described["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
        parameter = boto3.client("ssm").get_parameter(Name="stream")["Parameter"]["Value"]
        assert parameter == described["LatestStreamArn"]
        ttl = dynamodb.describe_time_to_live(TableName="ledger")["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
        assert dynamodb.get_item(TableName="ledger", Key={"pk": {"S": "kept"}})["Item"]["state"] == {"S": "sent"}
        outputs = cloudformation.describe_stacks(StackName="s")["Stacks"][0]["Outputs"]
        assert outputs[0]["OutputValue"] == described["TableArn"]
