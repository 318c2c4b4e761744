"""Services are built whole (STYLE.md): the jobs service and the campaign service get every
collaborator in their constructors, and no module sets an attribute on either once built (a
job kind's work is an entry in the mapping the jobs service is given, not a slot filled later).

Read from the source: an assignment to an attribute (or an item of one) of a name bound to a
built JobService or CampaignService (from their constructors, the wiring's builders or a
campaign service's `jobs`), or of any `.jobs` / `._jobs`, in lambdas/, src/ or bench/.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.jobs.service import JobService
from tests.fakes import FakeCampaignStore, FakeLedger, FakeQueue

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("lambdas", "src", "bench")
# The constructors and the wiring's builders of either (sendonce/wiring/api.py, jobs.py).
BUILDERS = {
    "JobService",
    "CampaignService",
    "job_service",
    "build_job_service",
    "campaign_service",
    "build_campaign_service",
}
JOBS_ATTRIBUTES = {"jobs", "_jobs"}


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return None


def _is_service(expr: ast.AST) -> bool:
    """An expression that builds or reads a built service."""
    return any(
        _called(node) in BUILDERS or (isinstance(node, ast.Attribute) and node.attr in JOBS_ATTRIBUTES)
        for node in ast.walk(expr)
    )


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def settings_on_built_services(source: str) -> Iterator[tuple[int, str]]:
    tree = ast.parse(source)
    services = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _is_service(node.value)
        for target in _targets(node)
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(tree):
        for target in _targets(node):
            slot = target.value if isinstance(target, ast.Subscript) else target
            if not isinstance(slot, ast.Attribute):
                continue
            owner = slot.value
            if (isinstance(owner, ast.Name) and owner.id in services) or (
                isinstance(owner, ast.Attribute) and owner.attr in JOBS_ATTRIBUTES
            ):
                yield node.lineno, ast.unparse(target)


def test_no_module_sets_an_attribute_on_a_built_jobs_or_campaign_service():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for base in SCANNED
        for path in sorted((ROOT / base).rglob("*.py"))
        for line, target in settings_on_built_services(path.read_text())
    ]
    assert not found, "set on a built service (pass it to the constructor, in wiring):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "jobs = job_service(settings)\njobs.auditor = build_auditor(lambda: settings, clients)",
        "jobs = build_job_service(settings, clients)\njobs.work[JobKind.AUDIT] = audit",
        "service = build_campaign_service(settings, clients)\nservice.auditor = build_auditor(settings, clients)",
        "service = service or campaign_service(settings)\nservice.jobs.auditor = make()",
        "self._jobs.on_finished = self.job_finished",
        "jobs = JobService(jobs=store)\njobs.parted[JobKind.PUBLISH_S3] = S3Publish(service=service)",
    ],
)
def test_the_check_sees_each_way_a_built_service_was_given_its_collaborators(source):
    assert list(settings_on_built_services(source))


def test_a_built_service_has_no_public_slot_to_fill():
    campaigns = CampaignService(
        campaigns=FakeCampaignStore(), ledger=FakeLedger(), queue=FakeQueue(), provider_names=["ses"]
    )
    for service in (campaigns, campaigns.jobs):
        public = sorted(name for name in vars(service) if not name.startswith("_"))
        assert public == [], f"{type(service).__name__} has public attributes to set: {public}"
    assert isinstance(campaigns.jobs, JobService)
