"""bench-scale's stack: moto with the deployed CDK app, the local Resend server, and the
stack's functions in one process on one hooked session (bench/scale.py says why)."""

from __future__ import annotations

import functools
import json
import os
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from bench.scale_figures import KeyRates, key_kinds
from bench.scale_writers import FunctionSessions, sort_kind, writer_units
from bench.status_bytes import ResponseBytes, compare_status_reads
from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.ledger_keys import CampaignShards
from sendonce.contract import AGGREGATOR_BATCH_SIZE, AGGREGATOR_BATCHING_WINDOW_SECONDS
from sendonce.domain.models import Campaign, Content, Tracking
from sendonce.handlers import api, events
from sendonce.settings import ApiSettings, ConsumerSettings, EventsSettings
from sendonce.wiring.api import build_campaign_service
from sendonce.wiring.clients import Clients
from sendonce.wiring.consumer import build_consumer_parts, build_consumer_runtime
from sendonce.wiring.events import build_events_service
from sendonce_client import Client
from sendonce_client.streams import DEFAULT_STREAMS
from sendonce_local.demo.stack import RESEND_DEMO_KEY, DeployedConsumer, ResendServerProcess, deploy_stack
from sendonce_local.http_api import LocalHttpApi
from sendonce_local.moto_server import DemoMotoServer, aws_env
from sendonce_local.poller import EventSourcePoller, import_handler
from sendonce_local.resend_server import new_webhook_secret
from sendonce_local.stream_poller import StreamPoller, aggregator_handler, counters_poller
from sendonce_local.write_units import PARTITION_WRITE_UNITS_PER_SECOND, WriteUnitAccountant

DEFAULT_SIZES = (1_000, 10_000, 100_000)
SENDER_DOMAIN = "bench.example.com"
WEBHOOKS_PER_EMAIL = 2  # the local Resend server's `email.sent` and `email.delivered`


def recipients_of(campaign_id: str, size: int) -> Iterator[dict[str, Any]]:
    """A bench campaign's recipients: addresses of its own, so the provider's count is its."""
    for i in range(size):
        yield {
            "recipient_id": f"r{i:07d}",
            "email": f"u{i}@{campaign_id}.{SENDER_DOMAIN}",
            "variables": {"name": f"User {i}"},
        }


