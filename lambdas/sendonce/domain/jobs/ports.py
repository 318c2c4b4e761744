"""What jobs need from the outside world: where a job is kept (moved on only by a write
conditional on its version) and the queue that asks a worker for its next step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sendonce.domain.jobs.models import Job


class JobStore(Protocol):
    """Jobs (domain/jobs): each moved on only by a write conditional on its version."""

    def create(self, job: Job) -> Job:
        """Record a new job; when one with its id exists, that one is returned unchanged."""
        ...

    def get(self, job_id: str) -> Job:
        """Raises JobNotFoundError."""
        ...

    def advance(self, old: Job, new: Job) -> bool:
        """Replace `old` with `new` if it is still at `old.version`; False if it moved."""
        ...


class JobQueue(Protocol):
    def submit(self, job_id: str) -> None:
        """Ask a worker for the job's next step."""
        ...

    def submit_parts(self, job_id: str, parts: Iterable[int]) -> None:
        """Ask workers for these parts of a job in parts, one message each."""
        ...
