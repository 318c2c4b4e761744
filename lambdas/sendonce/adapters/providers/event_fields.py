"""Small readers shared by the providers' event parsers."""

from __future__ import annotations

import hashlib
from typing import Any


def first(value: Any) -> str | None:
    """A string, or the first of a list of them; None when there is none."""
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) and value else None


def short(*parts: Any) -> str | None:
    """The non-empty parts joined, at most 200 characters (a ledger annotation's detail)."""
    text = " ".join(str(p) for p in parts if p)
    return text[:200] or None


def event_id(prefix: str, *parts: Any) -> str:
    """A stable id from the parts that a provider's retry of the same event repeats."""
    return f"{prefix}:" + hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:32]
