"""Someone else's CDK app: its own stack, `SendOnce` inside it, a producer function that
publishes campaigns, cdk-nag on everything. tests/infra/test_wheel.py copies this file out
of the repository and runs it with the Python of a fresh venv holding only the wheel.

Prints one JSON line: where `sendonce_cdk` and `sendonce` were imported from.
"""

import json
import sys

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

import sendonce
import sendonce_cdk
from sendonce_cdk import SendOnce


class ShopStack(cdk.Stack):
    def __init__(self, scope: Construct, id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        mail = SendOnce(self, "Mail", providers=["ses"], sender_domain="mail.shop.example", removal_policy="destroy")
        producer = lambda_.Function(
            self,
            "Producer",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="index.handler",
            code=lambda_.Code.from_inline("def handler(event, context):\n    return None\n"),
            environment={"SENDONCE_API_URL": mail.operator_api_url},
        )
        mail.grant_publish(producer)
        # The producer is this app's own function: its findings are this app's to accept.
        cdk.Validations.of(producer).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
                reason="The test app's producer keeps CDK's default execution role: it only writes its own logs.",
            )
        )


app = cdk.App(outdir=sys.argv[1])
ShopStack(app, "Shop")
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
print(json.dumps({"sendonce_cdk": sendonce_cdk.__file__, "sendonce": sendonce.__file__}))
