"""A local sendonce for integration tests: moto resources, the local Resend server, the
real consumer handler behind the local event-source poller."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest

from sendonce.adapters.aws_session import aws_session
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.models import Campaign, Content, Recipient
from sendonce.handlers import consumer
from sendonce.settings import ApiSettings, ConsumerSettings, EventsSettings
from sendonce.wiring.api import build_campaign_service
from sendonce.wiring.audit import build_auditor
from sendonce.wiring.clients import clients
from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime
from sendonce_local.http_api import LocalHttpApi
from sendonce_local.moto_server import ses_deliveries
from sendonce_local.poller import EventSourcePoller
from sendonce_local.resend_server import LocalResendServer
from sendonce_local.resources import (
    DeliverabilityResources,
    LocalResources,
    create_local_resources,
    verify_ses_sender,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def resend_server() -> Iterator[LocalResendServer]:
    # No team limit here: the shared limiter's tests set one (Resend's default is 5/s).
    with LocalResendServer(rate_limit=None) as server:
        yield server


HANG_GUARD_S = 240  # a consumer process's own --max-seconds, and how long a test waits for it


@dataclass
class LocalSystem:
    resources: LocalResources
    resend: LocalResendServer
    endpoint: str
    env: dict[str, str]
    domain: str
    pollers: list[EventSourcePoller] = field(default_factory=list)
    processes: list[subprocess.Popen] = field(default_factory=list)
    _operator: CampaignService | None = None

    @property
    def settings(self) -> ConsumerSettings:
        return ConsumerSettings.from_env(os.environ)

    @property
    def operator(self) -> CampaignService:
        """The operator service over these resources, its jobs run in process; an audit job
        audits with the consumer's settings, as the CLI's does."""
        if self._operator is None:
            self._operator = build_campaign_service(
                ApiSettings(
                    ledger_table=self.resources.ledger_table,
                    campaigns_table=self.resources.campaigns_table,
                    queue_url=self.resources.queue_url,
                    dead_letter_queue_url=self.resources.dead_letter_queue_url,
                ),
                clients(),
                auditor=build_auditor(lambda: self.settings, clients()),
            )
        return self._operator

    def recipients(self, n: int, start: int = 0) -> list[Recipient]:
        return [
            Recipient(recipient_id=f"r{i}", email=f"user{i}@{self.domain}", variables={"name": f"User {i}"})
            for i in range(start, start + n)
        ]

    def campaign(
        self, campaign_id: str = "c1", provider: str = "resend", delivery_mode: str = "single", ledger_shards: int = 4
    ) -> Campaign:
        # 4 shards: sharded keys everywhere, without the default's 256 Queries per
        # whole-campaign read, which on a loaded machine outlast this queue's 2 s visibility
        # timeout (test_ledger_shards.py runs the default).
        return self.operator.create(
            Campaign(
                campaign_id=campaign_id,
                name="Spring launch",
                provider=provider,
                delivery_mode=delivery_mode,
                ledger_shards=ledger_shards,
                sender=f"news@{self.domain}",
                content=Content(subject="Hello {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}"),
            )
        )

    def handler(self, module_handler=None):
        """A handler with its own runtime, as one Lambda execution environment has."""
        if module_handler is not None:
            return module_handler
        runtime = build_consumer_runtime(self.settings, build_consumer_parts(self.settings, clients()))
        return functools.partial(consumer.lambda_handler, runtime=runtime)

    def poller(
        self, *, handler=None, timeout_s: float = 20.0, concurrency: int = 1, batch_size: int = 1
    ) -> EventSourcePoller:
        poller = EventSourcePoller(
            sqs_client=boto3.client("sqs"),
            queue_url=self.resources.queue_url,
            handler=handler or self.handler(),
            batch_size=batch_size,
            function_timeout_s=timeout_s,
            max_concurrency=concurrency,
        )
        self.pollers.append(poller)
        return poller

    def consumer_process(
        self,
        handler: str = "sendonce_local.faults:lambda_handler",
        *,
        timeout_s: float = 20.0,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.Popen:
        env = {
            **os.environ,
            **(extra_env or {}),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "lambdas"), str(ROOT / "src")]),
        }
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sendonce_local.poller",
                "--queue-url",
                self.resources.queue_url,
                "--handler",
                handler,
                "--batch-size",
                "1",
                "--concurrency",
                "1",
                "--timeout",
                str(timeout_s),
                "--max-seconds",
                str(HANG_GUARD_S),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(os.devnull, "w") if not os.environ.get("SENDONCE_DEBUG_CONSUMERS") else None,
        )
        self.processes.append(process)
        return process

    def shards_of(self, campaign_id: str) -> int:
        """The campaign's ledger shard count, as its item records it."""
        from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore

        store = DynamoDBCampaignStore(client=boto3.client("dynamodb"), table_name=self.resources.campaigns_table)
        return store.get(campaign_id).ledger_shards

    def ledger(self):
        from sendonce.adapters.dynamodb.ledger import DynamoDBLedger

        return DynamoDBLedger(
            client=boto3.client("dynamodb"), table_name=self.resources.ledger_table, shards_of=self.shards_of
        )

    def deliveries(self, provider: str = "resend") -> dict[str, int]:
        if provider == "ses":
            return {a: n for a, n in ses_deliveries(self.endpoint).items() if a.endswith("@" + self.domain)}
        return {a: n for a, n in self.resend.deliveries().items() if a.endswith("@" + self.domain)}

    @staticmethod
    def exit_code(process: subprocess.Popen) -> int:
        """How a consumer process ended, waiting as long as a loaded machine may need to reach
        its fault (a guard against a hang, not a time budget: under four CPU hogs and the
        suite, starting the process and reaching the 40th recipient took over 30 s)."""
        return process.wait(timeout=HANG_GUARD_S)

    def receives_outlast(self, seconds: float) -> int:
        """Lets the queue redeliver a message for at least `seconds` before it goes to the
        dead-letter queue (this fixture's default: 5 receives 2 s apart). A test whose group
        is held by a lease of a consumer that died or failed must see the message come back
        after that lease ends, however slow a loaded machine makes each receive; a deployed
        stack keeps the same rule with its own figures. Returns the new maxReceiveCount."""
        sqs = boto3.client("sqs")
        url = self.resources.queue_url
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "RedrivePolicy"])
        visibility = max(1, int(attributes["Attributes"]["VisibilityTimeout"]))
        policy = json.loads(attributes["Attributes"]["RedrivePolicy"])
        policy["maxReceiveCount"] = str(math.ceil(seconds / visibility) + 1)
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": json.dumps(policy)})
        return int(policy["maxReceiveCount"])

    def dead_letters(self) -> list[dict]:
        sqs = boto3.client("sqs")
        response = sqs.receive_message(
            QueueUrl=self.resources.dead_letter_queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=0,
        )
        return response.get("Messages", [])


