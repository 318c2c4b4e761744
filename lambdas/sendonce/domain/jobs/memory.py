"""Jobs kept in process (JobStore), for tests and a service that runs its jobs there."""

from __future__ import annotations

from sendonce.domain.errors import JobNotFoundError
from sendonce.domain.jobs.models import Job


class InMemoryJobStore:
    """Jobs kept in process, for a service that runs its jobs there (no jobs queue): the job
    still goes a page a step, but nothing outlives the call."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}

    def create(self, job: Job) -> Job:
        return self.jobs.setdefault(job.job_id, job)

    def get(self, job_id: str) -> Job:
        if job_id not in self.jobs:
            raise JobNotFoundError(f"job {job_id!r} does not exist")
        return self.jobs[job_id]

    def advance(self, old: Job, new: Job) -> bool:
        if self.jobs[old.job_id].version != old.version:
            return False
        self.jobs[old.job_id] = new
        return True
