"""cfn-lint: no errors in the synthesized templates (warnings are listed, not failed)."""

from __future__ import annotations

import pytest
from cfnlint.api import ManualArgs, lint_file

from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.infra

REGIONS = ["us-east-1", "eu-west-1"]
# W3005 (DependsOn already implied by a GetAtt) is how CDK writes a function's
# dependency on its role's policy; harmless.
KNOWN_WARNINGS = {"W3005"}


def test_cfn_lint_finds_no_errors(assembly: Synthesized) -> None:
    template = assembly.outdir / f"{assembly.config.stack_name}.template.json"

    matches = lint_file(template, config=ManualArgs(regions=REGIONS))

    errors = [f"{m.rule.id} {m.message} at {'/'.join(map(str, m.path))}" for m in matches if m.rule.id.startswith("E")]
    warnings = sorted({m.rule.id for m in matches if m.rule.id.startswith("W")})
    assert errors == []
    assert set(warnings) <= KNOWN_WARNINGS, f"new cfn-lint warnings: {warnings}"
