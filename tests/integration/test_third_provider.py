"""The seam between sendonce and its providers (issue 21): a provider defined entirely in
a test (tests/third_provider.py: a loopback HTTP API without idempotency keys, at most 10
emails a request) sends a campaign through the real operator API handler, the real
consumer behind the event-source poller, and the real events handler over HTTP; nothing
in sendonce names it. Its synthesized template is tests/infra/test_third_provider_stack.py's."""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import pytest

from sendonce.adapters.providers.registry import registered
from sendonce.handlers import api, consumer, events
from sendonce.settings import ApiSettings, consumer_settings_model, events_settings_model
from sendonce.wiring.api import build_campaign_service
from sendonce.wiring.clients import clients
from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime
from sendonce.wiring.events import build_events_service
from sendonce_local.http_api import LocalHttpApi
from sendonce_local.resources import create_deliverability_resources
from tests.integration.operator_helpers import api_event, lambda_context
from tests.third_provider import MAX_BATCH, NAME, PROVIDER, StandinServer

pytestmark = pytest.mark.integration

PROVIDERS = registered([PROVIDER])


@dataclass
class Standin:
    server: StandinServer
    webhook_secret: str
    webhook_url: str
    suppressions_table: str
    operator: object

    def call(self, method: str, path: str, body=None) -> tuple[int, dict]:
        response = api.lambda_handler(api_event(method, path, body), lambda_context(), service=self.operator)
        return response["statusCode"], json.loads(response["body"])


@pytest.fixture
def standin(system) -> Iterator[Standin]:
    secrets = boto3.client("secretsmanager")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    api_key, webhook_secret = f"sk_{uuid.uuid4().hex}", uuid.uuid4().hex
    secrets.create_secret(Name=f"{prefix}/standin-key", SecretString=api_key)
    secrets.create_secret(Name=f"{prefix}/standin-hook", SecretString=webhook_secret)
    deliverability = create_deliverability_resources(prefix=prefix)
    resources = system.resources
    # The settings models for these providers: the stand-in's fields are SENDONCE_STANDIN_*.
    with StandinServer(api_key) as server:
        environ = {
            **os.environ,
            "SENDONCE_STANDIN_API_URL": server.url,
            "SENDONCE_STANDIN_API_KEY_SECRET": f"{prefix}/standin-key",
            "SENDONCE_STANDIN_WEBHOOK_SECRET": f"{prefix}/standin-hook",
            "SENDONCE_SUPPRESSIONS_TABLE": deliverability.suppressions_table,
        }
        settings = consumer_settings_model(PROVIDERS).from_env(environ)
        runtime = build_consumer_runtime(settings, build_consumer_parts(settings, clients(), providers=PROVIDERS))
        system.poller(handler=functools.partial(consumer.lambda_handler, runtime=runtime))
        events_settings = events_settings_model(PROVIDERS).from_env(environ)
        events_api = LocalHttpApi(
            functools.partial(
                events.lambda_handler, service=build_events_service(events_settings, clients(), providers=PROVIDERS)
            ),
            function_name="sendonce-events",
        ).start()
        operator = build_campaign_service(
            ApiSettings(
                ledger_table=resources.ledger_table,
                campaigns_table=resources.campaigns_table,
                queue_url=resources.queue_url,
                dead_letter_queue_url=resources.dead_letter_queue_url,
            ),
            clients(),
            providers=PROVIDERS,
        )
        yield Standin(
            server=server,
            webhook_secret=webhook_secret,
            webhook_url=f"{events_api.url}/webhooks/{NAME}",
            suppressions_table=deliverability.suppressions_table,
            operator=operator,
        )
        events_api.stop()


def spec(system, campaign_id: str, **overrides) -> dict:
    return {
        "id": campaign_id,
        "name": "Stand-in launch",
        "subject": "Hello {{ name }}",
        "from": f"News <news@{system.domain}>",
        "html": "<p>Hi {{ name }}</p>",
        "provider": NAME,
        **overrides,
    }


def test_a_provider_registered_by_a_test_sends_a_campaign_end_to_end(system, standin):
    recipients = [
        {"recipient_id": f"r{i}", "email": f"user{i}@{system.domain}", "variables": {"name": f"U{i}"}}
        for i in range(12)
    ]
    # Given the stand-in will accept one email but answer 500 (an outcome it cannot prove)
    standin.server.fail_next = [500]

    # When a campaign on it is created over the operator API, a batch-mode one is refused,
    # and the first is published and consumed
    created = standin.call("POST", "/campaigns", spec(system, "c1"))
    batch = standin.call("POST", "/campaigns", spec(system, "c2", delivery_mode="batch"))
    unknown_provider = standin.call("POST", "/campaigns", spec(system, "c3", provider="postmark"))
    published = standin.call("POST", "/campaigns/c1/publish", {"recipients": recipients})
    system.pollers[0].run_until_idle(idle_seconds=1, max_seconds=30)
    status = standin.call("GET", "/campaigns/c1/delivery-status")

    # Then it is created, every recipient got exactly one email from the stand-in, and the
    # ambiguous one is unknown, not repeated: the stand-in has no idempotency key
    assert created[0] == 201 and created[1]["provider"] == NAME
    assert batch[0] == 400 and "delivery_mode: 'batch' needs a provider with batch sends" in batch[1]["message"]
    assert unknown_provider[0] == 400 and f"known: {', '.join(sorted(PROVIDERS))}" in unknown_provider[1]["message"]
    assert published[0] == 200 and published[1]["accepted"] == 12
    assert standin.server.deliveries() == {r["email"]: 1 for r in recipients}
    assert (status[1]["sent"], status[1]["unknown"], status[1]["remaining"]) == (11, 1, 0)
    assert PROVIDER.capabilities.max_batch == MAX_BATCH and not PROVIDER.capabilities.sends_batches

    # When the stand-in's webhooks arrive at POST /webhooks/standin: a forged one, then
    # 'sent' for the unknown delivery and a complaint for another
    [unknown] = standin.server.failed
    complained = next(e for e in standin.server.sent if e is not unknown)

    def event(kind: str, email: dict, event_id: str) -> dict:
        return {"type": kind, "id": event_id, "email_id": email["id"], "to": email["to"], "tags": email["tags"]}

    forged = standin.server.webhook(
        standin.webhook_url, standin.webhook_secret, event("sent", unknown, "e0"), forged=True
    )
    sent = standin.server.webhook(standin.webhook_url, standin.webhook_secret, event("sent", unknown, "e1"))
    complaint = standin.server.webhook(
        standin.webhook_url, standin.webhook_secret, event("complained", complained, "e2")
    )
    again = standin.server.webhook(standin.webhook_url, standin.webhook_secret, event("complained", complained, "e2"))
    after = standin.call("GET", "/campaigns/c1/delivery-status")

    # Then the forged one is refused, the unknown delivery is resolved to sent, and the
    # complainer is suppressed (the repeat changes nothing)
    from sendonce.wiring.stores import build_suppressions

    assert (forged, sent, complaint, again) == (401, 200, 200, 200)
    assert (after[1]["sent"], after[1]["unknown"]) == (12, 0)
    assert build_suppressions(standin.suppressions_table, clients().dynamodb).is_suppressed(complained["to"])
