"""What the handler is invoked with, as Lambda invokes it from an SQS event source: the SQS
event for messages as boto3's ``receive_message`` returns them, and a context whose remaining
time counts down from the function timeout."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class LocalLambdaContext:
    """The Lambda context object's attributes, with a real countdown to the timeout.

    Like the Python runtime, ``memory_limit_in_mb`` is a string (the runtime copies it
    from ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``).
    """

    function_name: str
    invoked_function_arn: str
    timeout_s: float
    function_version: str = "$LATEST"
    memory_limit_in_mb: str = "256"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = ""
    client_context: Any = None
    identity: Any = None
    tenant_id: str | None = None
    started_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if not self.log_group_name:
            self.log_group_name = f"/aws/lambda/{self.function_name}"
        if not self.log_stream_name:
            day = time.strftime("%Y/%m/%d", time.gmtime())
            self.log_stream_name = f"{day}/[{self.function_version}]{uuid.uuid4().hex}"

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` value at which the invocation times out."""
        return self.started_at + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


def build_sqs_event(messages: Iterable[Mapping[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """Lambda's SQS event for messages as boto3's ``receive_message`` returns them."""
    return {"Records": [_sqs_record(message, queue_arn, region) for message in messages]}


def _sqs_record(message: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: _lambda_message_attribute(value) for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def _lambda_message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    attribute: dict[str, Any] = {}
    if "StringValue" in value:
        attribute["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
    attribute["stringListValues"] = list(value.get("StringListValues", []))
    attribute["binaryListValues"] = [base64.b64encode(v).decode("ascii") for v in value.get("BinaryListValues", [])]
    attribute["dataType"] = value["DataType"]
    return attribute
