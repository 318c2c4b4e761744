"""cdk-nag AwsSolutions: no unacknowledged finding, and each acknowledgement says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.infra

# A new acknowledgement is a design decision: add it here on purpose, with its reason
# in SendonceStack._acknowledge_findings.
ACKNOWLEDGED = {
    "AwsSolutions-L1",  # Python 3.12, matching the bundle's cp312 wheels (all four functions)
    "AwsSolutions-IAM5[Resource::*]",  # ses:GetAccount only (SES is a provider in both assemblies)
    "AwsSolutions-APIG4",  # the public API: unsubscribe tokens and Svix signatures authorize, not IAM
    "AwsSolutions-SQS3",  # the events dead-letter queue is itself a DLQ (EventBridge, async invokes)
}
# Only with `recipients_bucket`: s3:GetObject on that bucket's objects (keys come with each publish).
RECIPIENT_FILES = "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{bucket}/*]"
# The operator API sets and deletes the schedules of the stack's one group (named per campaign).
SCHEDULES = (
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:scheduler:<AWS::Region>:<AWS::AccountId>:schedule/{group}/*]"
)


def _expected(synth: Synthesized) -> set[str]:
    bucket = synth.config.recipients_bucket
    [group] = [r["Properties"]["Name"] for r in synth.of_type("AWS::Scheduler::ScheduleGroup").values()]
    return (
        ACKNOWLEDGED | {SCHEDULES.format(group=group)} | ({RECIPIENT_FILES.format(bucket=bucket)} if bucket else set())
    )


def _aws_solutions(synth: Synthesized) -> dict:
    reports = [r for r in synth.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert len(reports) == 1, "cdk-nag AwsSolutions did not run"
    return reports[0]


def test_no_unacknowledged_findings(assembly: Synthesized) -> None:
    # Synthesis itself fails on a finding; the report confirms the pack ran and passed.
    report = _aws_solutions(assembly)
    assert report["conclusion"] == "success"
    assert report["violations"] == []


def test_acknowledgements_are_the_expected_ones_with_reasons(assembly: Synthesized) -> None:
    suppressed = _aws_solutions(assembly).get("suppressedViolations", [])
    assert {v["ruleName"] for v in suppressed} == _expected(assembly)
    for violation in suppressed:
        assert len(violation["reason"]) > 40, violation["ruleName"]


def test_a_new_finding_fails_synthesis(tmp_path: Path) -> None:
    """The app wires cdk-nag so that an unacknowledged finding stops `cdk synth`."""
    from aws_cdk import aws_sqs as sqs

    from sendonce_infra.app import build_app

    app, stack = build_app(outdir=str(tmp_path))
    sqs.Queue(stack, "PlainQueue")  # no DLQ, no enforced SSL

    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()

    report = (tmp_path / "validation-report.json").read_text()
    assert "AwsSolutions-SQS4" in report and "PlainQueue" in report
