"""The suppressions table and the deliverability secrets, created with boto3 for local runs
and integration tests (mirroring the key schema the CDK stack must give the table)."""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import dataclass
from typing import Any

import boto3

UNSUBSCRIBE_SECRET_NAME = "sendonce/unsubscribe-key"
WEBHOOK_SECRET_NAME = "sendonce/resend-webhook-secret"


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
    session = session or boto3.session.Session()
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
