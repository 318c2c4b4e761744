"""How recipients become batches: content-addressed ids, and packing by count *and* bytes.

A batch is one SQS message and one batch record. The publisher records a batch before it
hands it to the queue, so a batch the queue would refuse must never be formed: `pack` cuts a
batch when the next recipient would take its body past `limits.SQS_MESSAGE_BYTES`, and
refuses a recipient that cannot fit in a message even alone, before anything of it is
written. The operator entry points refuse such recipients earlier (RECIPIENT_JSON_BYTES);
this is the service's own guarantee for callers that reach it directly.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator

from sendonce.domain import limits
from sendonce.domain.errors import InvalidCampaignError
from sendonce.domain.models import ID_PATTERN, MAX_RECIPIENTS_PER_BATCH, SCHEMA_VERSION, BatchMessage, Recipient

BATCH_ID_CHARS = 25  # "b" (or the resume/cancel prefix) and 24 hex digits


class OversizedRecipientError(InvalidCampaignError):
    """A recipient whose batch of one would not fit in an SQS message."""


def batch_id_for(campaign_id: str, recipients: list[Recipient]) -> str:
    """Content-addressed: publishing the same recipients again yields the same batch id."""
    digest = hashlib.sha256(campaign_id.encode())
    for recipient in recipients:
        digest.update(json.dumps(recipient.model_dump(mode="json"), sort_keys=True).encode())
    return "b" + digest.hexdigest()[:24]


def _envelope_bytes(campaign_id: str, sample: Recipient) -> int:
    """A batch body's bytes less its recipients' own JSON and the commas between them."""
    body = BatchMessage(
        schema_version=SCHEMA_VERSION, campaign_id=campaign_id, batch_id="b" * BATCH_ID_CHARS, recipients=[sample]
    ).to_body()
    return len(body.encode()) - len(sample.model_dump_json().encode())


def body_bytes(campaign_id: str, recipients: list[Recipient]) -> int:
    """The UTF-8 size of a batch body holding `recipients`, as `pack` counts it."""
    envelope = _envelope_bytes(campaign_id, recipients[0])
    return envelope + sum(len(r.model_dump_json().encode()) for r in recipients) + len(recipients) - 1


def pack(
    campaign_id: str,
    recipients: Iterable[Recipient],
    *,
    batch_size: int = MAX_RECIPIENTS_PER_BATCH,
    max_body_bytes: int = limits.SQS_MESSAGE_BYTES,
) -> Iterator[list[Recipient]]:
    """Batches of at most `batch_size` recipients whose body fits `max_body_bytes`, in input
    order (so ids stay content-addressed). A recipient that cannot fit alone raises
    OversizedRecipientError after the batch before it has been yielded."""
    chunk: list[Recipient] = []
    chunk_bytes = 0
    envelope: int | None = None
    for recipient in recipients:
        size = len(recipient.model_dump_json().encode())
        if envelope is None:
            envelope = _envelope_bytes(campaign_id, recipient)
        if envelope + size > max_body_bytes:
            if chunk:
                yield chunk
                chunk, chunk_bytes = [], 0
            raise OversizedRecipientError(
                f"recipient {recipient.recipient_id!r}: {size:,} bytes as JSON; a batch holding it alone would be "
                f"{envelope + size:,} bytes, more than a queue message's {max_body_bytes:,}"
            )
        if chunk and envelope + chunk_bytes + 1 + size > max_body_bytes:
            yield chunk
            chunk, chunk_bytes = [], 0
        chunk_bytes += size + (1 if chunk else 0)
        chunk.append(recipient)
        if len(chunk) == batch_size:
            # Full by count: out at once, not when the next recipient arrives (a streamed
            # publish enqueues each full request as soon as its last recipient is read).
            yield chunk
            chunk, chunk_bytes = [], 0
    if chunk:
        yield chunk


def bodies_for(campaign_id: str, recipients: list[Recipient], *, prefix: str) -> list[str]:
    """Message bodies publishing `recipients` once more (resume, cancel), packed by bytes as
    publish packs them: regrouped recipients may not fit by count. Not recorded as batches
    (the originals hold these recipients); their ids are content-addressed under `prefix`,
    so the same recipients republished again make the same messages."""
    bodies = []
    for chunk in pack(campaign_id, recipients):
        batch = BatchMessage(
            schema_version=SCHEMA_VERSION,
            campaign_id=campaign_id,
            batch_id=prefix + batch_id_for(campaign_id, chunk)[1:],
            recipients=chunk,
        )
        bodies.append(batch.to_body())
    return bodies


def campaign_named_by(body: str) -> str | None:
    """The campaign a message body read back from a queue names (a redrive tags the copy with
    it, as the publisher tagged the original): a batch's `campaign_id`, or None for a body
    that is not a batch's (a job's message; poison that is not a JSON object or names no
    valid campaign id). Only the campaign is read: a batch too broken to send still names it."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError, RecursionError):
        return None
    campaign_id = data.get("campaign_id") if isinstance(data, dict) else None
    if isinstance(campaign_id, str) and re.fullmatch(ID_PATTERN, campaign_id):
        return campaign_id
    return None
