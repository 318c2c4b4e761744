"""`sendonce campaign publish --streams N`: a recipient file published in N parallel streams.

Each stream publishes chunks of 1,000 recipients through `CampaignService.publish`, as one
request to the operator API does (`sendonce_client.streams` runs them: the first chunk
alone, then up to N in flight, at most N + 1 chunks held). Batches are packed within a
chunk, so the same file makes the same batches with any N ≥ 2 and as the API does; a
re-run enqueues nothing twice. A scheduled publish (`--at`, or a draft whose spec has
`send_at`) goes in one stream: scheduling is one transition, not one per chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from sendonce.domain.campaigns.recipients_file import (
    RejectedFileError,
    Row,
    RowTally,
    publish_file,
    require_some,
)
from sendonce.domain.campaigns.service import CampaignService, PublishReport
from sendonce.domain.errors import InvalidCampaignError
from sendonce.domain.models import CampaignState, Recipient
from sendonce_client.streams import Chunk, check_streams, merged_ranges, run_in_streams

# As many recipients as one publish request to the operator API carries.
CHUNK_RECIPIENTS = 1000


def publish_file_in_streams(
    service: CampaignService,
    campaign_id: str,
    rows: Callable[[], Iterable[Row]],
    *,
    streams: int,
    name: str,
    strict: bool,
    dedupe_addresses: bool = False,
    on_report: Callable[[Row], None] | None = None,
    batch_size: int = 100,
    on_batch: Callable[[PublishReport], None] | None = None,
    send_at_ms: int | None = None,
) -> tuple[PublishReport, RowTally]:
    """`recipients_file.publish_file` with `streams` chunks in flight (1: exactly it)."""
    check_streams(streams)
    campaign = service.get(campaign_id)  # an unknown campaign fails before the file is read
    scheduled = send_at_ms is not None or (campaign.state is CampaignState.DRAFT and campaign.send_at_ms is not None)
    if streams == 1 or scheduled:
        return publish_file(
            service,
            campaign_id,
            rows,
            name=name,
            strict=strict,
            dedupe_addresses=dedupe_addresses,
            on_report=on_report,
            batch_size=batch_size,
            on_batch=on_batch,
            send_at_ms=send_at_ms,
        )
    if strict:
        check = RowTally(dedupe_addresses=dedupe_addresses)
        check.validate(rows(), on_report)
        if check.bad:
            raise RejectedFileError(name, check)
    tally = RowTally(dedupe_addresses=dedupe_addresses)
    recipients = require_some(tally.recipients(rows(), None if strict else on_report), name)
    report = publish_in_streams(
        service, campaign_id, recipients, streams=streams, batch_size=batch_size, on_batch=on_batch
    )
    return report, tally


def publish_in_streams(
    service: CampaignService,
    campaign_id: str,
    recipients: Iterable[Recipient],
    *,
    streams: int,
    batch_size: int = 100,
    chunk_recipients: int = CHUNK_RECIPIENTS,
    on_batch: Callable[[PublishReport], None] | None = None,
) -> PublishReport:
    """Recipients (repeats already dropped) published in chunks, `streams` at once; the
    reports summed. A chunk refused raises its error once the chunks in flight finished;
    an `InvalidCampaignError`'s message then says which recipients (counted from 0 in
    `recipients`) landed."""
    total = PublishReport(campaign_id=campaign_id)
    landed: list[tuple[int, int, int]] = []

    def send(chunk: Chunk[list[Recipient]]) -> PublishReport:
        return service.publish(campaign_id, chunk.items, batch_size=batch_size)

    def done(chunk: Chunk[list[Recipient]], report: PublishReport) -> None:
        total.accepted += report.accepted
        total.duplicates_in_input.extend(report.duplicates_in_input)
        total.batches_new += report.batches_new
        total.batches_already_enqueued += report.batches_already_enqueued
        total.messages_sent += report.messages_sent
        total.batches_recorded += report.batches_recorded
        landed.append((chunk.index, chunk.first, chunk.last))
        if on_batch:
            on_batch(total)

    failures = run_in_streams(_chunks(recipients, chunk_recipients), send, streams=streams, landed=done)
    if failures:
        error = failures[0].error
        if isinstance(error, InvalidCampaignError):
            ranges = ", ".join(f"{first}-{last}" for first, last in merged_ranges(landed)) or "none"
            failed = ", ".join(f"{f.first}-{f.last}" for f in failures)
            message = f"{error} (published in {streams} streams: recipients {ranges} landed, {failed} did not)"
            try:
                described = type(error)(message)
            except TypeError:  # an error type that takes more than a message
                raise error from None
            raise described from error
        raise error
    return total


def _chunks(recipients: Iterable[Recipient], size: int) -> Iterator[Chunk[list[Recipient]]]:
    chunk: list[Recipient] = []
    index = position = 0
    for recipient in recipients:
        chunk.append(recipient)
        position += 1
        if len(chunk) == size:
            yield Chunk(index, position - size, position - 1, chunk)
            chunk, index = [], index + 1
    if chunk:
        yield Chunk(index, position - len(chunk), position - 1, chunk)
