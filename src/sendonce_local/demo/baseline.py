"""The generic "send, then ack" consumer that caused the incident — kept to prove the
ledger matters. No ledger, no idempotency key: a redelivered message is sent again.

Same message format, campaign store, templates and send concurrency as sendonce, so the
demo and the benchmark compare like with like.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import resend

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.providers.ses.sender import SEND_CLIENT_CONFIG
from sendonce.domain.sending.delivery import parse_batch
from sendonce.domain.sending.rendering import CompiledContent


def _send_resend(campaign, recipient, rendered) -> None:
    resend.Emails.send(
        {
            "from": campaign.sender,
            "to": [recipient.email],
            "subject": rendered.subject,
            "html": rendered.html or "",
            "text": rendered.text or "",
        }
    )


def lambda_handler(event: dict[str, Any], context: Any) -> dict:
    session = boto3.session.Session()
    campaigns = DynamoDBCampaignStore(
        client=session.client("dynamodb"), table_name=os.environ["SENDONCE_CAMPAIGNS_TABLE"]
    )
    ses = session.client("sesv2", config=SEND_CLIENT_CONFIG)
    resend.api_key = os.environ.get("SENDONCE_BASELINE_RESEND_KEY", "re_local_test_key")
    if os.environ.get("RESEND_API_URL"):
        resend.api_url = os.environ["RESEND_API_URL"]
    concurrency = int(os.environ.get("SENDONCE_SEND_CONCURRENCY", "8"))
    failures = []
    for record in event["Records"]:
        try:
            batch = parse_batch(record["body"])
            campaign = campaigns.get(batch.campaign_id)
            content = CompiledContent(campaign.content or campaigns.content(batch.campaign_id))

            def send(recipient, campaign=campaign, content=content):
                rendered = content.render(recipient.variables)
                if campaign.provider == "ses":
                    body = {k: {"Data": v} for k, v in (("Html", rendered.html), ("Text", rendered.text)) if v}
                    ses.send_email(
                        FromEmailAddress=campaign.sender,
                        Destination={"ToAddresses": [recipient.email]},
                        Content={"Simple": {"Subject": {"Data": rendered.subject}, "Body": body}},
                    )
                else:
                    _send_resend(campaign, recipient, rendered)

            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                list(pool.map(send, batch.recipients))
        except Exception:  # noqa: BLE001 - the generic pattern: fail the message, let SQS redeliver it
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}