@pytest.fixture
def system(aws_env, moto, resend_server, monkeypatch) -> Iterator[LocalSystem]:
    resources = create_local_resources(visibility_timeout_s=2, max_receive_count=5)
    domain = f"{uuid.uuid4().hex[:8]}.example.com"
    verify_ses_sender(aws_session(), domain)
    env = resources.consumer_env(
        SENDONCE_PROVIDER_TIMEOUT_SECONDS=5,
        SENDONCE_SAFETY_MARGIN_MS=5000,
        SENDONCE_SEND_CONCURRENCY=4,
        # The shared limiter has tests of its own; elsewhere it must not slow tests down.
        SENDONCE_RESEND_REQUESTS_PER_SECOND=1000,
        SENDONCE_SES_SEND_RATE=1000,
        RESEND_API_URL=resend_server.url,
    )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    local = LocalSystem(resources=resources, resend=resend_server, endpoint=moto.endpoint, env=env, domain=domain)
    yield local
    for poller in local.pollers:
        poller.stop()
    for process in local.processes:
        if process.poll() is None:
            process.kill()
        process.wait()


# --- deliverability (issue 7): suppressions, provider events, one-click unsubscribe -------


@dataclass
class LocalDeliverability:
    """The events and unsubscribe functions behind local HTTP APIs, wired to `system`'s
    moto tables, with the local Resend server sending its webhooks to the events API."""

    system: LocalSystem
    resources: DeliverabilityResources
    events_settings: EventsSettings
    events_api: LocalHttpApi
    unsubscribe_api: LocalHttpApi

    @property
    def webhook_url(self) -> str:
        return self.events_api.url + "/webhooks/resend"

    @property
    def suppressions(self):
        from sendonce.wiring.stores import build_suppressions

        return build_suppressions(self.resources.suppressions_table, clients().dynamodb)

    @property
    def ledger_events(self):
        from sendonce.adapters.dynamodb.ledger_events import DynamoDBLedgerEvents

        return DynamoDBLedgerEvents(
            client=boto3.client("dynamodb"),
            ledger_table=self.system.resources.ledger_table,
            campaigns_table=self.system.resources.campaigns_table,
            shards_of=self.system.shards_of,
        )

    def tokens(self):
        from sendonce.domain.deliverability.unsubscribe import UnsubscribeTokens

        return UnsubscribeTokens.from_secret(self.resources.unsubscribe_key)

    def ledger_item(self, campaign_id: str, recipient_id: str) -> dict:
        from boto3.dynamodb.types import TypeDeserializer

        from sendonce.adapters.dynamodb.ledger_keys import LedgerKeys
        from sendonce.domain.models import DeliveryKey

        key = LedgerKeys(self.system.shards_of).key(DeliveryKey(campaign_id=campaign_id, recipient_id=recipient_id))
        item = (
            boto3.client("dynamodb")
            .get_item(TableName=self.system.resources.ledger_table, Key=key, ConsistentRead=True)
            .get("Item", {})
        )
        return {k: TypeDeserializer().deserialize(v) for k, v in item.items()}


