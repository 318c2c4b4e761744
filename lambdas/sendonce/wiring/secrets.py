"""The one secret reader, and the unsubscribe tokens over the keys a secret holds."""

from __future__ import annotations

import time
from collections.abc import Callable

from aws_lambda_powertools.utilities.parameters import SecretsProvider

from sendonce.adapters.providers.descriptor import SecretReader
from sendonce.domain.deliverability.unsubscribe import KeySet, UnsubscribeTokens
from sendonce.domain.errors import SettingsError
from sendonce.wiring.clients import Clients

# How long a function keeps the unsubscribe keys before reading the secret again
# (docs/deliverability.md, "The key").
UNSUBSCRIBE_KEYS_TTL_S = 300.0


def build_secret_reader(clients: Clients, *, fresh: bool = False) -> SecretReader:
    """(secret name, what it holds) -> its value: Powertools' SecretsProvider (max_age 300 s;
    `fresh`: read again each time), refusing an empty secret."""

    def read(secret_name: str, what: str) -> str:
        provider = SecretsProvider(boto3_client=clients.secretsmanager)
        value = provider.get(secret_name, max_age=300, force_fetch=fresh)
        if not isinstance(value, str) or not value.strip():
            raise SettingsError(f"secret {secret_name!r} holds no {what}")
        return value.strip()

    return read


def build_unsubscribe_tokens(
    secret_name: str,
    clients: Clients,
    *,
    ttl_s: float = UNSUBSCRIBE_KEYS_TTL_S,
    clock: Callable[[], float] = time.time,
) -> UnsubscribeTokens:
    """Tokens over a key set read now (a bad secret fails the cold start) and again every `ttl_s`."""
    read = build_secret_reader(clients, fresh=True)

    def load() -> str:
        return read(secret_name, "unsubscribe key")

    ring = KeySet(load, ttl_s=ttl_s, clock=clock)
    try:
        ring.keys()
    except ValueError as exc:
        raise SettingsError(f"secret {secret_name!r}: {exc}") from exc
    return UnsubscribeTokens(ring)
