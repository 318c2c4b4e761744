"""Reading CDK context values: what the settings and the providers' own keys share."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A context value is missing its expected shape."""


def number(raw: Any, key: str, kind: type) -> Any:
    """A context value as a number of `kind`, or a ConfigError naming `key`."""
    # Context from `-c key=value` arrives as a string; from cdk.json as JSON numbers.
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"invalid sendonce context: {key} must be a number, got {raw!r}") from None
    if kind is int:
        if not value.is_integer():
            raise ConfigError(f"invalid sendonce context: {key} must be a whole number, got {raw!r}")
        return int(value)
    return value
