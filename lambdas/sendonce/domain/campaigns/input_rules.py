"""The rules every piece of operator input is held to, and their wording: the character
patterns of addresses, lines and names (the same ones are in the OpenAPI document), how a
pydantic refusal is put in our words without quoting the input, and JSON read strictly. The
campaign spec (spec.py) and the recipient files (recipients_file.py) both answer with these,
so the CLI and the API present them alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from sendonce.domain import limits
from sendonce.domain.campaigns.scheduling import RFC3339_PATTERN
from sendonce.domain.campaigns.share_input import share_rule
from sendonce.domain.campaigns.variants import FEWEST_VARIANTS, MOST_VARIANTS
from sendonce.domain.sending.shards import MAX_LEDGER_SHARDS

_ID_RULE = (
    "must be 1-100 letters, digits, '_' or '-', starting with a letter or digit (an opaque id, never an email address)"
)

# Characters that end or split a header line (C0 and C1 controls, DEL, Unicode line and
# paragraph separators). Refused in every field that becomes a header, so no value can add a
# header (`News\r\nBcc: x@evil.example`). The same patterns are in the OpenAPI document.
_CONTROL = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
_CONTROL_BUT_TAB = r"\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ADDRESS = rf"[^@\s<>(),;:\"\[\]\\{_CONTROL}]{{1,{limits.ADDRESS_LOCAL_CHARS}}}@{_LABEL}(?:\.{_LABEL})+"
ADDRESS_PATTERN = rf"^{_ADDRESS}$"
_NAME = rf"(?:[^\"<>()\[\],;:@\\{_CONTROL}]{{1,{limits.DISPLAY_NAME_CHARS}}}|\"[^\"\\{_CONTROL}]{{1,{limits.DISPLAY_NAME_CHARS}}}\")"
SENDER_PATTERN = rf"^(?:{_ADDRESS}|{_NAME} ?<{_ADDRESS}>)$"
SUBJECT_PATTERN = rf"^[^{_CONTROL_BUT_TAB}]+$"
LINE_PATTERN = rf"^[^{_CONTROL}]+$"
PROVIDER_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
# An instant with its UTC offset: RFC 3339's date-time (whether the day exists is the validator's).
SEND_AT_PATTERN = RFC3339_PATTERN
# An A/B test's `after`: 1m to 30d (variants.AFTER_LEAST_S, AFTER_MOST_S), the range in the
# pattern itself, so the schema refuses exactly what the validator does.
AFTER_PATTERN = (
    r"^(?:(?:[1-9]|[1-9][0-9]{1,3}|[1-3][0-9]{4}|4[0-2][0-9]{3}|43[01][0-9]{2}|43200)m"
    r"|(?:[1-9]|[1-9][0-9]|[1-6][0-9]{2}|7[01][0-9]|720)h"
    r"|(?:[1-9]|[12][0-9]|30)d)$"
)
# An A/B test's share is stored as a DynamoDB number (1E-130 and up): bounded well inside it.
SHARE_LEAST, SHARE_MOST = 0.001, 0.999

_PATTERN_RULES = {
    "recipient_id": _ID_RULE,
    "id": _ID_RULE,
    "campaign_id": _ID_RULE,
    "from": "not a valid sender address (use a@example.com or Name <a@example.com>)",
    "reply_to": "not a valid reply-to address (use a@example.com or Name <a@example.com>)",
    "email": "not a valid email address",
    "subject": "must be one line without control characters (a tab is allowed)",
    "name": "must be one line without control characters",
    "provider": "must be the name of a registered provider",
    "bucket": "not a valid S3 bucket name",
    "send_at": "must be an ISO 8601 time with a UTC offset, such as 2026-12-02T09:00:00+01:00",
}


_SHARDS_RULE = f"must be a whole number from 1 to {MAX_LEDGER_SHARDS} (see docs/scale.md)"

# An A/B test's fields (spec.py), by their last two names (a spec file's `test.share`, the API's
# `body.test.share`); a variant's id is not a campaign's.
_AB_TEST_RULES: dict[tuple[str, ...], str] = {
    ("test", "share"): f"between 0 and 1, exclusive: a number from {SHARE_LEAST:g} to {SHARE_MOST:g} (the share of "
    "the recipients in the test)",
    ("test", "pick_by"): "must be opens or clicks",
    ("test", "after"): "must be a duration from 1m to 30d: a whole number of minutes, hours or days (30m, 4h, 2d)",
}
_VARIANT_ID_RULE = "must be 1-8 letters, digits, '_' or '-', starting with a letter or digit"


def _ab_test_rule(error: Mapping[str, Any]) -> str | None:
    loc = [str(part) for part in error.get("loc") or ()]
    kind = error.get("type")
    if loc and loc[-1] == "variants" and kind in ("too_short", "too_long"):
        got = (error.get("ctx") or {}).get("actual_length")
        return f"{FEWEST_VARIANTS} to {MOST_VARIANTS} variants" + (f", got {got}" if got is not None else "")
    if len(loc) >= 3 and loc[-3] == "variants" and loc[-1] == "id" and kind == "string_pattern_mismatch":
        return _VARIANT_ID_RULE
    rule = _AB_TEST_RULES.get(tuple(loc[-2:]))
    # Not a missing field, nor a rule across fields (spec_rule: worded where it is raised).
    if rule is not None and kind not in ("missing", "spec_rule"):
        return rule
    return None


def friendly_message(error: Mapping[str, Any]) -> str:
    """A pydantic error's message in our words, never quoting the input."""
    loc = error.get("loc") or ("",)
    message = str(error.get("msg", ""))
    if (rule := _ab_test_rule(error)) is not None:
        return rule
    if error.get("type") == "string_pattern_mismatch" and loc[0] == "window":
        return "must be a local time HH:MM, 00:00 to 23:59"
    if error.get("type") == "string_pattern_mismatch" and str(loc[-1]) in _PATTERN_RULES:
        return _PATTERN_RULES[str(loc[-1])]
    if error.get("type") == "extra_forbidden":
        return "unexpected field"
    if error.get("type") == "too_short" and str(loc[-1]) == "recipients":
        return "no recipients: give at least one (or an s3 object)"
    if str(loc[-1]) == "ledger_shards":
        return _SHARDS_RULE
    if (rule := share_rule(loc)) is not None:
        return rule
    return message.removeprefix("Value error, ")


def describe_validation_error(exc: ValidationError, *, limit: int = 5) -> list[tuple[str, str]]:
    """(field, message) pairs without the offending input, so no address leaks into output."""
    return [
        (".".join(str(p) for p in err["loc"]), friendly_message(err))
        for err in exc.errors(include_url=False, include_input=False)[:limit]
    ]


class BodyTooDeepError(ValueError):
    pass


def strict_json_loads(text: str | bytes, *, max_depth: int = 32) -> Any:
    """json.loads for input from outside: RFC 8259 only (no NaN or Infinity), no lone
    surrogates (they cannot be stored or sent), nesting at most `max_depth`. Every refusal is
    a json.JSONDecodeError, so callers have one error to turn into a message."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")

    def refuse_constant(name: str) -> Any:
        raise json.JSONDecodeError(f"{name} is not JSON", str(text), 0)

    try:
        data = json.loads(text, parse_constant=refuse_constant)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", str(text), 0) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise json.JSONDecodeError(f"a value cannot be read ({exc})", str(text), 0) from None
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > max_depth:
                raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", str(text), 0)
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise json.JSONDecodeError("a string holds a lone surrogate (\\ud800-\\udfff)", str(text), 0) from None
    return data
