"""The published contracts, generated from the models: what a producer in another language
needs to talk to sendonce without reading its Python.

    schemas/batch-message.v1.json   the SQS message body (sendonce.domain.models.BatchMessage)
    schemas/campaign-spec.v1.json   a campaign spec (sendonce.domain.campaigns.spec.CampaignSpec)
    docs/openapi.json               the operator API, as it serves it at GET /openapi.json
    docs/ledger.md, docs/operations-campaigns.md   their generated blocks: the delivery protocol's
                                    and the campaign lifecycle's diagrams and tables

`python -m sendonce_local.generated_files --write` (or `make contracts`) regenerates them;
`--check` exits 1 naming each file that differs from the code (tests/unit/test_contracts.py
does the same, so a model change without regenerated contracts fails the suite).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sendonce.domain import limits

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# URNs: stable names that promise no download location (the files live in this repository).
BATCH_MESSAGE_ID = "urn:sendonce:schema:batch-message:v1"
CAMPAIGN_SPEC_ID = "urn:sendonce:schema:campaign-spec:v1"

BATCH_MESSAGE_PATH = "schemas/batch-message.v1.json"
CAMPAIGN_SPEC_PATH = "schemas/campaign-spec.v1.json"
OPENAPI_PATH = "docs/openapi.json"

# What the validators enforce but JSON Schema cannot say; stated in the schema's description.
_BATCH_MESSAGE_NOTES = (
    "The body of one SQS message of sendonce's campaign queue: up to 100 recipients of one campaign. "
    "Beyond this schema, recipient_id must be unique within a batch (a repeat makes the message poison). "
    "batch_id is content-addressed: docs/messages.md says how to compute it."
)
_CAMPAIGN_SPEC_NOTES = (
    "A campaign as an operator writes it: the body of POST /campaigns, or a spec file for `sendonce campaign "
    "create` (which also takes html_file / text_file). Beyond this schema, html and text are at most their size "
    f"in UTF-8 bytes (docs/limits.md), the campaign's and its variants' together at most {limits.TEMPLATES_BYTES:,}; "
    "variant ids are unique; and the templates must compile."
)


def _schema(model: type[BaseModel], *, schema_id: str, description: str) -> dict[str, Any]:
    generated = model.model_json_schema(mode="validation", by_alias=True)
    generated.pop("description", None)
    return {"$schema": JSON_SCHEMA_DIALECT, "$id": schema_id, "description": description, **generated}


def batch_message_schema() -> dict[str, Any]:
    from sendonce.domain.models import BatchMessage

    return _schema(BatchMessage, schema_id=BATCH_MESSAGE_ID, description=_BATCH_MESSAGE_NOTES)


def campaign_spec_schema() -> dict[str, Any]:
    """The spec's schema, with the provider registry's answer to which providers exist and
    which accept batch mode (the domain's model knows no provider's name)."""
    from sendonce.adapters.providers import registry
    from sendonce.domain.campaigns.spec import CampaignSpec

    return registry.annotate_spec_schema(
        _schema(CampaignSpec, schema_id=CAMPAIGN_SPEC_ID, description=_CAMPAIGN_SPEC_NOTES)
    )


def openapi_document() -> dict[str, Any]:
    """The document the API serves at GET /openapi.json (the same call, parsed)."""
    from sendonce.handlers import api

    return json.loads(api.document())


CONTRACTS: dict[str, Callable[[], dict[str, Any]]] = {
    BATCH_MESSAGE_PATH: batch_message_schema,
    CAMPAIGN_SPEC_PATH: campaign_spec_schema,
    OPENAPI_PATH: openapi_document,
}


def render(document: dict[str, Any]) -> str:
    # Key order as generated (it follows the models' fields); ASCII-only, one trailing newline.
    return json.dumps(document, indent=2) + "\n"


def generated() -> dict[str, str]:
    """Each contract's path (relative to the repository root) and its text, from the code."""
    return {path: render(build()) for path, build in CONTRACTS.items()}


# The state machines' tables and diagrams in the docs, between `<!-- generated: NAME -->` and
# `<!-- end: NAME -->` (tests/unit/test_delivery_protocol.py holds them to the code too).
def _doc_blocks() -> dict[str, dict[str, str]]:
    from sendonce.domain.campaigns import lifecycle
    from sendonce.domain.sending import delivery_tables

    return {
        "docs/ledger.md": {
            "delivery diagram": f"```mermaid\n{delivery_tables.mermaid()}\n```",
            "claim rules": delivery_tables.claim_table(),
            "transitions": delivery_tables.transition_table(),
        },
        "docs/operations-campaigns.md": {
            "campaign diagram": f"```mermaid\n{lifecycle.mermaid()}\n```",
            "campaign transitions": lifecycle.table(),
        },
    }


def with_doc_blocks(path: str, text: str) -> str:
    """`text` (the page at `path`) with its generated blocks as the code states them."""
    for name, body in _doc_blocks().get(path, {}).items():
        pattern = re.compile(rf"(<!-- generated: {re.escape(name)} -->).*?(<!-- end: {re.escape(name)} -->)", re.S)
        text, found = pattern.subn(lambda m, body=body: f"{m.group(1)}\n{body}\n{m.group(2)}", text)
        if found != 1:
            raise ValueError(f"{path}: expected one block named {name!r}, found {found}")
    return text


def write_doc_blocks(root: Path) -> list[str]:
    """Regenerate the docs' state-machine blocks under `root`; returns the pages that changed."""
    changed = []
    for path in _doc_blocks():
        file = root / path
        if not file.is_file():
            continue  # not a checkout with the docs (the pages are written by hand around the blocks)
        text = file.read_text(encoding="utf-8")
        new = with_doc_blocks(path, text)
        if new != text:
            file.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def drifted(root: Path) -> list[str]:
    """The contracts under `root` that are missing or differ from what the code generates."""
    stale = []
    for path, text in generated().items():
        file = root / path
        if not file.is_file() or file.read_text(encoding="utf-8") != text:
            stale.append(path)
    return stale


def write(root: Path) -> list[str]:
    """Regenerate every contract under `root`; returns those whose text changed."""
    changed = drifted(root)
    for path, text in generated().items():
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")
    return changed


def _default_root() -> Path:
    here = Path(__file__).resolve().parents[2]  # src/sendonce_local/generated_files.py in a checkout
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sendonce_local.generated_files", description=__doc__.split("\n\n")[0]
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate the contract files")
    action.add_argument("--check", action="store_true", help="exit 1 if a contract file differs from the code")
    parser.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root or _default_root()
    if args.write:
        changed = write(root) + write_doc_blocks(root)
        print(f"regenerated {', '.join(changed)}" if changed else "contracts already up to date")
        return 0
    stale = drifted(root) + [
        path
        for path in _doc_blocks()
        if (root / path).is_file() and with_doc_blocks(path, text := (root / path).read_text(encoding="utf-8")) != text
    ]
    for path in stale:
        print(f"{path}: differs from the code; run `make contracts` and commit it", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
