"""Campaign spec files (YAML or JSON) for `sendonce campaign create --spec`.

Validation is the API's (`CampaignSpec`); this module adds what only a file has: templates
given as paths relative to the spec (`html_file`, `text_file`, in the spec or in a variant)
and line numbers in every message, so an operator can jump to the field that is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sendonce.domain import limits
from sendonce.domain.campaigns.input_rules import describe_validation_error
from sendonce.domain.campaigns.spec import CampaignSpec
from sendonce.domain.errors import InvalidCampaignError

TEMPLATE_FILES = {"html_file": "html", "text_file": "text"}
TEMPLATE_BYTES = {"html": limits.HTML_BYTES, "text": limits.TEXT_BYTES}


class SpecError(InvalidCampaignError):
    """A spec file that cannot become a campaign; each problem reads FILE[:LINE]: field: reason."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def load_spec(path: Path) -> CampaignSpec:
    name = str(path)
    try:
        if path.stat().st_size > limits.SPEC_FILE_BYTES:
            raise SpecError(
                [f"{name}: larger than {limits.SPEC_FILE_BYTES:,} bytes; templates belong in html_file / text_file"]
            )
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise SpecError([f"{name}: no such file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([f"{name}: cannot be read: {exc}"]) from None
    data = _parse(name, text, json_file=path.suffix.lower() == ".json")
    lines = _key_lines(text)

    def at(field: str) -> str:
        line = lines.get(field.split(".")[0])
        return f"{name}:{line}" if line else name

    if not isinstance(data, dict):
        raise SpecError([f"{name}: a spec is a mapping of fields: id, name, subject, from, provider, html/text"])
    # The spec's own templates, and each A/B variant's (`variants: [{id, subject, html_file}]`).
    holders = [("", data)]
    if isinstance(data.get("variants"), list):
        holders += [(f"variants.{i}.", v) for i, v in enumerate(data["variants"]) if isinstance(v, dict)]
    problems = []
    for prefix, holder in holders:
        for file_key, field in TEMPLATE_FILES.items():
            if file_key not in holder:
                continue
            where = f"{at(prefix + file_key)}: {prefix}{file_key}"
            if field in holder:
                problems.append(f"{where}: give {field} or {file_key}, not both")
                continue
            ref = holder.pop(file_key)
            try:
                holder[field] = _read_template(path, ref, field)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
    if problems:
        raise SpecError(problems)
    try:
        return CampaignSpec.model_validate(data)
    except ValidationError as exc:
        found = []
        for field, message in describe_validation_error(exc, limit=20):
            if not field and message.startswith("html or text"):
                said = message.removeprefix("html or text")
                found.append(f"{name}: html or text (or html_file / text_file){said}")
            else:
                found.append(f"{at(field)}: {field or '(spec)'}: {message}")
        raise SpecError(found) from None


def _read_template(spec: Path, ref: object, field: str) -> str:
    """A template named by a spec, which must stay inside the spec's folder once symlinks are
    resolved: a spec from elsewhere must not be able to mail out any file the operator can read."""
    if not isinstance(ref, str) or not ref:
        raise ValueError("expected a path relative to the spec")
    if Path(ref).is_absolute():
        raise ValueError(f"{ref}: must be relative to the spec's folder, not absolute")
    folder = spec.parent.resolve()
    template = (folder / ref).resolve()
    if not template.is_relative_to(folder):
        raise ValueError(
            f"{ref}: outside the spec's folder {folder} (after resolving links); templates must be inside it"
        )
    if not template.exists():
        raise ValueError(f"{ref}: no such file")
    if not template.is_file():
        raise ValueError(f"{ref}: not a regular file")
    most = TEMPLATE_BYTES[field]
    if template.stat().st_size > most:
        raise ValueError(f"{ref}: larger than {most:,} bytes (the {field} limit; docs/limits.md)")
    try:
        return template.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{ref}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"{ref}: cannot be read ({exc.strerror})") from None


def locate(path: Path, message: str) -> str:
    """Prefix a service error such as "provider: 'x' is not registered" with FILE:LINE."""
    field = message.split(":", 1)[0].strip()
    try:
        line = _key_lines(path.read_text(encoding="utf-8-sig")).get(field)
    except (OSError, UnicodeDecodeError):
        line = None
    return f"{path}:{line}: {message}" if line else f"{path}: {message}"


def _parse(name: str, text: str, *, json_file: bool) -> Any:
    if json_file:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError([f"{name}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})"]) from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}" if mark else name
        raise SpecError([f"{where}: not valid YAML: {exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise SpecError([f"{name}: not valid YAML: {exc}"]) from None


def _key_lines(text: str) -> dict[str, int]:
    """Top-level key -> 1-based line, from YAML's node tree (JSON parses as YAML here)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {key.value: key.start_mark.line + 1 for key, _ in node.value if isinstance(key, yaml.ScalarNode)}
