"""The providers this build registers, by name: the one list that the wiring, the settings,
the operator input, the cost model and the CDK construct (`sendonce_cdk.providers`) read.

A provider is a folder beside this module whose `provider.py` exports `PROVIDER`
(docs/architecture.md, "Adding a provider"). `registered()` answers a fresh mapping each
time; a test adds a provider of its own to a copy (`with_provider`), never to this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sendonce.adapters.providers.descriptor import Provider
from sendonce.adapters.providers.resend.provider import PROVIDER as RESEND
from sendonce.adapters.providers.ses.provider import PROVIDER as SES

BUILT_IN: tuple[Provider, ...] = (SES, RESEND)


def registered(extra: Iterable[Provider] = ()) -> dict[str, Provider]:
    """Every provider by name: the built-in ones, then `extra` (a name may be registered once)."""
    providers: dict[str, Provider] = {}
    for provider in (*BUILT_IN, *extra):
        if provider.name in providers:
            raise ValueError(f"provider {provider.name!r} is registered twice")
        if not provider.name.isidentifier() or provider.name != provider.name.lower():
            raise ValueError(f"provider name {provider.name!r}: lower-case letters, digits and '_'")
        providers[provider.name] = provider
    return providers


def names(providers: Mapping[str, Provider] | None = None) -> tuple[str, ...]:
    return tuple(providers if providers is not None else registered())


def batch_names(providers: Mapping[str, Provider] | None = None) -> tuple[str, ...]:
    """The providers that accept batch mode (their capabilities say so)."""
    providers = providers if providers is not None else registered()
    return tuple(name for name, p in providers.items() if p.capabilities.sends_batches)


def annotate_spec_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A campaign spec's JSON Schema with this registry's answer to which providers exist
    and which accept batch mode (the domain's model knows no provider's name): for the
    published schema (`make contracts`) and the operator API's OpenAPI document alike."""
    schema["properties"]["provider"]["enum"] = list(names())
    for branch in schema.get("oneOf", []):
        if branch["properties"]["delivery_mode"]["enum"] == ["batch"]:
            branch["properties"]["provider"] = {"enum": list(batch_names())}
    return schema