@pytest.fixture
def deliverability(system, monkeypatch) -> Iterator[LocalDeliverability]:
    from sendonce.handlers import events, unsubscribe
    from sendonce.settings import UnsubscribeSettings
    from sendonce.wiring.events import build_events_service
    from sendonce.wiring.unsubscribe import build_unsubscribe_service
    from sendonce_local.resources import create_deliverability_resources

    resources = create_deliverability_resources(webhook_secret=system.resend.webhook_secret)
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    events_settings = EventsSettings(
        ledger_table=system.resources.ledger_table,
        campaigns_table=system.resources.campaigns_table,
        suppressions_table=resources.suppressions_table,
        resend_webhook_secret=resources.webhook_secret_name,
        brake_min_sent=10,
    )
    unsubscribe_settings = UnsubscribeSettings(
        suppressions_table=resources.suppressions_table,
        unsubscribe_key_secret=resources.unsubscribe_key_secret,
        ledger_table=system.resources.ledger_table,
        campaigns_table=system.resources.campaigns_table,
    )
    events_api = LocalHttpApi(
        functools.partial(events.lambda_handler, service=build_events_service(events_settings, clients())),
        function_name="sendonce-events",
    ).start()
    unsubscribe_api = LocalHttpApi(
        functools.partial(
            unsubscribe.lambda_handler, service=build_unsubscribe_service(unsubscribe_settings, clients())
        ),
        function_name="sendonce-unsubscribe",
    ).start()
    local = LocalDeliverability(system, resources, events_settings, events_api, unsubscribe_api)
    system.resend.set_webhook(local.webhook_url, resources.webhook_secret)
    yield local
    system.resend.set_webhook(None)
    events_api.stop()
    unsubscribe_api.stop()
