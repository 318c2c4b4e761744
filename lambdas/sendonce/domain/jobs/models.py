"""A job: long work on a campaign (O(recipients)) done in pages by a worker, never inside an
API call or the consumer. Its item records where it is (`cursor`), what it did so far and
its `version`; each page is one step, and a step that finds the job moved on does nothing."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

LISTED_MOST = 1_000


class JobKind(StrEnum):
    # Publish once more every published recipient whose delivery is in the given states
    # (resume: not ended; cancel: not ended, so that consumers close each one).
    REPUBLISH = "republish"
    # Count the campaign's ledger records by state, shard by shard, then compare the counts
    # with the counters: the drifts are the job's result.
    RECONCILE = "reconcile"
    # Publish a recipient file from S3 in parts (byte ranges), each part a step of its own
    # that any worker takes, in parallel (domain/campaigns/s3_publish.py).
    PUBLISH_S3 = "publish_s3"
    # Forecast a recipient file in S3 (domain/campaigns/s3_forecast.py): each byte range's
    # audience counted by a part, the forecast timed once from the merged counts. Reads only.
    FORECAST_S3 = "forecast_s3"
    # Set the provider's own record of the campaign against the ledger (domain/audit): one
    # step runs the whole audit (the provider's listing is read newest first, in one pass).
    AUDIT = "audit"
    # `resume --include-unknown`: reopen the eligible unknown deliveries a page at a time,
    # then resume the campaign (whose republish is a job of its own).
    RESUME_UNKNOWN = "resume_unknown"
    # A started campaign's recorded batches that never reached the queue (a schedule's start;
    # a publish after an unschedule), a page a step, under the start's own publish lease
    # (params["holder"]), which the last step ends.
    ENQUEUE_RECORDED = "enqueue_recorded"


class JobState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Job(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: str
    kind: JobKind
    campaign_id: str
    state: JobState = JobState.RUNNING
    params: dict[str, Any] = Field(default_factory=dict)
    # Where the next step starts (an opaque position in the campaign's batch records);
    # None before the first step.
    cursor: str | None = None
    steps: int = 0
    progress: dict[str, int] = Field(default_factory=dict)
    error: str | None = None
    # A job in parts: each part's outcome, recorded once (by the write that adds it here),
    # by part number; cleared when the job goes on to its next phase.
    parts: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Recipient ids a job names, by what happened to them (e.g. reopened), page by page;
    # at most LISTED_MOST each (the counts in `progress` are exact).
    listed: dict[str, list[str]] = Field(default_factory=dict)
    # What a finished job found (e.g. a reconciliation's drifts); None while it runs.
    result: dict[str, Any] | None = None
    by: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    version: int = 0

    @property
    def done(self) -> bool:
        return self.state is not JobState.RUNNING

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
