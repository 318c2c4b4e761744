"""Shared fixtures. Group new fixtures by what they stand up; keep each one small."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sendonce_local.moto_server import ENDPOINT_ENV, MotoServer
from sendonce_local.moto_server import aws_env as moto_aws_env

# --- moto's server ------------------------------------------------------------------

# A profile would win over the fake keys; this flag would make boto3 ignore AWS_ENDPOINT_URL.
_AWS_VARIABLES_TO_CLEAR = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """One moto server process for the whole session (or ``SENDONCE_MOTO_ENDPOINT``).

    Tests share it: name resources uniquely (e.g. with ``uuid``) instead of resetting it.
    It runs the demo's speed patches on top of the defect fixes: the suite is CPU-bound on a
    2-core machine and DynamoDB in stock moto is most of it (tests/integration/moto_patches
    checks each patch against stock moto; the model check runs stock moto in process).
    """
    with MotoServer(speed_patches=not os.environ.get(ENDPOINT_ENV)) as server:
        yield server


# --- order --------------------------------------------------------------------------
# `make test` runs files on several workers (--dist loadfile), handing them out in collection
# order. The longest files go first (seconds of a clean-clone CI run on this machine,
# 2026-12-03), so that the run does not end with one worker on a long file while the others
# stand idle. Order only: no test depends on it, and a file not named keeps its place after these.
LONGEST_FIRST = (
    "tests/chaos/test_consumer_faults.py",  # 174
    "tests/model/test_delivery_model.py",  # 160: three machines in one file
    "tests/infra/test_wheel.py",  # 142
    "tests/chaos/test_provider_and_ledger_faults.py",  # 127
    "tests/integration/test_client.py",  # 119
    "tests/integration/test_counters.py",  # 111
    "tests/infra/test_upgrade.py",  # 94
    "tests/integration/test_bench_smoke.py",  # 93
    "tests/integration/test_ledger_protocol.py",  # 88
    "tests/chaos/test_pause_resume_cancel.py",  # 87
    "tests/infra/test_deploy_moto.py",  # 82
    "tests/integration/test_cli.py",  # 74
    "tests/integration/test_deliverability.py",  # 66
    "tests/integration/test_campaign_audit.py",  # 63
    "tests/integration/test_api.py",  # 54
    "tests/integration/test_scheduled_sends.py",  # 50
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = Path(str(config.rootpath))
    items.sort(key=lambda item: rank.get(Path(str(item.path)).relative_to(root).as_posix(), len(rank)))


@pytest.fixture
def aws_env(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point every boto3 client built during the test, including inside code under test, at moto."""
    for name in _AWS_VARIABLES_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    env = moto_aws_env(moto.endpoint)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


# --- headless Chromium ---------------------------------------------------------------
# Debian's `chromium` (which `make test` and `.ci/run` install), driven by Playwright's Python
# client with that executable: no browser download. Each page records its console errors and
# every request it makes, for the tests to assert that none went anywhere.

CHROMIUM = Path("/usr/bin/chromium")
# The flags this machine needs (no sandbox as root; no background connections to Google).
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class Watched:
    page: object
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium) -> Iterator[Watched]:
    context = chromium.new_context(viewport={"width": 1280, "height": 1800})
    page = context.new_page()
    watched = Watched(page)
    page.on("console", lambda m: watched.console_errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: watched.console_errors.append(str(e)))
    page.on("request", lambda r: watched.requests.append(r.url))
    yield watched
    context.close()
