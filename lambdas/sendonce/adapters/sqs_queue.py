"""The campaign queue and its dead-letter queue on SQS."""

from __future__ import annotations

import time
from typing import Any

POISON_REASON_ATTRIBUTE = "sendonce-poison-reason"


class SqsQueue:
    def __init__(self, *, client: Any, queue_url: str, dead_letter_queue_url: str | None = None, attempts: int = 4):
        self._client = client
        self._queue_url = queue_url
        self._dlq_url = dead_letter_queue_url
        self._attempts = attempts
        self._source_urls: dict[str, str] = {}

    def publish(self, bodies: list[str]) -> None:
        for start in range(0, len(bodies), 10):
            pending = {str(i): body for i, body in enumerate(bodies[start : start + 10])}
            for attempt in range(self._attempts):
                response = self._client.send_message_batch(
                    QueueUrl=self._queue_url,
                    Entries=[{"Id": i, "MessageBody": body} for i, body in pending.items()],
                )
                failed = response.get("Failed", [])
                pending = {f["Id"]: pending[f["Id"]] for f in failed}
                if not pending:
                    break
                # Entries SQS refused were not enqueued; sending them again cannot duplicate
                # a delivery (the ledger decides), and leaving them would lose recipients.
                time.sleep(0.2 * 2**attempt)
            if pending:
                reasons = "; ".join(f"{f['Id']}: {f.get('Code')} {f.get('Message', '')}" for f in failed)
                raise RuntimeError(f"SQS refused {len(pending)} message(s) after {self._attempts} attempts: {reasons}")

    def return_later(self, source_arn: str, receipt_handle: str, *, seconds: int) -> None:
        queue_url = self._source_urls.get(source_arn)
        if queue_url is None:
            _, _, _, _, account, name = source_arn.split(":", 5)
            queue_url = self._client.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
            self._source_urls[source_arn] = queue_url
        self._client.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=max(0, min(seconds, 43_200))
        )

    def dead_letter(self, body: str, *, reason: str) -> None:
        if not self._dlq_url:
            raise RuntimeError("no dead-letter queue configured")
        self._client.send_message(
            QueueUrl=self._dlq_url,
            MessageBody=body if body else "(empty body)",
            MessageAttributes={POISON_REASON_ATTRIBUTE: {"DataType": "String", "StringValue": reason[:1000]}},
        )
