"""The local stack a benchmark runs against: moto's server and the local Resend server (each in
its own process), the environment pointed at them, fresh queues and tables for every campaign,
and the campaigns published to them."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from bench.capacity import (
    item_size,
)
from bench.config import BenchConfig, BenchError
from sendonce_local.moto_server import MotoServer

ROOT = Path(__file__).resolve().parents[1]
LOCAL_RESEND_KEY = "re_local_test_key"


@contextlib.contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def removed_from_environ(*names: str) -> Iterator[None]:
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _pythonpath() -> str:
    return os.pathsep.join([str(ROOT / "lambdas"), str(ROOT / "src"), str(ROOT)])


class ResendProcess:
    """The local Resend server in its own interpreter, so its work does not share the
    consumer's GIL; steered and read over its /_local endpoints."""

    def __init__(self, latency_ms: tuple[float, float]):
        self._latency_ms = latency_ms
        self._process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> ResendProcess:
        low, high = self._latency_ms
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sendonce_local.resend_server",
                "--port",
                "0",
                "--latency-ms",
                f"{low}:{high}",
                "--rate-limit",
                "0",
            ],  # off; phases that need a team limit set one
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": _pythonpath()},
        )
        assert self._process.stdout is not None
        self.url = self._process.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.stop()
            raise BenchError(f"local Resend server did not start (printed {self.url!r})")
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def accepted(self) -> list[dict]:
        return self._call("GET", "/_local/accepted")["accepted"]

    def stats(self) -> dict:
        return self._call("GET", "/_local/stats")

    def reset(self) -> None:
        """Forget accepted emails and keys (the latency model stays)."""
        self._call("POST", "/_local/reset")

    def set_rate_limit(self, requests_per_second: int | None) -> None:
        self._call("POST", "/_local/faults", {"rate_limit": requests_per_second})


@dataclass
class PublishedCampaign:
    campaign_id: str
    domain: str
    provider: str
    mode: str
    recipients: int
    messages: int
    bodies: list[str]
    resources: Any  # the queue and tables it was published to (fresh for every phase)


