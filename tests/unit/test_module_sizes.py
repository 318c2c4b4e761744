"""No module of the product over 500 lines (issue 34): the large rooms are split along their
seams, and nothing is excused. Product code is everything shipped or run as a tool: lambdas/,
src/, sendonce_cdk/, infra/ and bench/ (tests/ are not counted)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("lambdas", "src", "sendonce_cdk", "infra", "bench")
LIMIT = 500


def _modules() -> list[Path]:
    found = []
    for tree in TREES:
        base = ROOT / tree
        if base.is_dir():
            found += [p for p in base.rglob("*.py") if not any(part.startswith(".") for part in p.parts)]
    return sorted(found)


def too_large(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Every module over LIMIT lines, whatever its docstring says."""
    large = []
    for path in paths:
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > LIMIT:
            large.append(f"{path.relative_to(root)} ({lines} lines)")
    return large


def test_no_product_module_is_over_500_lines():
    assert len(_modules()) > 100, "too few modules found: wrong root?"
    assert too_large(_modules()) == []


def test_the_check_catches_a_large_module_even_with_a_reason(tmp_path):
    quiet = tmp_path / "big.py"
    quiet.write_text('"""A module."""\n' + "x = 1\n" * 600)
    said = tmp_path / "said.py"
    said.write_text('"""A module.\n\nOver 500 lines: one table.\n"""\n' + "x = 1\n" * 600)
    small = tmp_path / "small.py"
    small.write_text("x = 1\n")
    assert too_large([quiet, said, small], root=tmp_path) == ["big.py (601 lines)", "said.py (604 lines)"]
