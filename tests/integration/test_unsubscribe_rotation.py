"""Unsubscribe key rotation with the real parts: the secret in moto's Secrets Manager, the
unsubscribe function behind a local HTTP API, and the consumer's wiring over moto's tables."""

from __future__ import annotations

import datetime as dt
import functools
import json

import boto3
import pytest
import requests

from sendonce.domain.deliverability.unsubscribe import UnsubscribeTokens
from sendonce.handlers import unsubscribe
from sendonce.settings import UnsubscribeSettings
from sendonce.wiring.clients import clients
from sendonce.wiring.consumer import build_consumer_parts
from sendonce.wiring.unsubscribe import build_unsubscribe_service
from sendonce_local.http_api import LocalHttpApi

pytestmark = pytest.mark.integration

NEW_KEY = "n" * 48


def test_a_warm_unsubscribe_function_accepts_a_link_signed_with_a_key_added_after_it_started(system, deliverability):
    now = [1_800_000_000.0]
    settings = UnsubscribeSettings(
        suppressions_table=deliverability.resources.suppressions_table,
        unsubscribe_key_secret=deliverability.resources.unsubscribe_key_secret,
    )
    service = build_unsubscribe_service(settings, clients(), keys_ttl_s=300, clock=lambda: now[0])
    api = LocalHttpApi(functools.partial(unsubscribe.lambda_handler, service=service), function_name="unsub").start()
    try:
        url = f"{api.url}/u/" + UnsubscribeTokens([NEW_KEY.encode()]).sign("c1", "r1", f"ann@{system.domain}")
        before = requests.get(url, timeout=10).status_code

        boto3.client("secretsmanager").put_secret_value(
            SecretId=settings.unsubscribe_key_secret,
            SecretString=json.dumps({"keys": [deliverability.resources.unsubscribe_key, NEW_KEY]}),
        )
        still_cached = requests.get(url, timeout=10).status_code
        now[0] += 300
        after = requests.get(url, timeout=10).status_code
    finally:
        api.stop()

    assert (before, still_cached, after) == (403, 403, 200)


def test_consumers_holding_different_key_sets_put_the_same_link_in_an_email(system, deliverability):
    old_key = deliverability.resources.unsubscribe_key
    system.campaign("c0")
    warm = build_consumer_parts(system.settings, clients()).unsubscribe
    warm.headers("c0", "r1", f"ann@{system.domain}")  # this consumer has read {old}

    not_before = dt.datetime.now(dt.UTC).isoformat()
    boto3.client("secretsmanager").put_secret_value(
        SecretId=deliverability.resources.unsubscribe_key_secret,
        SecretString=json.dumps({"keys": [{"key": old_key}, {"key": NEW_KEY, "not_before": not_before}]}),
    )
    system.campaign("c1")
    cold = build_consumer_parts(system.settings, clients()).unsubscribe

    new_campaign = [links.headers("c1", "r1", f"ann@{system.domain}") for links in (warm, cold)]
    old_campaign = [links.headers("c0", "r1", f"ann@{system.domain}") for links in (warm, cold)]

    assert new_campaign[0] == new_campaign[1]
    assert new_campaign[0]["List-Unsubscribe"].endswith(
        UnsubscribeTokens([NEW_KEY.encode()]).sign("c1", "r1", f"ann@{system.domain}") + ">"
    )
    assert old_campaign[0] == old_campaign[1]
    assert old_campaign[0]["List-Unsubscribe"].endswith(
        UnsubscribeTokens([old_key.encode()]).sign("c0", "r1", f"ann@{system.domain}") + ">"
    )
