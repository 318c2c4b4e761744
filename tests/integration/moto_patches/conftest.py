"""Every test here runs against in-process moto, stock before and after it: the patches a test
applies are reverted when it ends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sendonce_local import moto_patches
from tests.integration.moto_patches.helpers import (
    _in_process_aws,
    ledger_transcript,
    moto_as,
)


@pytest.fixture(autouse=True)
def in_process_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In-process AWS, and stock moto before and after each test."""
    _in_process_aws(monkeypatch)
    assert moto_patches.applied() == ()
    yield
    moto_patches.revert()


@pytest.fixture(scope="module")
def stock_transcript() -> list[Any]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _in_process_aws(monkeypatch)
        with moto_as("stock") as ddb:
            return ledger_transcript(ddb)


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Docker engine, even on a machine that has one."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/sendonce-no-docker.sock")
