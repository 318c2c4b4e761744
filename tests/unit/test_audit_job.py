"""The audit job (domain/jobs): one step runs the campaign's audit, read-only; its summary is
the job's result, and an audit that cannot run fails the job with the reason."""

from __future__ import annotations

from collections import Counter

from sendonce.domain.audit.service import AuditOutsideRetentionError, AuditResult
from sendonce.domain.jobs.models import JobKind, JobState
from sendonce.domain.jobs.service import InMemoryJobStore, JobService
from sendonce.domain.jobs.work import Audit
from tests.unit.helpers import World


class FakeAudit:
    def __init__(self, result: AuditResult | None = None, error: Exception | None = None):
        self.result, self.error, self.runs = result, error, []

    def run(self, campaign_id: str, *, settle: bool = False) -> AuditResult:
        self.runs.append((campaign_id, settle))
        if self.error:
            raise self.error
        assert self.result is not None
        return self.result


def jobs(auditor=None) -> JobService:
    world = World()
    world.campaign("c1")
    return JobService(
        jobs=InMemoryJobStore(),
        queue=None,
        campaigns=world.campaigns,
        clock=lambda: "2026-12-02T00:00:00.000+00:00",
        # No auditor (no sending settings): this process cannot run an audit.
        work={} if auditor is None else {JobKind.AUDIT: Audit(campaigns=world.campaigns, auditor=auditor)},
    )


def found(**counts: int) -> AuditResult:
    result = AuditResult(
        campaign_id="c1",
        provider="resend",
        window_from_ms=0,
        listing_read_at_ms=1,
        retention_ms=None,
        complete=True,
        proves_absence=True,
        settled=False,
        counts=Counter(counts),
    )
    result.duplicates = {"r2": ["e1", "e2"]} if counts.get("duplicate") else {}
    return result


def test_an_audit_job_keeps_the_summary_and_digest_and_settles_nothing():
    fake = FakeAudit(found(sent_once=4, duplicate=1))
    service = jobs(lambda provider: fake)

    job = service.start_audit("c1", by="ops")

    assert job.kind is JobKind.AUDIT and job.state is JobState.DONE and job.steps == 1
    assert fake.runs == [("c1", False)]
    assert job.result["clean"] is False and job.result["duplicates"] == ["r2"]
    assert job.result["digest"] == fake.result.artefact()["digest"]
    assert job.progress["recipients_judged"] == 5


def test_an_audit_that_cannot_run_fails_the_job_with_the_reason():
    too_late = jobs(lambda provider: FakeAudit(error=AuditOutsideRetentionError("must run before 2026-11-30")))
    no_settings = jobs(None)

    late, unset = too_late.start_audit("c1", by="ops"), no_settings.start_audit("c1", by="ops")

    assert late.state is JobState.FAILED and late.error == "audit: must run before 2026-11-30"
    assert unset.state is JobState.FAILED and "no sending settings" in unset.error
