"""`sendonce_cdk.SendOnce` in a stack of someone else's: typed props, public attributes,
grants for other principals; SendonceStack is that construct with outputs around it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sendonce.contract import Output
from sendonce_cdk.providers.ses import configuration_set_name
from tests.infra.synthesis import Synthesized, feature_flags

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def user_stack() -> dict[str, Any]:
    import aws_cdk as cdk
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_lambda as lambda_

    from sendonce_cdk import SendOnce

    app = cdk.App(context=feature_flags())
    stack = cdk.Stack(app, "Shop", stack_name="Shop")
    mail = SendOnce(
        stack,
        "Mail",
        providers=["ses", "resend"],
        sender_domain="mail.shop.example",
        send_rate=50,
        webhook_rate_limit=150,
        removal_policy="destroy",
        # No bundling: this test reads the template only.
        code=lambda_.Code.from_inline("def lambda_handler(event, context):\n    return None\n"),
    )
    publisher = iam.Role(stack, "Publisher", assumed_by=iam.AccountRootPrincipal())
    operator = iam.Role(stack, "Operator", assumed_by=iam.AccountRootPrincipal())
    mail.grant_publish(publisher)
    mail.grant_operate(operator)
    template = app.synth().get_stack_by_name("Shop").template
    resolve = stack.resolve
    return {
        "template": template,
        "mail": mail,
        "ids": {
            name: resolve(getattr(mail, name).node.default_child.logical_id)
            for name in (
                "queue",
                "dead_letter_queue",
                "ledger_table",
                "campaigns_table",
                "suppressions_table",
                "consumer",
                "on_call_topic",
            )
        },  # fmt: skip
        "api_id": resolve(mail.operator_api.api.node.default_child.logical_id),
        "roles": {
            "publisher": resolve(publisher.node.default_child.logical_id),
            "operator": resolve(operator.node.default_child.logical_id),
        },  # fmt: skip
        "urls": (resolve(mail.operator_api_url), resolve(mail.public_api_url)),
    }


def _invoke_resources(template: dict[str, Any], role_id: str) -> list[str]:
    resources = []
    for policy in template["Resources"].values():
        if policy["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                assert statement["Action"] == "execute-api:Invoke", statement
                for resource in (
                    statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                ):
                    resources.append(
                        "".join(p if isinstance(p, str) else json.dumps(p) for p in resource["Fn::Join"][1])
                    )
    return resources


def test_public_attributes_are_the_pipelines_resources(user_stack: dict[str, Any]) -> None:
    resources = user_stack["template"]["Resources"]
    types = {name: resources[logical_id]["Type"] for name, logical_id in user_stack["ids"].items()}
    assert types == {
        "queue": "AWS::SQS::Queue",
        "dead_letter_queue": "AWS::SQS::Queue",
        "ledger_table": "AWS::DynamoDB::Table",
        "campaigns_table": "AWS::DynamoDB::Table",
        "suppressions_table": "AWS::DynamoDB::Table",
        "consumer": "AWS::Lambda::Function",
        "on_call_topic": "AWS::SNS::Topic",
    }
    ids = user_stack["ids"]
    assert resources[ids["ledger_table"]]["Properties"]["KeySchema"][0] == {
        "AttributeName": "campaign_id",
        "KeyType": "HASH",
    }
    assert resources[ids["queue"]]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": [ids["dead_letter_queue"], "Arn"]
    }
    assert resources[ids["consumer"]]["Properties"]["Handler"] == "sendonce.handlers.consumer.lambda_handler"
    operator_url, public_url = user_stack["urls"]
    assert operator_url["Fn::Join"][1][1] == {"Ref": user_stack["api_id"]}
    assert public_url["Fn::Join"][1][0] == "https://"


def test_props_reach_the_settings_and_the_template(user_stack: dict[str, Any]) -> None:
    mail = user_stack["mail"]
    config = mail.config
    assert config.providers == ("ses", "resend")
    assert config.stack_name == "Shop"  # from the stack: alarm names, dashboard, configuration set
    assert configuration_set_name(config) == "Shop-events"
    assert (config.send_rate, config.webhook_rate_limit, config.retain) == (50, 150, False)
    stages = [r["Properties"] for r in user_stack["template"]["Resources"].values()
              if r["Type"] == "AWS::ApiGatewayV2::Stage" and "RouteSettings" in r["Properties"]]  # fmt: skip
    [public_stage] = stages
    assert public_stage["RouteSettings"]["POST /webhooks/resend"]["ThrottlingRateLimit"] == 150


def test_grant_publish_allows_create_publish_and_reads_only(user_stack: dict[str, Any]) -> None:
    resources = _invoke_resources(user_stack["template"], user_stack["roles"]["publisher"])
    api = json.dumps({"Ref": user_stack["api_id"]})
    assert sorted(r.split(api, 1)[1] for r in resources) == sorted(
        [
            "/$default/POST/campaigns",
            "/$default/POST/campaigns/*/publish",
            "/$default/GET/campaigns/*",
            "/$default/GET/campaigns/*/delivery-status",
        ]
    )
    assert all(r.startswith("arn:") and ":execute-api:" in r for r in resources)


def test_grant_operate_allows_every_operator_route(user_stack: dict[str, Any]) -> None:
    [resource] = _invoke_resources(user_stack["template"], user_stack["roles"]["operator"])
    assert resource.endswith(json.dumps({"Ref": user_stack["api_id"]}) + "/$default/*/*")


def test_bad_props_are_refused_before_synthesis() -> None:
    import aws_cdk as cdk

    from sendonce_cdk import SendOnce
    from sendonce_cdk.config import ConfigError

    stack = cdk.Stack(cdk.App(), "Bad")
    with pytest.raises(ConfigError, match="webhook_rate_limit"):
        SendOnce(stack, "Mail", providers=["resend"], sender_domain="x.example", webhook_rate_limit=0)
    with pytest.raises(ConfigError, match="provider"):
        SendOnce(stack, "Mail2", providers=["mailgun"], sender_domain="x.example")  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="feedback_id_sender_id: a SenderId of 3 characters"):
        SendOnce(stack, "Mail3", providers=["ses"], sender_domain="x.example", feedback_id_sender_id="abc")


def test_the_stack_is_the_construct_with_its_outputs(assembly: Synthesized) -> None:
    # SendonceStack adds outputs and tags only; the construct keeps the stack's logical
    # ids (its id is hidden from them), so existing deployments update in place.
    template = assembly.template
    ids = set(template["Resources"])
    for expected in ("QueuesQueueD811C857", "TablesLedgerF9806C8B", "TablesCampaigns1C67930B",
                     "TablesSuppressions9DF72882", "ConsumerFunction1B019A9B"):  # fmt: skip
        assert expected in ids, expected
    assert template["Outputs"][Output.LEDGER_TABLE_NAME]["Value"] == {"Ref": "TablesLedgerF9806C8B"}