class LocalStack:
    """moto + local Resend, the environment pointed at them; fresh queues and tables for
    every campaign, so no phase runs against another's items or queue depth."""

    def __init__(self, config: BenchConfig, *, moto_endpoint: str | None = None, speed_patches: bool = False):
        """`speed_patches`: start the demo's moto (moto_patches.SPEED_PATCHES: stock moto spends
        ~40 ms of CPU per item of a transaction, which real DynamoDB does not)."""
        self.config = config
        self._moto_endpoint = moto_endpoint
        self._speed_patches = speed_patches
        self._exit = contextlib.ExitStack()

    def __enter__(self) -> LocalStack:
        from sendonce_local.moto_server import aws_env

        try:
            if self._moto_endpoint:
                self.moto_endpoint, self.moto_patched, self.moto_speed_patched = self._moto_endpoint, False, False
            else:
                moto = MotoServer(speed_patches=self._speed_patches).start()  # its bootstrap carries the patches
                self._exit.callback(moto.stop)
                self.moto_endpoint, self.moto_patched, self.moto_speed_patched = (
                    moto.endpoint,
                    True,
                    self._speed_patches,
                )
            self._exit.enter_context(patched_environ(aws_env(self.moto_endpoint)))
            # A profile would win over the fake keys; this flag would make boto3 ignore the endpoint.
            self._exit.enter_context(
                removed_from_environ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
            )
            self.resend = ResendProcess(self.config.latency_ms).start()
            self._exit.callback(self.resend.stop)
            self.sqs = boto3.client("sqs")
            self.dynamodb = boto3.client("dynamodb")
        except BaseException:
            self._exit.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._exit.close()

    @staticmethod
    def suppressions_table(resources: Any) -> str:
        """The phase's suppression list: checked before every send, as deployed."""
        return f"{resources.ledger_table}-suppressions"

    def consumer_env(self, resources: Any, *, rate: float | None, **overrides: Any) -> dict[str, str]:
        """The consumer's settings; rate None switches the shared limiter off. The limiter
        paces at exactly `rate` (no reserve) unless `overrides` say otherwise."""
        return resources.consumer_env(
            **{
                "SENDONCE_SUPPRESSIONS_TABLE": self.suppressions_table(resources),
                "SENDONCE_SEND_CONCURRENCY": self.config.send_concurrency,
                "SENDONCE_PROVIDER_TIMEOUT_SECONDS": 10,
                "SENDONCE_SAFETY_MARGIN_MS": 15_000,
                "SENDONCE_SHARED_RATE_LIMIT": "true" if rate else "false",
                "SENDONCE_RESEND_REQUESTS_PER_SECOND": rate or 10,
                "SENDONCE_RESEND_RATE_RESERVE": 0,
                "SENDONCE_SES_SEND_RATE": rate or 14,
                "RESEND_API_URL": self.resend.url,
                **overrides,
            }
        )

    def default_consumer_env(self, resources: Any, **overrides: Any) -> dict[str, str]:
        """The consumer's own defaults for the send rate (settings.py), nothing overridden."""
        return resources.consumer_env(
            **{
                "SENDONCE_SUPPRESSIONS_TABLE": self.suppressions_table(resources),
                "SENDONCE_SEND_CONCURRENCY": self.config.send_concurrency,
                "SENDONCE_PROVIDER_TIMEOUT_SECONDS": 10,
                "SENDONCE_SAFETY_MARGIN_MS": 15_000,
                "RESEND_API_URL": self.resend.url,
                **overrides,
            }
        )

    def fresh_resources(self) -> Any:
        from sendonce_local.resources import create_local_resources, create_suppressions_table

        # The visibility timeout outlasts any invocation: a message that comes back
        # means a failure, which the phase reports instead of waiting it out.
        resources = create_local_resources(
            visibility_timeout_s=int(self.config.function_timeout_s * 2), resend_api_key=LOCAL_RESEND_KEY
        )
        create_suppressions_table(self.dynamodb, self.suppressions_table(resources))
        return resources

    def publish(
        self, label: str, recipients: int, *, provider: str = "resend", mode: str = "single"
    ) -> PublishedCampaign:
        from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
        from sendonce.domain.models import Campaign, Content, Recipient
        from sendonce.settings import ApiSettings
        from sendonce.wiring.api import campaign_service
        from sendonce_local.resources import verify_ses_sender

        self.resend.reset()
        resources = self.fresh_resources()
        operator = campaign_service(
            ApiSettings(
                ledger_table=resources.ledger_table,
                campaigns_table=resources.campaigns_table,
                queue_url=resources.queue_url,
                dead_letter_queue_url=resources.dead_letter_queue_url,
            )
        )
        campaign_id = f"{label}-{uuid.uuid4().hex[:6]}"
        domain = f"{uuid.uuid4().hex[:10]}.example.com"
        if provider == "ses":
            verify_ses_sender(boto3.session.Session(), domain)
        operator.create(
            Campaign(
                campaign_id=campaign_id,
                name=f"bench {label}",
                provider=provider,
                delivery_mode=mode,
                **({"ledger_shards": self.config.ledger_shards} if self.config.ledger_shards else {}),
                sender=f"news@{domain}",
                content=Content(
                    subject="Spring launch, {{ name }}",
                    html="<p>Hi {{ name }},</p><p>Our spring collection is here.</p>",
                    text="Hi {{ name }}, our spring collection is here.",
                ),
            )
        )
        people = [
            Recipient(recipient_id=f"r{i}", email=f"user{i}@{domain}", variables={"name": f"User {i}"})
            for i in range(recipients)
        ]
        report = operator.publish(campaign_id, people, batch_size=self.config.message_size)
        store = DynamoDBCampaignStore(client=self.dynamodb, table_name=resources.campaigns_table)
        bodies = [batch.to_body() for batch, _ in store.batches(campaign_id)]
        return PublishedCampaign(
            campaign_id, domain, provider, mode, recipients, report.messages_sent, bodies, resources
        )

    def redeliver(self, campaign: PublishedCampaign) -> None:
        """Put the campaign's messages on the queue again (a redelivery, a redrive), in the
        campaign's message group as the publisher sends them."""
        for start in range(0, len(campaign.bodies), 10):
            chunk = campaign.bodies[start : start + 10]
            self.sqs.send_message_batch(
                QueueUrl=campaign.resources.queue_url,
                Entries=[
                    {"Id": str(i), "MessageBody": body, "MessageGroupId": campaign.campaign_id}
                    for i, body in enumerate(chunk)
                ],
            )

    def accepted_times(self, campaign: PublishedCampaign) -> tuple[list[float], Counter]:
        """Acceptance times at the provider and emails per address, for this campaign."""
        suffix = "@" + campaign.domain
        times: list[float] = []
        per_address: Counter = Counter()
        for email in self.resend.accepted():
            mine = [a.lower() for a in email["to"] if a.lower().endswith(suffix)]
            if mine:
                times.append(email["accepted_at"])
                per_address.update(mine)
        return sorted(times), per_address

    def item_sizes(self, campaign: PublishedCampaign) -> dict[tuple[str, tuple[str, str]], int]:
        """Final sizes of the campaign's ledger items and campaigns-table items."""
        ledger_table, campaigns_table = campaign.resources.ledger_table, campaign.resources.campaigns_table
        sizes: dict[tuple[str, tuple[str, str]], int] = {}
        from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
        from sendonce.adapters.dynamodb.ledger_keys import LedgerKeys

        store = DynamoDBCampaignStore(client=self.dynamodb, table_name=campaigns_table)
        keys = LedgerKeys(lambda c: store.get(c).ledger_shards)
        for item in keys.query_campaign(self.dynamodb, ledger_table, campaign.campaign_id):
            sizes[(ledger_table, (item["campaign_id"]["S"], item["recipient_id"]["S"]))] = item_size(item)
        paginator = self.dynamodb.get_paginator("query")
        for partition in store.partitions(campaign.campaign_id):  # the campaign's key and its batch shards
            for page in paginator.paginate(
                TableName=campaigns_table,
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues={":p": {"S": partition}},
            ):
                for item in page["Items"]:
                    sizes[(campaigns_table, (item["pk"]["S"], item["sk"]["S"]))] = item_size(item)
        return sizes


# --- consumers ----------------------------------------------------------------------
