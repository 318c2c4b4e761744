"""The dead-letter queue for operators: read it without consuming, and redrive it.

Redrive uses SQS's own StartMessageMoveTask (DLQ -> source queue). Where SQS does not
implement it (moto answers HTTP 500), or when a count limit is asked for (the task has
none), messages are moved by `move_messages`: copy to the source queue, then delete from
the DLQ. Either way a redriven batch is safe: its sent recipients are final in the ledger
and are not sent again; only its dead-lettered ones are claimed anew.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError

from sendonce.adapters.sqs_queue import POISON_REASON_ATTRIBUTE
from sendonce.domain.campaigns.service import DeadLetter
from sendonce_ops.sqs_tools import move_messages, peek_messages

# Codes that mean "this SQS does not do message move tasks", not "this move is wrong".
_NOT_IMPLEMENTED_CODES = {"NotImplemented", "InvalidAction", "UnknownOperationException", "UnsupportedOperation"}


def read_dead_letters(sqs: Any, dead_letter_queue_url: str, *, limit: int = 1000) -> list[DeadLetter]:
    letters = []
    for message in peek_messages(sqs, dead_letter_queue_url, limit=limit):
        attribute = (message.get("MessageAttributes") or {}).get(POISON_REASON_ATTRIBUTE) or {}
        sent = (message.get("Attributes") or {}).get("SentTimestamp")
        letters.append(
            DeadLetter(
                message_id=message["MessageId"],
                body=message.get("Body", ""),
                poison_reason=attribute.get("StringValue"),
                sent_at_ms=int(sent) if sent else None,
            )
        )
    return letters


@dataclass(frozen=True)
class RedriveResult:
    method: str  # "move-task" (SQS moves asynchronously) or "client-move" (moved here)
    moved: int | None = None  # known for client-move only
    task_handle: str | None = None
    fallback_reason: str | None = None  # why the move task was not used

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def redrive(
    session: Any,
    *,
    dead_letter_queue_url: str,
    queue_url: str,
    dead_letter_queue_arn: str,
    queue_arn: str,
    limit: int | None = None,
    rate: int | None = None,
) -> RedriveResult:
    sqs = session.client("sqs")
    if limit is not None:
        moved = move_messages(sqs, dead_letter_queue_url, queue_url, limit=limit)
        return RedriveResult(
            "client-move", moved=moved, fallback_reason="--limit given: SQS move tasks move every message"
        )
    # One attempt: a 500 from an SQS that lacks the API should not be retried four times.
    once = session.client("sqs", config=Config(retries={"max_attempts": 1, "mode": "standard"}))
    params = {"SourceArn": dead_letter_queue_arn, "DestinationArn": queue_arn}
    if rate:
        params["MaxNumberOfMessagesPerSecond"] = rate
    try:
        handle = once.start_message_move_task(**params)["TaskHandle"]
        return RedriveResult("move-task", task_handle=handle)
    except ClientError as exc:
        if not _not_implemented(exc):
            raise
        reason = f"StartMessageMoveTask is not available here ({_describe(exc)})"
    moved = move_messages(sqs, dead_letter_queue_url, queue_url)
    return RedriveResult("client-move", moved=moved, fallback_reason=reason)


def _not_implemented(exc: ClientError) -> bool:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    code = exc.response.get("Error", {}).get("Code", "")
    return status >= 500 or code in _NOT_IMPLEMENTED_CODES or code.endswith(".UnsupportedOperation")


def _describe(exc: ClientError) -> str:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = exc.response.get("Error", {}).get("Code", "")
    return f"HTTP {status}" if code == str(status) else f"{code}, HTTP {status}"
