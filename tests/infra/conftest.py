"""Synthesize the CDK app once per session per configuration.

Synthesis costs seconds (jsii start-up, bundling, cdk-nag), so every test reads the
same cloud assemblies: `default_assembly` is a bare `cdk synth` (the feature flags
only); `full_assembly` turns on every optional part (both providers, a named SES
configuration set, on-call subscriptions, one-click unsubscribe, a recipients bucket,
destroy removal policy).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_NODE_22 = Path(__file__).resolve().parents[2] / "node_modules" / "node" / "bin" / "node"
# Before anything imports aws_cdk (which starts jsii): run jsii on the pinned Node 22.
if "JSII_NODE" not in os.environ and _NODE_22.exists():
    os.environ["JSII_NODE"] = str(_NODE_22)
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")

from tests.infra.synthesis import FULL_CONTEXT, Synthesized, synthesize  # noqa: E402


@pytest.fixture(scope="session")
def default_assembly(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory, "cdk-default", {})


@pytest.fixture(scope="session")
def full_assembly(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory, "cdk-full", FULL_CONTEXT)


@pytest.fixture(scope="session", params=["default", "full"])
def assembly(request: pytest.FixtureRequest) -> Synthesized:
    """Each behaviour check runs on both configurations."""
    return request.getfixturevalue(f"{request.param}_assembly")
