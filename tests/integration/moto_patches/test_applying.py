"""Applying the patches: patched moto answers the ledger's calls as stock moto does; the version
guard; applying twice; reverting; a patch that fails halfway."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.models.table import Table
from packaging.requirements import Requirement

from sendonce_local import moto_patches
from tests.integration.moto_patches.helpers import (
    PATCHED,
    ROOT,
    ledger_transcript,
    moto_as,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("profile", PATCHED)
def test_patched_moto_answers_the_ledger_s_calls_as_stock_moto_does(profile: str, stock_transcript: list[Any]) -> None:
    # Given the transcript of every kind of ledger call against stock moto (it does refuse
    # some of them: the transcript must hold refusals too)
    refusals = [entry for entry in stock_transcript if isinstance(entry, dict) and "error" in entry]
    assert {r["error"] for r in refusals} >= {
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
        "ValidationException",
    }

    # When the same calls run against patched moto
    with moto_as(profile) as ddb:
        patched = ledger_transcript(ddb)

    # Then every answer, refusal and item left behind is the same
    assert patched == stock_transcript


def _moto_attributes() -> dict[tuple[str, str], int]:
    """Identity of every attribute of everything the patches touch."""
    import moto.dynamodb.comparisons as comparisons
    import moto.dynamodb.models as models
    import moto.dynamodb.parsing.ast_nodes as ast_nodes
    import moto.dynamodb.parsing.validators as validators
    import moto.dynamodb.responses as responses
    import moto.sesv2.urls as sesv2_urls
    from moto.sesv2.responses import SESV2Response
    from moto.sqs.models import Queue
    from moto.utilities.docker_utilities import DockerModel

    owners = (
        models,
        models.DynamoDBBackend,
        Table,
        DockerModel,
        responses,
        responses.DynamoHandler,
        comparisons.ConditionExpressionParser,
        validators,
        validators.OverlappingPathsValidator,
        validators.ActionCountValidator,
        ast_nodes.DepthFirstTraverser,
        Queue,
        SESV2Response,
        sesv2_urls,
    )
    return {
        (repr(owner), name): id(value)
        for owner in owners
        for name, value in vars(owner).items()
        if name != "instances_tracked"  # moto's own record of instances, replaced by each mock_aws
    }


def test_moto_version_is_the_pin_in_constraints() -> None:
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / "constraints.txt").read_text(), re.MULTILINE))
    assert pins["moto"] == moto_patches.MOTO_VERSION == moto_patches.installed_moto_version()


def test_the_packages_moto_range_allows_only_the_version_the_patches_know() -> None:
    # The `local` extra is what `pip install sendonce[local]` resolves: a range wider than the
    # guard's one version would install a moto the patches then refuse (issue 34).
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    motos = [Requirement(r) for reqs in extras.values() for r in reqs if Requirement(r).name == "moto"]
    assert motos, "no extra names moto: the check would pass vacuously"
    known = moto_patches.MOTO_VERSION
    major, minor, patch = (int(p) for p in known.split("."))
    neighbours = [f"{major}.{minor}.{patch + 1}", f"{major}.{minor + 1}.0", f"{major + 1}.0.0"]
    if patch:
        neighbours.append(f"{major}.{minor}.{patch - 1}")
    for requirement in motos:
        assert requirement.specifier.contains(known), f"{requirement} excludes moto {known}"
        assert [v for v in neighbours if requirement.specifier.contains(v)] == [], (
            f"{requirement} is wider than {known}"
        )


def test_another_moto_version_is_refused_loudly_before_anything_is_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given another moto than the patches were written for
    monkeypatch.setattr(moto_patches, "installed_moto_version", lambda: "5.3.0")
    stock = _moto_attributes()

    # When the patches are applied, then they refuse, naming both versions and what to do
    for speed in (False, True):
        with pytest.raises(moto_patches.MotoVersionError) as refused:
            moto_patches.apply(speed=speed)
        message = str(refused.value)
        assert "moto 5.3.0 is installed" in message and f"written for moto {moto_patches.MOTO_VERSION}" in message
        assert "constraints.txt" in message and "MOTO_VERSION" in message

    # And moto is as it was
    assert moto_patches.applied() == ()
    assert _moto_attributes() == stock


def test_applying_twice_is_harmless_and_reverting_restores_stock_moto(stock_transcript: list[Any]) -> None:
    stock = _moto_attributes()

    # Given the patches applied
    first = moto_patches.apply(speed=True)
    patched = _moto_attributes()
    assert patched != stock
    assert first == tuple(p.__name__ for p in moto_patches.DEFECT_FIXES + moto_patches.SPEED_PATCHES)

    # When they are applied again (also the fixes alone)
    assert moto_patches.apply(speed=True) == first
    assert moto_patches.apply() == first

    # Then nothing was wrapped twice, and moto answers as before
    assert _moto_attributes() == patched
    with mock_aws():
        assert ledger_transcript(boto3.client("dynamodb")) == stock_transcript

    # And reverting puts back every attribute as stock moto had it
    moto_patches.revert()
    assert moto_patches.applied() == ()
    assert _moto_attributes() == stock


def test_the_speed_patches_go_on_top_of_fixes_applied_earlier(stock_transcript: list[Any]) -> None:
    # Given a process that applied the fixes only (as MotoServer's does)
    assert moto_patches.apply() == tuple(p.__name__ for p in moto_patches.DEFECT_FIXES)

    # When the speed patches follow, then the order is the same as applying both at once
    assert moto_patches.apply(speed=True) == tuple(
        p.__name__ for p in moto_patches.DEFECT_FIXES + moto_patches.SPEED_PATCHES
    )
    with mock_aws():
        ddb = boto3.client("dynamodb")
        assert ledger_transcript(ddb) == stock_transcript


def test_a_patch_that_fails_halfway_leaves_moto_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.dynamodb.models.table import Table as TableClass

    def breaks_halfway(replace: moto_patches.Replace) -> None:
        replace(TableClass, "query", lambda *args: None)
        raise RuntimeError("moto changed under this patch")

    monkeypatch.setattr(moto_patches, "SPEED_PATCHES", (breaks_halfway,))
    stock = _moto_attributes()
    fixes = moto_patches.apply()

    with pytest.raises(RuntimeError, match="moto changed"):
        moto_patches.apply(speed=True)

    assert moto_patches.applied() == fixes
    moto_patches.revert()
    assert _moto_attributes() == stock
