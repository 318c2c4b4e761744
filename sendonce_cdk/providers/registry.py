"""The providers the CDK construct knows: one `ProviderStack` per provider of
`sendonce.adapters.providers.registry`, in the same order. A test passes a registry of its
own (`registered(extra)`) to `SendonceConfig.from_context` and `SendOnce`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sendonce.adapters.providers.descriptor import Provider
from sendonce_cdk.providers import resend, ses
from sendonce_cdk.providers.base import ProviderStack

BUILT_IN: tuple[ProviderStack, ...] = (ses.STACK, resend.STACK)


def registered(extra: Iterable[ProviderStack] = ()) -> dict[str, ProviderStack]:
    stacks = {stack.name: stack for stack in BUILT_IN}
    for stack in extra:
        if stack.name in stacks:
            raise ValueError(f"provider {stack.name!r} is registered twice")
        stacks[stack.name] = stack
    return stacks


def descriptors(stacks: Mapping[str, ProviderStack]) -> dict[str, Provider]:
    """The providers' descriptors, as `sendonce.adapters.providers.registry.registered` gives them."""
    return {name: stack.descriptor for name, stack in stacks.items()}


def context_defaults(stacks: Mapping[str, ProviderStack]) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for stack in stacks.values():
        defaults.update(stack.context)
    return defaults
