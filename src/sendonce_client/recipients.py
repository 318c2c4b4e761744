"""A caller's recipient as the operator API's body takes it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


def recipient_dict(recipient: Any) -> dict[str, Any]:
    """A recipient as the API's body takes it, from a mapping, a pydantic model, a
    dataclass or any object with `recipient_id` and `email` attributes."""
    if isinstance(recipient, Mapping):
        return dict(recipient)
    if hasattr(recipient, "model_dump"):
        return recipient.model_dump(mode="json")
    if dataclasses.is_dataclass(recipient) and not isinstance(recipient, type):
        return dataclasses.asdict(recipient)
    if hasattr(recipient, "recipient_id") and hasattr(recipient, "email"):
        item = {"recipient_id": recipient.recipient_id, "email": recipient.email}
        variables = getattr(recipient, "variables", None)
        if variables:
            item["variables"] = dict(variables)
        return item
    raise TypeError(f"a recipient must be a mapping or have recipient_id and email, not {type(recipient).__name__}")
