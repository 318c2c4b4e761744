"""Queue inspection and a local DLQ redrive.

SQS's StartMessageMoveTask does the redrive on AWS; moto does not implement it, so
`move_messages` does the equivalent move (receive, send to the source, then delete) for
local runs. A message is deleted from the DLQ only after its copy is on the source queue:
a crash in between leaves a duplicate message, which the ledger makes harmless, never a
lost one. The copy keeps the message's group (its campaign, which makes the campaign queue
a fair queue), or, for a message sent without one (an earlier release's), takes the
campaign its body names; a body that is not a batch's goes back without a group.
"""

from __future__ import annotations

from typing import Any

from sendonce.domain.campaigns.batches import campaign_named_by


def queue_depths(sqs: Any, queue_url: str) -> dict[str, int]:
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return {
        "visible": int(attributes.get("ApproximateNumberOfMessages", 0)),
        "in_flight": int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
        "delayed": int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
    }


def peek_messages(sqs: Any, queue_url: str, *, limit: int = 1000) -> list[dict[str, Any]]:
    """Read messages without consuming them: each is made visible again at once."""
    seen: dict[str, dict[str, Any]] = {}
    empty_rounds = 0
    while len(seen) < limit and empty_rounds < 2:
        response = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            VisibilityTimeout=30,
            WaitTimeSeconds=0,
        )
        messages = response.get("Messages", [])
        new = [m for m in messages if m["MessageId"] not in seen]
        if not new:
            empty_rounds += 1
        for message in messages:
            seen.setdefault(message["MessageId"], message)
        # Hold what we read until the sweep ends so the next receive returns other messages.
    entries = [
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0} for i, m in enumerate(seen.values())
    ]
    for start in range(0, len(entries), 10):
        sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries[start : start + 10])
    return list(seen.values())


def move_messages(sqs: Any, source_url: str, destination_url: str, *, limit: int | None = None) -> int:
    moved = 0
    while limit is None or moved < limit:
        response = sqs.receive_message(
            QueueUrl=source_url,
            MaxNumberOfMessages=10 if limit is None else max(1, min(10, limit - moved)),
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["MessageGroupId"],
            VisibilityTimeout=60,
            WaitTimeSeconds=0,
        )
        messages = response.get("Messages", [])
        if not messages:
            break
        entries = []
        for i, message in enumerate(messages):
            entry = {"Id": str(i), "MessageBody": message["Body"]}
            group = (message.get("Attributes") or {}).get("MessageGroupId") or campaign_named_by(message["Body"])
            if group:
                entry["MessageGroupId"] = group
            if message.get("MessageAttributes"):
                entry["MessageAttributes"] = {
                    k: {kk: vv for kk, vv in v.items() if kk in ("DataType", "StringValue", "BinaryValue")}
                    for k, v in message["MessageAttributes"].items()
                }
            entries.append(entry)
        result = sqs.send_message_batch(QueueUrl=destination_url, Entries=entries)
        sent_ids = {s["Id"] for s in result.get("Successful", [])}
        done = [m for i, m in enumerate(messages) if str(i) in sent_ids]
        if done:
            sqs.delete_message_batch(
                QueueUrl=source_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
        moved += len(done)
        if result.get("Failed"):
            raise RuntimeError(f"could not move {len(result['Failed'])} message(s): {result['Failed']}")
    return moved
