"""Queues, tables and secrets for integration tests and local runs, created with boto3:
the sending resources (queue and DLQ, ledger and campaigns tables, the Resend secret) and
the deliverability ones (the suppressions table, the unsubscribe key and webhook secrets).

The demo deploys the real CDK template instead (sendonce_local/deploy.py); tests use this
quicker path with unique names per test, mirroring the template's key schemas and
redrive (tests/infra checks the template itself).
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass
from typing import Any

import boto3

from sendonce.adapters.aws_session import aws_session
from sendonce.contract import CAMPAIGNS_BY_STATE_INDEX, CAMPAIGNS_TTL_ATTRIBUTE

RESEND_SECRET_NAME = "sendonce/resend-api-key"
UNSUBSCRIBE_SECRET_NAME = "sendonce/unsubscribe-key"
WEBHOOK_SECRET_NAME = "sendonce/resend-webhook-secret"


@dataclass(frozen=True)
class LocalResources:
    queue_url: str
    queue_arn: str
    dead_letter_queue_url: str
    dead_letter_queue_arn: str
    ledger_table: str
    campaigns_table: str
    resend_secret: str
    max_receive_count: int

    def consumer_env(self, **overrides: Any) -> dict[str, str]:
        env = {
            "SENDONCE_LEDGER_TABLE": self.ledger_table,
            "SENDONCE_CAMPAIGNS_TABLE": self.campaigns_table,
            "SENDONCE_DEAD_LETTER_QUEUE_URL": self.dead_letter_queue_url,
            "SENDONCE_RESEND_API_KEY_SECRET": self.resend_secret,
            "SENDONCE_MAX_RECEIVE_COUNT": str(self.max_receive_count),
        }
        env.update({k: str(v) for k, v in overrides.items()})
        return env


# As the stack has them: what the counters' aggregator reads (sendonce_local/stream_poller.py).
STREAMS = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}


def create_tables(dynamodb: Any, *, ledger_table: str, campaigns_table: str, streams: bool = False) -> None:
    """The two tables; with `streams`, each with the stack's stream (moto then keeps every
    change of them in memory, and a transaction copies it: off unless the counters run)."""
    stream = {"StreamSpecification": STREAMS} if streams else {}
    dynamodb.create_table(
        TableName=ledger_table,
        KeySchema=[
            {"AttributeName": "campaign_id", "KeyType": "HASH"},
            {"AttributeName": "recipient_id", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "campaign_id", "AttributeType": "S"},
            {"AttributeName": "recipient_id", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        **stream,
    )
    dynamodb.create_table(
        TableName=campaigns_table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "state", "AttributeType": "S"},
            {"AttributeName": "campaign_id", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": CAMPAIGNS_BY_STATE_INDEX,
                "KeySchema": [
                    {"AttributeName": "state", "KeyType": "HASH"},
                    {"AttributeName": "campaign_id", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
        **stream,
    )
    dynamodb.update_time_to_live(
        TableName=campaigns_table,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": CAMPAIGNS_TTL_ATTRIBUTE},
    )


def create_local_resources(
    session: boto3.session.Session | None = None,
    *,
    prefix: str | None = None,
    visibility_timeout_s: int = 30,
    max_receive_count: int = 5,
    resend_api_key: str = "re_local_test_key",
    streams: bool = False,
) -> LocalResources:
    session = session or aws_session()
    prefix = prefix or f"t{uuid.uuid4().hex[:8]}"
    sqs = session.client("sqs")
    dlq_url = sqs.create_queue(QueueName=f"{prefix}-dlq", Attributes={"MessageRetentionPeriod": str(14 * 86400)})[
        "QueueUrl"
    ]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(
        QueueName=f"{prefix}-campaigns",
        Attributes={
            "VisibilityTimeout": str(visibility_timeout_s),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}),
        },
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    ledger, campaigns = f"{prefix}-ledger", f"{prefix}-campaigns"
    create_tables(session.client("dynamodb"), ledger_table=ledger, campaigns_table=campaigns, streams=streams)
    secrets = session.client("secretsmanager")
    secret_name = f"{prefix}/{RESEND_SECRET_NAME}"
    secrets.create_secret(Name=secret_name, SecretString=resend_api_key)
    return LocalResources(
        queue_url=queue_url,
        queue_arn=queue_arn,
        dead_letter_queue_url=dlq_url,
        dead_letter_queue_arn=dlq_arn,
        ledger_table=ledger,
        campaigns_table=campaigns,
        resend_secret=secret_name,
        max_receive_count=max_receive_count,
    )


def verify_ses_sender(session: boto3.session.Session, address_or_domain: str) -> None:
    session.client("sesv2").create_email_identity(EmailIdentity=address_or_domain)


# --- deliverability ---------------------------------------------------------------


def create_suppressions_table(dynamodb: Any, table_name: str) -> None:
    dynamodb.create_table(
        TableName=table_name,
        KeySchema=[{"AttributeName": "fp", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "fp", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


@dataclass(frozen=True)
class DeliverabilityResources:
    suppressions_table: str
    unsubscribe_key_secret: str
    unsubscribe_key: str
    webhook_secret_name: str
    webhook_secret: str

    def env(self, *, unsubscribe_base_url: str = "https://unsubscribe.example.com") -> dict[str, str]:
        return {
            "SENDONCE_SUPPRESSIONS_TABLE": self.suppressions_table,
            "SENDONCE_UNSUBSCRIBE_KEY_SECRET": self.unsubscribe_key_secret,
            "SENDONCE_UNSUBSCRIBE_BASE_URL": unsubscribe_base_url,
            "SENDONCE_RESEND_WEBHOOK_SECRET": self.webhook_secret_name,
        }


def create_deliverability_resources(
    session: boto3.session.Session | None = None, *, prefix: str | None = None, webhook_secret: str | None = None
) -> DeliverabilityResources:
    session = session or aws_session()
    prefix = prefix or f"t{uuid.uuid4().hex[:8]}"
    table = f"{prefix}-suppressions"
    create_suppressions_table(session.client("dynamodb"), table)
    secrets = session.client("secretsmanager")
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    webhook_secret = webhook_secret or "whsec_" + base64.b64encode(os.urandom(24)).decode()
    unsubscribe_name, webhook_name = f"{prefix}/{UNSUBSCRIBE_SECRET_NAME}", f"{prefix}/{WEBHOOK_SECRET_NAME}"
    secrets.create_secret(Name=unsubscribe_name, SecretString=key)
    secrets.create_secret(Name=webhook_name, SecretString=webhook_secret)
    return DeliverabilityResources(
        suppressions_table=table,
        unsubscribe_key_secret=unsubscribe_name,
        unsubscribe_key=key,
        webhook_secret_name=webhook_name,
        webhook_secret=webhook_secret,
    )


# --- scheduled sends ---------------------------------------------------------------


@dataclass(frozen=True)
class SchedulingResources:
    """The schedule group, the role EventBridge Scheduler assumes and the scheduled-start
    function's ARN (locally a name only: the SchedulePoller runs its handler in process)."""

    group_name: str
    role_arn: str
    start_function_arn: str

    def env(self) -> dict[str, str]:
        return {
            "SENDONCE_SCHEDULER_GROUP": self.group_name,
            "SENDONCE_SCHEDULER_ROLE_ARN": self.role_arn,
            "SENDONCE_SCHEDULED_START_FUNCTION_ARN": self.start_function_arn,
        }


def ensure_schedule_group(scheduler: Any, group_name: str) -> None:
    """Create the group unless it exists (moto's CloudFormation skips AWS::Scheduler::*)."""
    try:
        scheduler.get_schedule_group(Name=group_name)
    except scheduler.exceptions.ResourceNotFoundException:
        scheduler.create_schedule_group(Name=group_name)


def create_scheduling_resources(
    session: boto3.session.Session | None = None, *, prefix: str | None = None
) -> SchedulingResources:
    session = session or aws_session()
    prefix = prefix or f"t{uuid.uuid4().hex[:8]}"
    account = session.client("sts").get_caller_identity()["Account"]
    region = session.region_name or "us-east-1"
    role = session.client("iam").create_role(
        RoleName=f"{prefix}-scheduler",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "scheduler.amazonaws.com"}, "Action": "sts:AssumeRole"}
                ],
            }
        ),
    )["Role"]["Arn"]
    group = f"{prefix}-campaigns"
    ensure_schedule_group(session.client("scheduler"), group)
    return SchedulingResources(
        group_name=group,
        role_arn=role,
        start_function_arn=f"arn:aws:lambda:{region}:{account}:function:{prefix}-scheduled-start",
    )
