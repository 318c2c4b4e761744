"""What a job's step hands back to the engine (domain/jobs/service.py): a page of a
paged job, or the end of a phase of a job in parts, and the work of a kind done in parts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sendonce.domain.jobs.models import Job, JobState


@dataclass(frozen=True)
class Page:
    """What one step did: where the next starts (None: the job is finished) and its counts."""

    cursor: str | None
    progress: dict[str, int] = field(default_factory=dict)
    # The last page's (cursor None): what the job found, from its whole progress.
    result: Callable[[dict[str, int]], dict[str, Any]] | None = None
    listed: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PhaseEnd:
    """What a job in parts does once every part of its phase is recorded: finish (DONE or
    FAILED, with its result or error), or go on to a next phase of `parts` parts."""

    state: JobState = JobState.RUNNING
    result: dict[str, Any] | None = None
    error: str | None = None
    params: dict[str, Any] = field(default_factory=dict)  # merged into the job's (next phase)


class PartedWork(Protocol):
    """The work of one kind of job in parts (each part on any worker, in any order)."""

    def part(self, job: Job, part: int) -> dict[str, Any]:
        """Do one part; its outcome (JSON), of which `counts` (name -> int) go into the
        job's progress. Safe to repeat: a part done twice is recorded once."""
        ...

    def phase_end(self, job: Job) -> PhaseEnd:
        """Every part of the job's phase recorded (`job.parts`): what comes next."""
        ...