def bench_campaign(campaign_id: str, name: str, delivery_mode: str = "batch", *, tracking: bool = False) -> Campaign:
    """The campaign every bench-scale size sends (and bench.stream_replay creates again);
    the per-message comparison also sends it one by one (`delivery_mode="single"`)."""
    return Campaign(
        campaign_id=campaign_id,
        name=name,
        provider="resend",
        delivery_mode=delivery_mode,
        sender=f"news@{SENDER_DOMAIN}",
        content=Content(subject="Hello {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}"),
        tracking=Tracking(opens=True, clicks=True) if tracking else None,
    )


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
    # Campaigns larger than this run without provider events: the events function takes
    # ~25 webhooks/s here (one local process), so 100,000 recipients' 200,000 webhooks would
    # take over 2 hours. None: every campaign with events.
    events_up_to: int | None = None
    # Every stream record the aggregator is handed, one JSON line each (Lambda's record shape),
    # for `python -m bench.stream_replay`.
    capture_stream: Path | None = None
    log_dir: Path | None = None
    # One batch-mode message against the one-by-one path, at Resend's default team limit
    # (bench/scale_messages.py), before the sizes.
    per_message: bool = True
    # More CDK context for the deployment (`-c key=value` strings), e.g. caps per mailbox group.
    context: tuple[tuple[str, str], ...] = ()
    # Opens and clicks tracked (issue 33): every campaign tracks both, and the local Resend
    # server opens and clicks every email (the worst case for their keys): 4 webhooks an email.
    tracking: bool = False


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
        outputs = deploy_stack(
            self.moto.endpoint,
            context={"provider": "resend", "sender_domain": SENDER_DOMAIN, **dict(self.config.context)},
        )
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

        # Every DynamoDB client of the run comes from one of these sessions, one per function
        # (bench/scale_writers.py): the accountant and the request counters see them all, and
        # know which function wrote. `session` is the consumer's (and the pollers' SQS).
        self.accountant = WriteUnitAccountant(plain.client("dynamodb"), sort_kind=sort_kind)
        self.functions = FunctionSessions(self.accountant)
        self.session = self.functions["consumer"]
        self.key_rates = KeyRates(self.accountant).start()

        api_settings = ApiSettings.from_env(functions["sendonce.handlers.api.lambda_handler"])
        self.api_settings = api_settings
        self.operator = build_campaign_service(
            api_settings, Clients(self.functions["api"]), operator="sendonce bench-scale"
        )
        api_server = LocalHttpApi(
            functools.partial(api.lambda_handler, service=self.operator),
            caller_arn="arn:aws:iam::123456789012:user/bench",
            function_name="sendonce-api",
        ).start()
        events_service = build_events_service(EventsSettings.from_env(events_env), Clients(self.functions["events"]))

        def count_webhook(event: dict[str, Any], context: Any) -> Any:
            with self._webhooks_lock:
                self.webhooks += 1
            return events.lambda_handler(event, context, service=events_service)

        events_server = LocalHttpApi(count_webhook, function_name="sendonce-events").start()
        self.apis = [api_server, events_server]
        self.webhook_url = events_server.url + "/webhooks/resend"
        _post_json(
            self.resend.url + "/_local/faults", {"webhook_url": self.webhook_url, "webhook_secret": webhook_secret}
        )
        self.client = Client(api_server.url, session=self.session)
        self.aggregator = counters_poller(
            self.functions["aggregator"],
            ledger_table=self.deployed.ledger_table,
            campaigns_table=self.deployed.campaigns_table,
            handler=self._aggregator_handler(),
            # Batched as the stack maps the streams: its writes per record are the stack's.
            batch_size=AGGREGATOR_BATCH_SIZE,
            batching_window_s=AGGREGATOR_BATCHING_WINDOW_SECONDS,
        ).start()
        # The consumer's environment as deployed, pointed at moto and the local Resend server.
        consumer_env = {**self.deployed.environment, "RESEND_API_URL": self.resend.url}
        os.environ.update(consumer_env)
        self.consumer_settings = ConsumerSettings.from_env(os.environ)
        self.say(
            f"stack deployed in {self.deploy_s:.0f} s; consumer: batch size {self.deployed.batch_size}, "
            f"{self.consumer_count} concurrent, {self.deployed.environment.get('SENDONCE_RESEND_REQUESTS_PER_SECOND')} "
            "Resend requests/s (shared limiter), suppressions on, provider events "
            + ("on" if self.config.events_up_to is None else f"on up to {self.config.events_up_to:,} recipients")
        )
        return self

    def _aggregator_handler(self) -> Callable[[dict[str, Any], Any], Any]:
        """The deployed aggregator's handler on the hooked session; with `capture_stream`,
        each batch's records are also written down before they are applied."""
        handler = aggregator_handler(self.functions["aggregator"], self.deployed.campaigns_table)
        capture = self.config.capture_stream
        if capture is not None:
            capture.write_text("")

        def handle(event: dict[str, Any], context: Any) -> Any:
            if capture is not None:
                with capture.open("a") as out:
                    out.writelines(json.dumps(record, default=str) + "\n" for record in event.get("Records", []))
            return handler(event, context)

        return handle

    def drain_aggregator(self, say: Callable[[str], None], label: str) -> None:
        """Apply every stream record written so far (the report says when it could not)."""
        if self.aggregator is None:
            return
        try:
            self.aggregator.drain(max_seconds=self.config.webhook_wait_s)
        except TimeoutError:
            say(f"{label}: the aggregator still had records after {self.config.webhook_wait_s:g} s")

    def duplicates_and_missing(self, campaign_id: str, size: int) -> tuple[int, int]:
        """At the provider: emails accepted per address of the campaign."""
        deliveries = {
            a: n for a, n in self.resend.deliveries().items() if a.endswith(f"@{campaign_id}.{SENDER_DOMAIN}")
        }
        return sum(n - 1 for n in deliveries.values() if n > 1), size - len(deliveries)

    def set_team_limit(self, requests_per_second: int | None) -> None:
        """The local Resend server's team limit (requests per sliding second; None: none)."""
        _post_json(self.resend.url + "/_local/faults", {"rate_limit": requests_per_second})

    def events_on(self, on: bool) -> None:
        """Provider events for the next campaign: the local Resend server's webhooks on or off
        (with `tracking`, every email opened and clicked too)."""
        engagement = [{"subject_contains": "*", "opens": 1.0, "clicks": 1.0}] if on and self.config.tracking else None
        _post_json(
            self.resend.url + "/_local/faults",
            {"webhook_url": self.webhook_url if on else None, "engagement": engagement},
        )

    @property
    def webhooks_per_email(self) -> int:
        return WEBHOOKS_PER_EMAIL + (2 if self.config.tracking else 0)

    def webhook_count(self) -> int:
        with self._webhooks_lock:
            return self.webhooks

    @property
    def consumer_count(self) -> int:
        return self.config.consumers or self.deployed.max_concurrency

    def consumer_session(self) -> boto3.session.Session:
        """A session of the consumer's own, its write units still accounted: its requests
        counted apart from the other functions' (`RequestCounter` on it)."""
        session = boto3.session.Session()
        self.accountant.attach(session, writer="consumer")
        return session

    def consumer_runtime(self, session: boto3.session.Session | None = None) -> Any:
        """One consumer runtime on `session` (default: the run's), as Lambda builds one per
        execution environment (its own clients)."""
        return build_consumer_runtime(
            self.consumer_settings, build_consumer_parts(self.consumer_settings, Clients(session or self.session))
        )

    def start_consumers(
        self,
        count: int | None = None,
        invocation_seconds: list[float] | None = None,
        session: boto3.session.Session | None = None,
        runtimes: list[Any] | None = None,
    ) -> None:
        """`count` runtimes (default: the mapping's concurrency), on `session` (default: the
        run's); with `invocation_seconds`, each invocation's time is appended to it as it ends
        (batch size 1: one message each). `runtimes` built beforehand (`consumer_runtime`), one
        per consumer, start at once: building forty here takes longer than sending thousands."""
        handler = import_handler(self.deployed.poller_handler)
        sqs = self.session.client("sqs")
        for n in range(len(runtimes) if runtimes is not None else count or self.consumer_count):
            runtime = runtimes[n] if runtimes is not None else self.consumer_runtime(session)
            poller = EventSourcePoller(
                sqs_client=sqs,
                queue_url=self.deployed.queue_url,
                handler=_timed(functools.partial(handler, runtime=runtime), invocation_seconds),
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
        self.functions.reset()
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
            "dynamodb_requests_per_recipient": round(self.functions.total("dynamodb") / recipients, 3),
            "write_units_per_recipient": round(self.accountant.total() / recipients, 3),
            "write_units": self.accountant.total(),
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
            # Who wrote (bench/scale_writers.py): write units and items per writer, and the
            # DynamoDB requests each function made, in all (not per recipient).
            "writers": writer_units(self.accountant, roles, campaign_id),
            "dynamodb_requests_by_function": self.functions.by_function("dynamodb"),
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


def _timed(handler: Callable[[Any, Any], Any], seconds: list[float] | None) -> Callable[[Any, Any], Any]:
    if seconds is None:
        return handler

    def run(event: Any, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return handler(event, context)
        finally:
            seconds.append(time.perf_counter() - started)

    return run


def _post_json(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()
