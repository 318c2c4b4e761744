"""The demo's local system: moto with the deployed stack, the local Resend server, the
fault proxies, and the consumer processes with the deployed configuration (time scaled
once the calibration has chosen the scale)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.contract import AGGREGATOR_BATCHING_WINDOW_SECONDS
from sendonce.domain.campaigns.service import CampaignService
from sendonce.settings import ApiSettings
from sendonce.wiring.api import campaign_service
from sendonce.wiring.clients import Clients
from sendonce.wiring.stores import build_campaign_store
from sendonce_local.demo.campaign import SENDER_DOMAIN
from sendonce_local.demo.consumer import COUNTS_ENV, HANDLER_ENV, TIMINGS_ENV
from sendonce_local.demo.proxy import RESEND_SEND_PATHS, SES_SEND_PATHS, FaultProxy
from sendonce_local.demo.stack import (
    RESEND_DEMO_KEY,
    ConsumerProcess,
    DeployedConsumer,
    ResendServerProcess,
    consumer_environment,
    deploy_stack,
)
from sendonce_local.demo.timing import TimeScale
from sendonce_local.function_output import function_output
from sendonce_local.moto_server import DemoMotoServer, aws_env, ses_deliveries
from sendonce_local.stream_poller import StreamPoller, aggregator_handler, counters_poller

# Send rates for the demo, instead of the stack's 10 Resend requests/s and 14 SES emails/s
# (a new account's quota), which would stretch a local run to minutes of waiting.
DEMO_RATES = {"resend": ("SENDONCE_RESEND_REQUESTS_PER_SECOND", "50"), "ses": ("SENDONCE_SES_SEND_RATE", "500")}
BASELINE_HANDLER = "sendonce_local.demo.baseline:lambda_handler"
FAULTS_HANDLER = "sendonce_local.faults:lambda_handler"
FAULTS_INIT = "sendonce_local.faults:init"
COUNTING_HANDLER = "sendonce_local.demo.consumer:lambda_handler"
COUNTING_INIT = "sendonce_local.demo.consumer:init"


class DemoSystem:
    """moto with the deployed stack, the local Resend server, the consumers' settings."""

    def __init__(self, *, provider: str, log_dir: Path, say: Callable[[str], None]) -> None:
        self.provider = provider
        self.log_dir = log_dir
        self.say = say
        self.moto = DemoMotoServer()
        self.resend = ResendServerProcess(log_dir)
        self.kill_proxy: FaultProxy | None = None  # in front of the provider, for one doomed consumer
        self.ses_proxy: FaultProxy | None = None  # in front of moto's SES, for every consumer
        self.deploy_seconds = 0.0
        self.consumer: DeployedConsumer | None = None
        self.time_scale: TimeScale | None = None  # None: the deployed durations, unscaled
        self.overrides: dict[str, str] = {}
        self.env: dict[str, str] = {}
        self.processes: list[ConsumerProcess] = []
        self._session: boto3.session.Session | None = None
        self._clients: Clients | None = None
        self.operator: CampaignService | None = None
        # The counters' aggregator, in this process (the stack's stream mappings are off in moto).
        self.counters: StreamPoller | None = None
        self._output = contextlib.ExitStack()  # the aggregator's output, to its log file

    def start(self) -> DemoSystem:
        self.moto.start()
        self.resend.start()
        # This process's own clients (publishing, pause/resume, status) talk to moto too.
        os.environ.update(aws_env(self.moto.endpoint))
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            os.environ.pop(name, None)
        self._session = boto3.session.Session()
        self._clients = Clients(self._session)
        self.say(f"moto on {self.moto.endpoint}; local Resend server on {self.resend.url}")
        self.say("deploying the CDK app into moto (synthesis in process + CloudFormation CreateStack)")
        started = time.monotonic()
        outputs = deploy_stack(self.moto.endpoint, context={"provider": self.provider, "sender_domain": SENDER_DOMAIN})
        self.deploy_seconds = time.monotonic() - started
        consumer = self.consumer = DeployedConsumer.read(self._session, outputs)
        secret_name = consumer.environment.get("SENDONCE_RESEND_API_KEY_SECRET")
        if secret_name:
            self._session.client("secretsmanager").create_secret(Name=secret_name, SecretString=RESEND_DEMO_KEY)
        self._session.client("sesv2").create_email_identity(EmailIdentity=SENDER_DOMAIN)
        if self.provider == "ses":
            # moto's SES has no fault knobs: every consumer reaches it through a proxy that can stall.
            self.ses_proxy = FaultProxy(self.moto.endpoint, send_paths=SES_SEND_PATHS).start()
            self.kill_proxy = FaultProxy(self.ses_proxy.url, send_paths=SES_SEND_PATHS).start()
        else:
            self.kill_proxy = FaultProxy(self.resend.url, send_paths=RESEND_SEND_PATHS).start()
        self._configure()
        self.operator = campaign_service(
            ApiSettings(
                ledger_table=consumer.ledger_table,
                campaigns_table=consumer.campaigns_table,
                queue_url=consumer.queue_url,
                dead_letter_queue_url=consumer.dead_letter_queue_url,
                counters=True,
            ),
            operator="sendonce demo",
        )
        self.counters = counters_poller(
            self._session,
            ledger_table=consumer.ledger_table,
            campaigns_table=consumer.campaigns_table,
            handler=self._aggregator_handler(consumer.campaigns_table),
            # The deployed mapping's window (not 0, polling again at once): batches of the size
            # the stack's aggregator gets, so fewer aggregator writes for moto to apply.
            batching_window_s=AGGREGATOR_BATCHING_WINDOW_SECONDS,
        ).start()
        self.say(f"stack deployed in {self.deploy_seconds:.1f} s")
        return self

    def _aggregator_handler(self, campaigns_table: str) -> Callable[[dict[str, Any], Any], Any]:
        """The deployed aggregator's handler. What the functions run in this process write
        (the aggregator's and the operator's Powertools log lines, the aggregator's metrics
        and warnings: CloudWatch's, on AWS) goes to functions.log in the log directory, not
        between the demo's lines."""
        from sendonce.handlers.observability import logger

        routed = self._output.enter_context(function_output(self.log_dir / "functions.log", logger.registered_handler))
        handler = aggregator_handler(self.session, campaigns_table)

        def handle(event: dict[str, Any], context: Any) -> Any:
            with routed.to_log():
                return handler(event, context)

        return handle

    @property
    def session(self) -> boto3.session.Session:
        """This process's AWS session (on moto), once started."""
        assert self._session is not None, "the system is not started"
        return self._session

    @property
    def clients(self) -> Clients:
        """The wiring's clients of that session, each built once."""
        assert self._clients is not None, "the system is not started"
        return self._clients

    def apply_time_scale(self, scale: TimeScale) -> None:
        """The scaled function timeout, visibility timeout, provider timeout and safety
        margin for every consumer started from now on."""
        assert self.consumer is not None
        self.time_scale = scale
        self.client("sqs").set_queue_attributes(
            QueueUrl=self.consumer.queue_url,
            Attributes={"VisibilityTimeout": str(scale.visibility_timeout_s(self.consumer))},
        )
        self._configure()

    def _configure(self) -> None:
        assert self.consumer is not None
        rate_variable, rate = DEMO_RATES[self.provider]
        scaled = self.time_scale.overrides(self.consumer) if self.time_scale else {}
        self.overrides = {**scaled, rate_variable: rate}
        self.env = consumer_environment(
            self.consumer, endpoint=self.moto.endpoint, resend_url=self.resend.url, overrides=self.overrides
        )
        if self.ses_proxy is not None:
            self.env["AWS_ENDPOINT_URL_SESV2"] = self.ses_proxy.url

    def function_timeout_s(self) -> float:
        assert self.consumer is not None
        return self.time_scale.function_timeout_s(self.consumer) if self.time_scale else self.consumer.timeout_s

    def visibility_timeout_s(self) -> int:
        assert self.consumer is not None
        return (
            self.time_scale.visibility_timeout_s(self.consumer)
            if self.time_scale
            else self.consumer.visibility_timeout_s
        )

    def client(self, service: str) -> Any:
        assert self._session is not None
        return self._session.client(service)

    def campaign_store(self) -> DynamoDBCampaignStore:
        assert self.consumer is not None
        campaigns, _ = build_campaign_store(self.consumer.campaigns_table, self.clients.dynamodb)
        return campaigns

    def start_consumer(
        self, name: str, handler: str, extra_env: dict[str, str] | None = None, *, init: str | None = None
    ) -> ConsumerProcess:
        assert self.consumer is not None
        process = ConsumerProcess(
            name,
            consumer=self.consumer,
            handler=handler,
            function_timeout_s=self.function_timeout_s(),
            env={**self.env, **(extra_env or {})},
            log_dir=self.log_dir,
            init=init,
        )
        self.processes.append(process)
        return process

    def start_sendonce_consumer(self, name: str) -> ConsumerProcess:
        """The deployed handler, its runtime built before the first invocation, counting
        its requests (`<name>.counts`) and timing its invocations (`<name>.timings`)."""
        assert self.consumer is not None
        env = {
            HANDLER_ENV: self.consumer.handler,
            COUNTS_ENV: str(self.log_dir / f"{name}.counts"),
            TIMINGS_ENV: str(self.log_dir / f"{name}.timings"),
        }
        return self.start_consumer(name, COUNTING_HANDLER, env, init=COUNTING_INIT)

    @property
    def staller(self) -> ResendServerProcess | FaultProxy:
        """Where a provider answer can be held back: the Resend server itself, or the SES proxy."""
        return self.ses_proxy if self.ses_proxy is not None else self.resend

    def provider_endpoint_env(self, url: str) -> dict[str, str]:
        """Environment that sends a consumer's provider calls to `url` instead."""
        return {"AWS_ENDPOINT_URL_SESV2": url} if self.provider == "ses" else {"RESEND_API_URL": url}

    def deliveries(self) -> dict[str, int]:
        """Emails accepted per recipient address, at the provider, since it started."""
        if self.provider == "ses":
            return ses_deliveries(self.moto.endpoint)
        return self.resend.deliveries()

    def accepted_total(self) -> int:
        if self.provider == "ses":
            # moto counts every recipient its SES (v1 and v2) accepted: SentLast24Hours.
            return int(self.client("ses").get_send_quota()["SentLast24Hours"])
        return self.resend.stats()["emails_accepted"]

    def stop_consumers(self) -> None:
        for process in self.processes:
            process.kill()
        self.processes.clear()

    def drain_counters(self) -> None:
        """Apply every stream record written so far (status then reads exact counters)."""
        if self.counters is not None:
            self.counters.drain()

    def stop(self) -> None:
        if self.counters is not None:
            self.counters.stop()
        self._output.close()
        self.stop_consumers()
        for proxy in (self.kill_proxy, self.ses_proxy):
            if proxy is not None:
                proxy.stop()
        self.resend.stop()
        self.moto.stop()
