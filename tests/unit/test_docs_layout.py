"""docs/architecture.md's tree and the README's Layout name what is there, and the
architecture page names every package and module of the shipped code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"(?<![\w./-])([a-z_][\w]*(?:/[\w]+)*(?:\.py|/))(?![\w])")


def _tree(page: str, heading: str) -> str:
    text = (ROOT / page).read_text()
    section = text[text.index(heading) :]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    return next(b for b in blocks if "lambdas/sendonce/" in b)


def _exists(name: str) -> bool:
    name = name.rstrip("/")
    return any(True for _ in ROOT.glob(f"**/{name}") if "node_modules" not in _.parts and ".venv" not in _.parts)


@pytest.mark.parametrize(("page", "heading"), [("docs/architecture.md", "## The layers"), ("README.md", "## Layout")])
def test_every_file_and_folder_the_tree_names_exists(page, heading):
    named = set(NAME.findall(_tree(page, heading)))
    assert len(named) > 10, "the tree names nothing: this test would pass vacuously"
    assert sorted(n for n in named if not _exists(n)) == []


def test_the_architecture_tree_names_every_shipped_package_and_module():
    tree = _tree("docs/architecture.md", "## The layers")
    named = {n.rstrip("/").rsplit("/", 1)[-1].removesuffix(".py") for n in NAME.findall(tree)}
    named |= {w for w in re.findall(r"[a-z_]+", tree)}
    missing = []
    for base in (ROOT / "lambdas" / "sendonce", ROOT / "src" / "sendonce_local", ROOT / "src" / "sendonce_ops"):
        for path in base.rglob("*.py"):
            stem = path.parent.name if path.name == "__init__.py" else path.stem
            if stem not in named:
                missing.append(str(path.relative_to(ROOT)))
    assert missing == []
