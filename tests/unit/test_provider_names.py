"""A provider is one room (issue 21, docs/architecture.md "Providers"): outside its folder
(`sendonce/adapters/providers/<name>/`), the provider registries and the CDK provider modules
(`sendonce_cdk/providers/`), nothing in the shipped code, the CLI or the construct names a
provider, as a string or by importing its folder; everything else reads the registry.

The local tooling (sendonce_local: moto for SES, the local Resend server, the demo) and the
benchmark stand in for the providers themselves and are not held to this.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sendonce.adapters.providers.registry import registered

ROOT = Path(__file__).resolve().parents[2]
NAMES = frozenset(registered())
# Where provider names may not appear, and the places inside them where they belong.
CHECKED = (
    ROOT / "lambdas" / "sendonce",
    ROOT / "sendonce_cdk",
    ROOT / "infra" / "sendonce_infra",
    ROOT / "src" / "sendonce_ops",
)
ALLOWED = (ROOT / "lambdas" / "sendonce" / "adapters" / "providers", ROOT / "sendonce_cdk" / "providers")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def provider_names_in(source: str, names: frozenset[str] = NAMES) -> Iterator[tuple[int, str]]:
    """(line, what) for each string that is a provider's name or holds it as a word of a
    name-like string without spaces ("ses_send_rate", "aws.ses", "/webhooks/resend", any
    case), and each import of a provider's folder. Prose (docstrings, comments, messages
    with spaces) may name them."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value.strip().lower()
            if text and not any(c.isspace() for c in text) and set(re.split(r"[^a-z0-9]+", text)) & names:
                yield node.lineno, repr(node.value)
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:3] == ["sendonce", "adapters", "providers"] and len(parts) > 3 and parts[3] in names:
                yield node.lineno, f"from {node.module} import ..."
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:3] == ["sendonce", "adapters", "providers"] and len(parts) > 3 and parts[3] in names:
                    yield node.lineno, f"import {alias.name}"


def _checked_files() -> Iterator[Path]:
    for base in CHECKED:
        for path in sorted(base.rglob("*.py")):
            if not any(path.is_relative_to(allowed) for allowed in ALLOWED):
                yield path


def test_no_module_outside_the_providers_rooms_names_a_provider():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in _checked_files()
        for line, what in provider_names_in(path.read_text())
    ]
    assert found == []


def test_the_check_covers_the_modules_that_once_named_providers():
    checked = {path.relative_to(ROOT).as_posix() for path in _checked_files()}
    assert {
        "lambdas/sendonce/wiring/consumer.py",
        "lambdas/sendonce/wiring/providers.py",
        "lambdas/sendonce/settings.py",
        "lambdas/sendonce/handlers/events.py",
        "lambdas/sendonce/domain/campaigns/spec.py",
        "lambdas/sendonce/domain/deliverability/provider_events.py",
        "sendonce_cdk/config.py",
        "sendonce_cdk/construct.py",
        "src/sendonce_ops/cost/model.py",
        "src/sendonce_ops/cost/prices.py",
    } <= checked


@pytest.mark.parametrize(
    "source",
    [
        'PROVIDERS = ("ses", "resend")',
        'if event.get("source") == "aws.ses": pass',
        'settings["resend_api_key_secret"] = name',
        'rates = {"SES": 14.0}',
        "from sendonce.adapters.providers.ses.sender import SesProvider",
        "import sendonce.adapters.providers.resend.webhooks",
        'path = f"/webhooks/resend"',
    ],
)
def test_the_check_finds_a_provider_named_outside_its_room(source):
    assert list(provider_names_in(source)) != []


@pytest.mark.parametrize(
    "source",
    [
        '"""Provider events: SES events from EventBridge, Resend webhooks over HTTP."""',
        "# SES has no idempotency key\nx = 1",
        'description = "sendonce: provider events into the ledger"',
        "from sendonce.adapters.providers.registry import registered",
        'reason = "the key was used for other content"',
    ],
)
def test_the_check_lets_prose_and_the_registry_be(source):
    assert list(provider_names_in(source)) == []
