"""Building the wheel from a copy of the sources, for the tests that check what it holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# What the wheel is built from; nothing else of the checkout is copied.
SOURCES = ("pyproject.toml", "README.md", "lambdas", "src", "sendonce_cdk", "infra")


def copy_sources(root: Path) -> Path:
    """SOURCES copied under `root/source` (no stale build/ or egg-info)."""
    source = root / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
    return source


def build_wheel(root: Path, *, env: Mapping[str, str] | None = None) -> Path:
    """The wheel built from a copy of SOURCES into `root/dist` (build dependencies from the index)."""
    source = copy_sources(root)
    dist = root / "dist"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(source)],
        env=None if env is None else dict(env),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (
        f"pip wheel exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    (wheel,) = dist.glob("sendonce-*.whl")
    return wheel


def wheel_metadata(root: Path) -> Path:
    """The metadata the wheel's dist-info is made of (top_level.txt, SOURCES.txt), written by
    setuptools' egg_info from a copy of SOURCES with this Python's setuptools: no index, no
    `wheel` package, about a second."""
    source = copy_sources(root)
    result = subprocess.run(
        [sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "egg_info", "--egg-base", str(root)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, (
        f"egg_info exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    (egg_info,) = root.glob("sendonce.egg-info")
    return egg_info
