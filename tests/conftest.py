"""Shared fixtures. Group new fixtures by what they stand up; keep each one small."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sendonce_local.moto_server import MotoServer
from sendonce_local.moto_server import aws_env as moto_aws_env

# --- moto's server ------------------------------------------------------------------

# A profile would win over the fake keys; this flag would make boto3 ignore AWS_ENDPOINT_URL.
_AWS_VARIABLES_TO_CLEAR = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """One moto server process for the whole session (or ``SENDONCE_MOTO_ENDPOINT``).

    Tests share it: name resources uniquely (e.g. with ``uuid``) instead of resetting it.
    """
    with MotoServer() as server:
        yield server


@pytest.fixture
def aws_env(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point every boto3 client built during the test, including inside code under test, at moto."""
    for name in _AWS_VARIABLES_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    env = moto_aws_env(moto.endpoint)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env
