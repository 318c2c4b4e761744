"""Publishing a recipient file from S3 server-side, fanned out: a job in parts (domain/jobs).

The API checks the campaign and HEADs the object (its size, and the ETag and version that pin
it), then answers 202 with a `publish_s3` job. The object is cut into byte ranges of
RANGE_BYTES; each range is one part, one message on the jobs queue, taken by any worker in
parallel. A line belongs to the range where it starts (s3_ranges.py reads a range). Every
read is pinned to the ETag (and version) the HEAD saw, so a part run again reads the same
bytes, packs the same chunks and derives the same batch ids (content-addressed, as any
publish): it records nothing twice, and the ledger sends each recipient once whatever runs.

Strict (the default): a first phase checks every range, and publishes nothing if any row is
bad (the job fails naming each bad row by file line); then a second phase publishes every
range. Not strict: one phase publishes each range's good rows and reports the bad ones. A
part's outcome (its counts, its line count, its first problems) is recorded in the job once,
by the conditional write that adds it; the last part recorded ends the phase. Line numbers
are the file's: a part knows its lines' places within it, and the job adds the lines of the
parts before it once every part is recorded.

What a part cannot see: a recipient id (or, with dedupe_addresses, an address) repeated in
another range is not reported as a duplicate (each range is published, the ledger sends it
once); a CSV value quoted over several lines that a range boundary cuts is read as two bad
rows (publish such a file from the CLI, which reads it whole). Each part's publish takes and
ends the campaign's publish lease as any publish does: between two parts, a campaign whose
recipients so far have all ended may complete, and the next part's publish reopens it
(completed -> sending), as new recipients always do; nobody is lost or sent twice.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.ports import ObjectLines
from sendonce.domain.campaigns.recipients_file import (
    RecipientFileError,
    RecipientReader,
    RowTally,
    describe_row,
    format_for,
)
from sendonce.domain.campaigns.s3_ranges import (
    PROBLEM_CHARS,
    file_problems,
    header_shift,
    kept_per_part,
    pinned_params,
    range_lines,
)
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.errors import IllegalTransitionError
from sendonce.domain.jobs.models import Job, JobKind, JobState
from sendonce.domain.jobs.pages import PhaseEnd
from sendonce.domain.models import CampaignState

RANGE_BYTES = 2 * 1024 * 1024  # a part: ~20,000 lines of 100 bytes, 200 batch records
CHECK, PUBLISH = "check", "publish"


class S3Publish:
    """The `publish_s3` kind of job: given to JobService (`parted`) by the wiring."""

    def __init__(self, *, service: CampaignService, objects: ObjectLines, range_bytes: int = RANGE_BYTES):
        self._service = service
        self._objects = objects
        self._range_bytes = range_bytes

    def start(
        self,
        campaign_id: str,
        *,
        bucket: str,
        key: str,
        fmt: str | None,
        strict: bool,
        dedupe_addresses: bool,
        send_at_ms: int | None,
        by: str,
    ) -> Job:
        """Check the campaign and the object, then start the job (in the deployed stack the
        jobs worker runs its parts; without a jobs queue, they run here)."""
        campaign = self._service.get(campaign_id)  # raises CampaignNotFoundError
        event = CampaignEvent.SCHEDULE if send_at_ms is not None else CampaignEvent.PUBLISH
        if not lifecycle.can(event, campaign.state):
            what = "scheduled" if send_at_ms is not None else "published to"
            raise IllegalTransitionError(f"campaign {campaign_id!r} is {campaign.state.value}; it cannot be {what}")
        file_format = format_for(key, fmt)
        pinned = self._objects.head(bucket, key)
        if pinned.size == 0:
            raise RecipientFileError(f"s3://{bucket}/{key}: the file is empty; nothing was published")
        params = pinned_params(bucket, key, file_format, pinned, self._range_bytes)
        if send_at_ms is not None and not strict:
            self._schedule(campaign_id, send_at_ms, by)
        job = Job(
            job_id=f"{campaign_id}-{JobKind.PUBLISH_S3.value}-{uuid.uuid4().hex[:12]}",
            kind=JobKind.PUBLISH_S3,
            campaign_id=campaign_id,
            params={
                **params,
                "strict": strict,
                "dedupe_addresses": dedupe_addresses,
                "send_at_ms": send_at_ms,
                "phase": CHECK if strict else PUBLISH,
            },
            progress={"ranges": params["parts"]},
            by=by,
        )
        return self._service.jobs.start_parted(job)

    def _schedule(self, campaign_id: str, send_at_ms: int, by: str) -> None:
        """A draft scheduled with nothing yet: each part then records its batches into it
        (publishing to a scheduled campaign enqueues nothing until it starts)."""
        if self._service.get(campaign_id).state is CampaignState.DRAFT:
            self._service.acting_as(by).publish(campaign_id, [], send_at_ms=send_at_ms)

    # --- a part --------------------------------------------------------------------------

    def part(self, job: Job, part: int) -> dict[str, Any]:
        params = job.params
        lines: list[int] = [0]
        rows = RecipientReader(range_lines(self._objects, params, part, lines), params["format"], name=params["name"])
        shift = header_shift(params, part)
        tally = RowTally(dedupe_addresses=params["dedupe_addresses"], keep=kept_per_part(params))
        counts: dict[str, int] = {}
        if params["phase"] == CHECK:
            good = tally.validate(rows)
            counts = {"ranges_checked": 1, "rows_checked": good + tally.bad}
        else:
            recipients = tally.recipients(rows)
            first = next(recipients, None)
            good = 0
            if first is not None:
                service = self._service.acting_as(job.by or "sendonce (job)")
                report = service.publish(job.campaign_id, itertools.chain([first], recipients))
                good = report.accepted
                counts = {
                    "accepted": report.accepted,
                    "duplicates": len(report.duplicates_in_input),
                    "batches_new": report.batches_new,
                    "batches_already_enqueued": report.batches_already_enqueued,
                    "messages_sent": report.messages_sent,
                    "batches_recorded": report.batches_recorded,
                }
            counts = {
                **counts,
                "ranges_done": 1,
                "bad_rows": tally.bad,
                "duplicates": counts.get("duplicates", 0) + tally.duplicates,
                "duplicate_addresses": tally.duplicate_addresses,
            }
        problems = [
            [row.line - shift, describe_row(row, dedupe_addresses=tally.dedupe_addresses)[:PROBLEM_CHARS]]
            for row in tally.kept
        ]
        return {"counts": counts, "lines": lines[0] - shift, "good": good, "bad": tally.bad, "problems": problems}

    # --- the end of a phase --------------------------------------------------------------

    def phase_end(self, job: Job) -> PhaseEnd:
        params = job.params
        parts = [job.parts[str(n)] for n in range(int(params["parts"]))]
        problems = file_problems(parts)
        bad, good = sum(p["bad"] for p in parts), sum(p["good"] for p in parts)
        result = {"lines": sum(p["lines"] for p in parts), "problems": problems}
        if params["phase"] == CHECK and bad:
            shown = "; ".join(f"line {p}" for p in problems[:5])
            return PhaseEnd(
                state=JobState.FAILED,
                error=f"{params['name']}: {bad} bad row(s); nothing was published: {shown}",
                result=result,
            )
        if not good:
            return PhaseEnd(
                state=JobState.FAILED,
                error=f"{params['name']}: no valid recipient in the file; nothing was published",
                result=result,
            )
        if params["phase"] == CHECK:
            if params["send_at_ms"] is not None:
                self._schedule(job.campaign_id, params["send_at_ms"], job.by or "sendonce (job)")
            return PhaseEnd(params={"phase": PUBLISH})
        return PhaseEnd(state=JobState.DONE, result=result)
