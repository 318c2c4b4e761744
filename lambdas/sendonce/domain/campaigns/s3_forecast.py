"""Forecasting a recipient file in S3 server-side: a job in parts (domain/jobs), read-only.

The API checks the campaign and HEADs the object, then answers 202 with a `forecast_s3` job.
The object is cut into byte ranges (s3_ranges.py; RANGE_BYTES each) and each range is one
part, one message on the jobs queue: it reads its lines (pinned to the HEAD's ETag) and counts
its audience as forecast.py counts a file (bad rows, repeated ids, repeated addresses, the
suppressed ones read 100 addresses a request, per mailbox-provider group). A part's counts go
into the job's progress, and its groups and first problems into the job, by the one
conditional write that records it (a part run twice is counted once). The last part recorded
times the merged counts once: the campaign's share of its provider's rate among the campaigns
sending then, through its send window. The job's result is the forecast as the API answers an
inline one, plus `lines` and `parts`. Nothing is published and nothing is written but the job.

What a part cannot see: a recipient id, or an address, repeated in another range. Within a
range the counts are exact, as they are for an inline list or the CLI. Across ranges each
range counts its own first sighting, so for a file of more than one range `audience` is an
upper bound (it may count a recipient once per range it appears in), `repeated_ids` and
`duplicate_addresses` are lower bounds, and `suppressed` may count a suppressed address once
per range; the result says `"exact": false`. Ranges are large (RANGE_BYTES: ~80,000 lines of
100 bytes) so that most files are one range and exact; the CLI reads a file whole and is exact
whatever its size. A CSV value quoted over several lines that a range boundary cuts is read as
two bad rows, as for an S3 publish.
"""

from __future__ import annotations

import uuid
from typing import Any

from sendonce.domain.campaigns.forecast import AudienceCount
from sendonce.domain.campaigns.forecasting import ForecastService
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
from sendonce.domain.jobs.models import Job, JobKind, JobState
from sendonce.domain.jobs.pages import PhaseEnd

# A part reads its range and makes one suppression read per 100 addresses: ~80,000 lines of
# 100 bytes are 800 BatchGetItems, well inside the jobs worker's 5 minutes, and its ids and
# address fingerprints (what finds repeats) a few MB of memory. Larger than a publish's range
# (which also records and enqueues batches) so that more files are counted exactly.
RANGE_BYTES = 8 * 1024 * 1024
COUNT = "count"


class S3Forecast:
    """The `forecast_s3` kind of job: given to JobService (`parted`) by the wiring, with the
    `forecasts` it counts and times with (the API's forecast of an inline list uses the same)."""

    def __init__(
        self,
        *,
        service: CampaignService,
        forecasts: ForecastService,
        objects: ObjectLines,
        range_bytes: int = RANGE_BYTES,
    ):
        self._service = service
        self.forecasts = forecasts
        self._objects = objects
        self._range_bytes = range_bytes

    def start(
        self, campaign_id: str, *, bucket: str, key: str, fmt: str | None, dedupe_addresses: bool, by: str
    ) -> Job:
        """Check the campaign and the object, then start the job (in the deployed stack the
        jobs worker runs its parts; without a jobs queue, they run here)."""
        self._service.get(campaign_id)  # raises CampaignNotFoundError
        file_format = format_for(key, fmt)
        pinned = self._objects.head(bucket, key)
        if pinned.size == 0:
            raise RecipientFileError(f"s3://{bucket}/{key}: the file is empty; nothing to forecast")
        params = pinned_params(bucket, key, file_format, pinned, self._range_bytes)
        job = Job(
            job_id=f"{campaign_id}-{JobKind.FORECAST_S3.value}-{uuid.uuid4().hex[:12]}",
            kind=JobKind.FORECAST_S3,
            campaign_id=campaign_id,
            params={**params, "dedupe_addresses": dedupe_addresses, "phase": COUNT},
            progress={"ranges": params["parts"]},
            by=by,
        )
        return self._service.jobs.start_parted(job)

    def part(self, job: Job, part: int) -> dict[str, Any]:
        """Count one range's audience (reads only: the object's range, the suppression list)."""
        params = job.params
        lines: list[int] = [0]
        rows = RecipientReader(range_lines(self._objects, params, part, lines), params["format"], name=params["name"])
        shift = header_shift(params, part)
        tally = RowTally(dedupe_addresses=params["dedupe_addresses"], keep=kept_per_part(params))
        counted = self.forecasts.count(rows, tally)
        problems = [
            [row.line - shift, describe_row(row, dedupe_addresses=tally.dedupe_addresses)[:PROBLEM_CHARS]]
            for row in tally.kept
        ]
        return {
            "counts": {**counted.counts(), "ranges_done": 1},
            "groups": counted.groups,
            "lines": lines[0] - shift,
            "problems": problems,
        }

    def phase_end(self, job: Job) -> PhaseEnd:
        """Every range counted: the forecast of the merged counts, timed now."""
        params = job.params
        parts = [job.parts[str(n)] for n in range(int(params["parts"]))]
        # The counts are in the job's progress (each part's added by the write recording it).
        merged = AudienceCount.of(job.progress)
        for outcome in parts:
            merged = merged.plus(AudienceCount(groups=outcome["groups"]))
        forecast = self.forecasts.timed(job.campaign_id, merged, dedupe_addresses=bool(params["dedupe_addresses"]))
        result = {
            **forecast.view(problems=file_problems(parts), exact=int(params["parts"]) == 1),
            "lines": sum(p["lines"] for p in parts),
            "parts": int(params["parts"]),
        }
        return PhaseEnd(state=JobState.DONE, result=result)
