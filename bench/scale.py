"""`make bench-scale`: one campaign per size, in the deployed configuration, every DynamoDB
write accounted per partition-key value.

    python -m bench.scale [--sizes 1000,10000,100000] [--streams 4] [--out bench-scale.json]

The CDK stack is deployed into moto's server (`sendonce_local.demo.stack.deploy_stack`);
every function runs with the environment it was deployed with: the operator API (behind a
local HTTP API) takes the publisher client's requests, `--streams` of them in flight; the
consumer runs in batch mode against the local Resend server with the suppression list and
the shared limiter on, one runtime per concurrent execution (the event source mapping's
MaximumConcurrency); Resend's webhooks reach the events function; the counters' aggregator
consumes both tables' streams. They run in this process (moto and the Resend server in
processes of their own) so that one `WriteUnitAccountant` sees every DynamoDB client of
the run.

Per campaign: published (consumers stopped), then sent and completed; per phase the
recipients per second, DynamoDB requests and write units per recipient, and per table the
hottest partition-key value's write units per recipient (with the ceiling it sets at 1,000
write units/s) and the most write units it took in one second; then one status read from
the counters and one full read (requests, bytes, seconds); duplicates and missing counted
at the provider (emails accepted per recipient address; every campaign has addresses of
its own). A size is run only while the previous one took under `--next-under-minutes`
(default 10); the ones left out are extrapolated from the last measured rates, with the
reason. Progress goes to stderr; stdout holds the JSON, also written to `--out`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from bench.core import machine
from bench.run import stdout_to_devnull
from bench.scale_figures import KeyRates, extrapolate, status_ratio
from bench.status_bytes import ResponseBytes, compare_status_reads
from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.ledger_keys import CampaignShards
from sendonce.domain.models import Campaign, CampaignState, Content
from sendonce.handlers import api, events
from sendonce.settings import ApiSettings, ConsumerSettings, EventsSettings
from sendonce.wiring import assemble_campaign_service, assemble_consumer, assemble_events, consumer_parts
from sendonce_cdk import aggregator as aggregator_mapping
from sendonce_client import Client
from sendonce_client.streams import DEFAULT_STREAMS
from sendonce_local.demo.stack import RESEND_DEMO_KEY, DeployedConsumer, ResendServerProcess, deploy_stack
from sendonce_local.http_api import LocalHttpApi
from sendonce_local.moto_server import DemoMotoServer, aws_env
from sendonce_local.poller import EventSourcePoller, import_handler
from sendonce_local.request_counter import RequestCounter
from sendonce_local.resend_server import new_webhook_secret
from sendonce_local.stream_poller import StreamPoller, counters_poller
from sendonce_local.write_units import PARTITION_WRITE_UNITS_PER_SECOND, WriteUnitAccountant

DEFAULT_SIZES = (1_000, 10_000, 100_000)
SENDER_DOMAIN = "bench.example.com"
WEBHOOKS_PER_EMAIL = 2  # the local Resend server's `email.sent` and `email.delivered`
# The aggregator's stream mappings as deployed (sendonce_cdk/aggregator.py): records gather
# for up to the window into batches of up to the size, so its writes per record are the stack's.
AGGREGATOR_BATCH_SIZE = aggregator_mapping.BATCH_SIZE
AGGREGATOR_BATCHING_WINDOW_S = aggregator_mapping.BATCHING_WINDOW.to_seconds()


@dataclass(frozen=True)
class ScaleConfig:
    sizes: tuple[int, ...] = DEFAULT_SIZES
    streams: int = DEFAULT_STREAMS
    consumers: int | None = None  # None: the mapping's MaximumConcurrency
    next_under_minutes: float = 10.0
    phase_timeout_s: float = 4 * 3600.0
    # How long to wait, once every email is accepted and the campaign completed, for the rest
    # of its webhooks: locally the events function runs one invocation at a time (~5/s here).
    webhook_wait_s: float = 600.0
    log_dir: Path | None = None


class ScaleStack:
    """moto with the deployed stack, the local Resend server, and the stack's functions in
    this process on one hooked session."""

    def __init__(self, config: ScaleConfig, say: Callable[[str], None]):
        self.config = config
        self.say = say
        self.log_dir = config.log_dir or Path(tempfile.mkdtemp(prefix="sendonce-bench-scale-"))
        self.moto = DemoMotoServer()
        self.resend = ResendServerProcess(self.log_dir)
        self.apis: list[LocalHttpApi] = []
        self.aggregator: StreamPoller | None = None
        self.consumers: list[EventSourcePoller] = []
        self.webhooks = 0
        self._webhooks_lock = threading.Lock()

    def start(self) -> ScaleStack:
        self.moto.start()
        self.resend.start()
        os.environ.update(aws_env(self.moto.endpoint))
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            os.environ.pop(name, None)
        self.say(f"deploying the CDK app into moto ({self.moto.endpoint})")
        started = time.monotonic()
        outputs = deploy_stack(self.moto.endpoint, context={"provider": "resend", "sender_domain": SENDER_DOMAIN})
        self.deploy_s = time.monotonic() - started
        plain = boto3.session.Session()
        self.deployed = DeployedConsumer.read(plain, outputs)
        self.outputs = outputs
        functions = {
            f["Handler"]: f.get("Environment", {}).get("Variables", {})
            for f in plain.client("lambda").list_functions()["Functions"]
        }
        secrets = plain.client("secretsmanager")
        secrets.create_secret(
            Name=self.deployed.environment["SENDONCE_RESEND_API_KEY_SECRET"], SecretString=RESEND_DEMO_KEY
        )
        events_env = functions["sendonce.handlers.events.lambda_handler"]
        webhook_secret = new_webhook_secret()
        secrets.create_secret(Name=events_env["SENDONCE_RESEND_WEBHOOK_SECRET"], SecretString=webhook_secret)
        plain.client("sesv2").create_email_identity(EmailIdentity=SENDER_DOMAIN)

        # Every DynamoDB client of the run comes from this session: the accountant and the
        # request counter see them all (publisher, consumers, events function, aggregator).
        self.session = boto3.session.Session()
        self.accountant = WriteUnitAccountant(plain.client("dynamodb"))
        self.accountant.attach(self.session)
        self.requests = RequestCounter(self.session)
        self.key_rates = KeyRates(self.accountant).start()

        api_settings = ApiSettings.from_env(functions["sendonce.handlers.api.lambda_handler"])
        self.operator = assemble_campaign_service(api_settings, "sendonce bench-scale", session=self.session)
        api_server = LocalHttpApi(
            functools.partial(api.lambda_handler, service=self.operator),
            caller_arn="arn:aws:iam::123456789012:user/bench",
            function_name="sendonce-api",
        ).start()
        events_service = assemble_events(EventsSettings.from_env(events_env), self.session)

        def count_webhook(event: dict[str, Any], context: Any) -> Any:
            with self._webhooks_lock:
                self.webhooks += 1
            return events.lambda_handler(event, context, service=events_service)

        events_server = LocalHttpApi(count_webhook, function_name="sendonce-events").start()
        self.apis = [api_server, events_server]
        _post_json(
            self.resend.url + "/_local/faults",
            {"webhook_url": events_server.url + "/webhooks/resend", "webhook_secret": webhook_secret},
        )
        self.client = Client(api_server.url, session=self.session)
        self.aggregator = counters_poller(
            self.session,
            ledger_table=self.deployed.ledger_table,
            campaigns_table=self.deployed.campaigns_table,
            batch_size=AGGREGATOR_BATCH_SIZE,
            batching_window_s=AGGREGATOR_BATCHING_WINDOW_S,
        ).start()
        # The consumer's environment as deployed, pointed at moto and the local Resend server.
        consumer_env = {**self.deployed.environment, "RESEND_API_URL": self.resend.url}
        os.environ.update(consumer_env)
        self.consumer_settings = ConsumerSettings.from_env(os.environ)
        self.say(
            f"stack deployed in {self.deploy_s:.0f} s; consumer: batch size {self.deployed.batch_size}, "
            f"{self.consumer_count} concurrent, {self.deployed.environment.get('SENDONCE_RESEND_REQUESTS_PER_SECOND')} "
            "Resend requests/s (shared limiter), suppressions and provider events on"
        )
        return self

    def webhook_count(self) -> int:
        with self._webhooks_lock:
            return self.webhooks

    @property
    def consumer_count(self) -> int:
        return self.config.consumers or self.deployed.max_concurrency

    def start_consumers(self) -> None:
        handler = import_handler(self.deployed.poller_handler)
        sqs = self.session.client("sqs")
        for n in range(self.consumer_count):
            # One runtime per execution environment, as Lambda builds one per sandbox.
            runtime = assemble_consumer(self.consumer_settings, consumer_parts(self.consumer_settings, self.session))
            poller = EventSourcePoller(
                sqs_client=sqs,
                queue_url=self.deployed.queue_url,
                handler=functools.partial(handler, runtime=runtime),
                function_name=f"{self.deployed.function_name}-{n}",
                batch_size=self.deployed.batch_size,
                function_timeout_s=self.deployed.timeout_s,
                max_concurrency=1,
            )
            self.consumers.append(poller.start())

    def stop_consumers(self) -> None:
        for poller in self.consumers:
            poller.stop()
        self.consumers.clear()

    def stop(self) -> None:
        self.stop_consumers()
        if self.aggregator is not None:
            self.aggregator.stop()
        for server in self.apis:
            server.stop()
        if hasattr(self, "key_rates"):
            self.key_rates.stop()
        self.resend.stop()
        self.moto.stop()

    # --- figures -------------------------------------------------------------------------

    def table_roles(self) -> dict[str, str]:
        return {
            self.deployed.ledger_table: "ledger",
            self.deployed.campaigns_table: "campaigns",
            self.outputs.get("SuppressionsTableName", ""): "suppressions",
        }

    def reset_phase(self) -> None:
        self.accountant.reset()
        self.requests.reset()
        self.key_rates.reset()

    def phase_figures(self, recipients: int, seconds: float, campaign_id: str = "") -> dict[str, Any]:
        roles = self.table_roles()
        hottest: dict[str, Any] = {}
        for table, role in roles.items():
            [top] = self.accountant.hottest(table, 1) or [None]
            if top is None:
                continue
            peak_key, peak = max(
                ((key, units) for key, units in self.key_rates.peak.items() if key[0] == table),
                key=lambda item: item[1],
                default=((table, ""), 0),
            )
            hottest[role] = {
                "key": top.partition,
                "write_units_per_recipient": round(top.per_recipient(recipients), 4),
                "ceiling_recipients_per_s": round(top.ceiling(recipients)),
                "peak_key": peak_key[1],
                "peak_write_units_per_s": peak,
                # The next ones too: which kinds of key come close to the hottest.
                "top": {f.partition: round(f.per_recipient(recipients), 4) for f in self.accountant.hottest(table, 6)},
            }
        return {
            "seconds": round(seconds, 1),
            "recipients_per_s": round(recipients / seconds, 1) if seconds else None,
            "dynamodb_requests_per_recipient": round(self.requests.total("dynamodb") / recipients, 3),
            "write_units_per_recipient": round(self.accountant.total() / recipients, 3),
            "write_units_per_recipient_by_table": {
                role: round(self.accountant.total(table) / recipients, 3) for table, role in roles.items()
            },
            "hottest": hottest,
            # Where the units went: per kind of key (the campaign id, shard numbers and
            # hashes generalized), the largest first.
            "write_units_per_recipient_by_key_kind": {
                role: key_kinds(self.accountant.hottest(table, None), recipients, campaign_id)
                for table, role in roles.items()
            },
            "partition_write_units_per_s": PARTITION_WRITE_UNITS_PER_SECOND,
        }

    def status_figures(self, campaign_id: str) -> dict[str, Any]:
        reader = boto3.session.Session()  # not hooked: the status read's own requests and bytes
        meter = ResponseBytes(reader)
        dynamodb = reader.client("dynamodb")
        campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=self.deployed.campaigns_table)
        ledger = DynamoDBLedger(
            client=dynamodb, table_name=self.deployed.ledger_table, shards_of=CampaignShards(campaigns.get)
        )
        counters = DynamoDBCounters(client=dynamodb, table_name=self.deployed.campaigns_table)
        figures, _ = compare_status_reads(campaigns, ledger, counters, campaign_id, meter)
        return figures


def _post_json(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def recipients_of(campaign_id: str, size: int) -> Iterator[dict[str, Any]]:
    for i in range(size):
        yield {
            "recipient_id": f"r{i:07d}",
            "email": f"u{i}@{campaign_id}.{SENDER_DOMAIN}",
            "variables": {"name": f"User {i}"},
        }


def key_kind(partition: str, campaign_id: str) -> str:
    """`campaign#scale1000#sent#3` -> `campaign#<id>#sent#<k>`; hashes -> `<h>`."""
    kind = partition.replace(campaign_id, "<id>") if campaign_id else partition
    kind = re.sub(r"[0-9a-f]{16,}", "<h>", kind)
    return re.sub(r"\d+", "<k>", kind)


def key_kinds(figures: list[Any], recipients: int, campaign_id: str, most: int = 12) -> dict[str, float]:
    units: dict[str, int] = {}
    for figure in figures:
        kind = key_kind(figure.partition, campaign_id)
        units[kind] = units.get(kind, 0) + figure.units
    ranked = sorted(units.items(), key=lambda item: -item[1])[:most]
    return {kind: round(n / recipients, 4) for kind, n in ranked}


def run_campaign(stack: ScaleStack, size: int, say: Callable[[str], None]) -> dict[str, Any]:
    campaign_id = f"scale{size}"
    stack.operator.create(
        Campaign(
            campaign_id=campaign_id,
            name=f"bench-scale {size:,}",
            provider="resend",
            delivery_mode="batch",
            sender=f"news@{SENDER_DOMAIN}",
            content=Content(subject="Hello {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}"),
        )
    )
    accepted_before = stack.resend.stats()["emails_accepted"]
    webhooks_before = stack.webhook_count()
    result: dict[str, Any] = {"recipients": size, "campaign_id": campaign_id}

    # Published, with no consumer running: the publish's own writes.
    stack.reset_phase()
    say(f"{size:,}: publishing in {stack.config.streams} streams")
    started = time.monotonic()
    summary = stack.client.publish(campaign_id, recipients_of(campaign_id, size), streams=stack.config.streams)
    result["publish"] = {
        **stack.phase_figures(size, time.monotonic() - started, campaign_id),
        "requests": summary.requests,
        "batches": summary.batches_new,
    }
    say(f"{size:,}: published in {result['publish']['seconds']} s; sending")

    # Sent and completed: consumers, provider events and the aggregator.
    stack.reset_phase()
    started = time.monotonic()
    stack.start_consumers()
    deadline = started + stack.config.phase_timeout_s
    sent_at = completed_at = None
    last_note = webhooks_changed = started
    webhooks = 0
    while time.monotonic() < deadline:
        time.sleep(2)
        now = time.monotonic()
        accepted = stack.resend.stats()["emails_accepted"] - accepted_before
        if sent_at is None and accepted >= size:
            sent_at = now
        if completed_at is None and stack.operator.get(campaign_id).state is CampaignState.COMPLETED:
            completed_at = now
        if stack.webhook_count() - webhooks_before != webhooks:
            webhooks, webhooks_changed = stack.webhook_count() - webhooks_before, now
        # Done once every email is accepted, the campaign completed and its webhooks are in
        # (or none came for a minute, or the wait for them ran out: the count is reported).
        if sent_at and completed_at:
            done_at = max(sent_at, completed_at)
            if (
                webhooks >= WEBHOOKS_PER_EMAIL * size
                or now - webhooks_changed > 60
                or now - done_at > stack.config.webhook_wait_s
            ):
                break
        if time.monotonic() - last_note > 60:
            last_note = time.monotonic()
            say(f"{size:,}: {accepted:,} accepted, {webhooks:,} webhooks, {time.monotonic() - started:.0f} s")
    stack.stop_consumers()
    if stack.aggregator is not None:
        try:
            stack.aggregator.drain(max_seconds=stack.config.webhook_wait_s)
        except TimeoutError:
            say(f"{size:,}: the aggregator still had records after {stack.config.webhook_wait_s:g} s")
    ended = time.monotonic()
    send_s = (sent_at or ended) - started
    result["send"] = {
        **stack.phase_figures(size, send_s, campaign_id),
        "completed": completed_at is not None,
        "completed_after_s": round(completed_at - started, 1) if completed_at else None,
        "with_events_and_aggregator_s": round(ended - started, 1),
        "webhooks": stack.webhook_count() - webhooks_before,
        "webhooks_expected": WEBHOOKS_PER_EMAIL * size,
    }
    # Duplicates and missing at the provider: emails accepted per address of this campaign.
    deliveries = {a: n for a, n in stack.resend.deliveries().items() if a.endswith(f"@{campaign_id}.{SENDER_DOMAIN}")}
    result["duplicates"] = sum(n - 1 for n in deliveries.values() if n > 1)
    result["missing"] = size - len(deliveries)
    result["state"] = stack.operator.get(campaign_id).state.value
    result["status"] = stack.status_figures(campaign_id)
    result["elapsed_s"] = round(result["publish"]["seconds"] + (ended - started), 1)
    say(
        f"{size:,}: sent in {send_s:.0f} s ({result['send']['recipients_per_s']}/s), "
        f"{result['state']}, duplicates {result['duplicates']}, missing {result['missing']}"
    )
    return result


def run_scale(
    config: ScaleConfig,
    say: Callable[[str], None],
    on_campaign: Callable[[list[dict[str, Any]]], None] | None = None,
) -> dict[str, Any]:
    """`on_campaign` gets the campaigns measured so far after each one (a long run's
    figures survive an interrupted one)."""
    started = time.monotonic()
    stack = ScaleStack(config, say).start()
    measured: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    try:
        for size in config.sizes:
            if measured and measured[-1]["elapsed_s"] > config.next_under_minutes * 60:
                previous = measured[-1]
                skipped.append(
                    {
                        **extrapolate(measured, size),
                        "reason": f"{previous['recipients']:,} recipients took {previous['elapsed_s'] / 60:.1f} min "
                        f"(the next size runs only under {config.next_under_minutes:g} min)",
                    }
                )
                continue
            measured.append(run_campaign(stack, size, say))
            if on_campaign:
                on_campaign(measured)
    finally:
        stack.stop()
    extrapolated = [
        extrapolate(measured, size) for size in (100_000, 1_000_000) if measured and size > max(config.sizes)
    ]
    return {
        "campaigns": measured,
        "skipped": skipped,
        "extrapolated": extrapolated,
        "status_bytes_ratio": status_ratio(measured),
        "config": {
            "sizes": list(config.sizes),
            "streams": config.streams,
            "consumers": stack.consumer_count,
            "consumer_batch_size": stack.deployed.batch_size,
            "resend_requests_per_second": stack.deployed.environment.get("SENDONCE_RESEND_REQUESTS_PER_SECOND"),
            "deploy_s": round(stack.deploy_s, 1),
        },
        "machine": machine(),
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES), help="recipients per campaign")
    parser.add_argument("--streams", type=int, default=DEFAULT_STREAMS, help="publish requests in flight")
    parser.add_argument("--consumers", type=int, default=None, help="default: the mapping's MaximumConcurrency")
    parser.add_argument("--next-under-minutes", type=float, default=10.0)
    parser.add_argument(
        "--webhook-wait", type=float, default=600.0, help="seconds to wait for the rest of a campaign's webhooks"
    )
    parser.add_argument("--out", type=Path, default=Path("bench-scale.json"))
    args = parser.parse_args(argv)
    try:
        sizes = tuple(int(s.replace("_", "")) for s in args.sizes.split(","))
    except ValueError:
        parser.error(f"--sizes: comma-separated recipient counts, not {args.sizes!r}")
    if any(s < 1 for s in sizes):
        parser.error("--sizes: each size must be at least 1")
    config = ScaleConfig(
        sizes=sizes,
        streams=args.streams,
        consumers=args.consumers,
        next_under_minutes=args.next_under_minutes,
        webhook_wait_s=args.webhook_wait,
    )

    def say(message: str) -> None:
        print(f"[bench-scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def partial(measured: list[dict[str, Any]]) -> None:
        args.out.write_text(json.dumps({"partial": True, "campaigns": measured}, indent=2) + "\n")

    with stdout_to_devnull():  # the functions' log lines and metrics, which Lambda sends to CloudWatch
        result = run_scale(config, say, partial)
    text = json.dumps(result, indent=2)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
