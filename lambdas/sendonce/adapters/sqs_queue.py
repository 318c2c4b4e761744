"""The campaign queue and its dead-letter queue on SQS."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

from sendonce.domain import limits

POISON_REASON_ATTRIBUTE = "sendonce-poison-reason"


def batch_entries(campaign_id: str, bodies: dict[str, str]) -> list[dict[str, str]]:
    """SendMessageBatch entries for one campaign's batch bodies (by entry id), each in the
    campaign's message group. The model check's queue (tests/model/world.py) takes its groups
    from here, so reverting the group (mutant 13) reverts it there too."""
    return [{"Id": i, "MessageBody": body, "MessageGroupId": campaign_id} for i, body in bodies.items()]


class SqsQueue:
    def __init__(self, *, client: Any, queue_url: str, dead_letter_queue_url: str | None = None, attempts: int = 4):
        self._client = client
        self._queue_url = queue_url
        self._dlq_url = dead_letter_queue_url
        self._attempts = attempts
        self._source_urls: dict[str, str] = {}

    def publish(self, campaign_id: str, bodies: list[str]) -> None:
        # The campaign is the message group: on a standard queue that makes SQS a fair queue
        # (no queue setting), which serves quiet campaigns' batches before those of one that
        # takes a large share of the messages in flight. Messages without a group (an earlier
        # release's) are still received: each is a tenant of its own.
        for request in self._requests(bodies):
            pending = {str(i): body for i, body in enumerate(request)}
            for attempt in range(self._attempts):
                response = self._client.send_message_batch(
                    QueueUrl=self._queue_url, Entries=batch_entries(campaign_id, pending)
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

    def _requests(self, bodies: list[str]) -> Iterator[list[str]]:
        """SendMessageBatch requests of at most 10 entries and SQS_BATCH_REQUEST_BYTES: SQS
        refuses a whole request over either limit, and the batches are recorded already."""
        sizes = [len(body.encode("utf-8")) for body in bodies]
        too_big = [i for i, size in enumerate(sizes) if size > limits.SQS_MESSAGE_BYTES]
        if too_big:  # checked before anything is sent, so no request goes out half-done
            raise ValueError(
                f"{len(too_big)} message(s) larger than SQS's {limits.SQS_MESSAGE_BYTES:,} bytes "
                f"(the largest {max(sizes):,}); limits.RECIPIENT_JSON_BYTES should have prevented it"
            )
        request: list[str] = []
        request_bytes = 0
        for body, size in zip(bodies, sizes, strict=True):
            if request and (
                len(request) == limits.SQS_BATCH_ENTRIES or request_bytes + size > limits.SQS_BATCH_REQUEST_BYTES
            ):
                yield request
                request, request_bytes = [], 0
            request.append(body)
            request_bytes += size
        if request:
            yield request

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


class SqsJobQueue:
    """The jobs queue: one message per step to take, naming the job (never its position:
    the job's item holds that, so a message received twice cannot move it twice)."""

    def __init__(self, *, client: Any, queue_url: str):
        self._client = client
        self._queue_url = queue_url

    def submit(self, job_id: str) -> None:
        self._client.send_message(QueueUrl=self._queue_url, MessageBody=json.dumps({"job_id": job_id}))

    def submit_parts(self, job_id: str, parts: Iterable[int]) -> None:
        """One message a part (a part is recorded once in the job, however often it runs)."""
        entries = [{"Id": str(n), "MessageBody": json.dumps({"job_id": job_id, "part": n})} for n in parts]
        for start in range(0, len(entries), 10):
            answer = self._client.send_message_batch(QueueUrl=self._queue_url, Entries=entries[start : start + 10])
            if answer.get("Failed"):
                failed = ", ".join(f["Id"] for f in answer["Failed"])
                raise RuntimeError(f"jobs queue refused part(s) {failed} of job {job_id}")
