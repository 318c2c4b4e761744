"""The layering rules of docs/architecture.md, read from the source (every import statement,
module level, inside a function or in an `if TYPE_CHECKING:` block: a type-only import is
still a dependency a reader follows, and it closes a cycle as any other does).

- the domain imports no SDK (boto3, botocore, resend), no Powertools, no `os`, and nothing
  of sendonce outside the domain;
- nothing in lambdas/ imports the CDK, sendonce_infra, sendonce_cdk or the operator and local tooling;
- adapters never import handlers;
- the CLI (sendonce_ops) never imports handlers or the local tooling;
- no import cycles between modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Where each first-party top-level package lives.
PACKAGE_ROOTS = {
    "sendonce": ROOT / "lambdas",
    "sendonce_ops": ROOT / "src",
    "sendonce_local": ROOT / "src",
    "sendonce_client": ROOT / "src",
    "sendonce_cdk": ROOT,
    "sendonce_infra": ROOT / "infra",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # the module (or package) named, resolved against our modules
    line: int


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def first_party_modules() -> dict[str, Path]:
    modules = {}
    for package, base in PACKAGE_ROOTS.items():
        for path in sorted((base / package).rglob("*.py")):
            modules[module_name(path, base)] = path
    return modules


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def imports_of(name: str, source: str, modules: set[str], *, is_package: bool = False) -> list[Import]:
    """Every module `name` imports; `from a import b` counts as `a.b` when that is a module."""
    found = []
    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(Import(name, alias.name, node.lineno) for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            package = name if is_package else name.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}".strip(".")
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            found.append(Import(name, candidate if candidate in modules else base, node.lineno))
    return found


def all_imports() -> list[Import]:
    modules = first_party_modules()
    names = set(modules)
    found = []
    for name, path in modules.items():
        found.extend(imports_of(name, path.read_text(), names, is_package=path.name == "__init__.py"))
    return found


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


RULES: list[tuple[str, str, tuple[str, ...]]] = [
    # (rule, importers, forbidden imports)
    (
        "the domain uses no SDK, Powertools or os",
        "sendonce.domain",
        ("boto3", "botocore", "resend", "aws_lambda_powertools", "os", "svix"),
    ),
    (
        "the domain depends on nothing of sendonce outside it",
        "sendonce.domain",
        ("sendonce.adapters", "sendonce.handlers", "sendonce.wiring", "sendonce.settings", "sendonce.contract"),
    ),
    (
        "the Lambda code knows nothing of the CDK or the tooling",
        "sendonce",
        (
            "aws_cdk",
            "constructs",
            "cdk_nag",
            "sendonce_infra",
            "sendonce_cdk",
            "sendonce_ops",
            "sendonce_local",
            "moto",
        ),
    ),
    ("adapters never import handlers", "sendonce.adapters", ("sendonce.handlers",)),
    (
        "the CLI calls domain services, never handlers or local tooling",
        "sendonce_ops",
        ("sendonce.handlers", "sendonce_local"),
    ),
]


def violations(imports: list[Import]) -> list[str]:
    found = []
    for rule, importers, forbidden in RULES:
        for imp in imports:
            if within(imp.importer, importers) and any(within(imp.imported, f) for f in forbidden):
                found.append(f"{rule}: {imp.importer} imports {imp.imported} (line {imp.line})")
    return found


def cycles(imports: list[Import], modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        if imp.imported in modules and imp.imported != imp.importer:
            graph[imp.importer].add(imp.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


# --- the rules hold for the code ----------------------------------------------------------


def test_every_package_is_found():
    modules = first_party_modules()
    for package in PACKAGE_ROOTS:
        assert package in modules, f"{package} not found: the checks below would pass vacuously"
    assert "sendonce.domain.sending.delivery" in modules and "sendonce_ops.cli" in modules


def test_the_layering_rules_hold():
    assert violations(all_imports()) == []


def test_no_import_cycles():
    assert cycles(all_imports(), set(first_party_modules())) == []


def test_importing_the_cli_loads_no_handler_and_no_local_tooling():
    # The CLI registers `demo` and `local` lazily: only running them imports sendonce_local.
    probe = textwrap.dedent(
        """
        import sys
        import sendonce_ops.cli
        loaded = sorted(m for m in sys.modules if m.startswith(("sendonce.handlers", "sendonce_local")))
        print(",".join(loaded))
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == ""


# --- the checker itself catches each kind of breach ---------------------------------------

MODULES = {"sendonce.domain.x", "sendonce.adapters.y", "sendonce.handlers.api", "sendonce_ops.cli", "a", "b"}


@pytest.mark.parametrize(
    ("importer", "source", "rule"),
    [
        ("sendonce.domain.x", "import boto3", "no SDK"),
        ("sendonce.domain.x", "def f():\n    import os", "no SDK"),
        ("sendonce.domain.x", "from aws_lambda_powertools import Logger", "no SDK"),
        ("sendonce.domain.x", "from sendonce import wiring", "outside it"),
        ("sendonce.adapters.y", "from sendonce.handlers import api", "adapters never import handlers"),
        ("sendonce.adapters.y", "from aws_cdk import Stack", "knows nothing of the CDK"),
        ("sendonce_ops.cli", "from sendonce.handlers.api import app", "never handlers"),
        ("sendonce_ops.cli", "import sendonce_local.commands", "never handlers or local tooling"),
    ],
)
def test_the_checker_reports_each_breach(importer, source, rule):
    found = violations(imports_of(importer, source, MODULES | {"sendonce.wiring"}))
    assert len(found) == 1 and rule in found[0]


def test_the_checker_reads_type_checking_imports():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import boto3\n"
    assert len(violations(imports_of("sendonce.domain.x", source, MODULES))) == 1
    # ... and a type-only import closes a cycle as any other does
    imports = imports_of("a", "import b", MODULES) + imports_of(
        "b", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import Thing\n", MODULES
    )
    assert cycles(imports, MODULES) == [["a", "b"]]


def test_the_checker_finds_a_cycle():
    imports = imports_of("a", "import b", MODULES) + imports_of("b", "def f():\n    from a import thing", MODULES)
    assert cycles(imports, MODULES) == [["a", "b"]]
