"""`SendOnce`: the whole sendonce pipeline as one construct, for a stack of your own.

    from sendonce_cdk import SendOnce

    mail = SendOnce(self, "Mail", providers=["ses"], sender_domain="mail.example.com")
    mail.grant_publish(publisher_role)        # create and publish campaigns (operator API)
    mail.grant_operate(on_call_role)          # every operator route: pause, resume, cancel, ...

Props are the CDK context keys of docs/deploy.md, typed; a provider's own keys (its secrets'
names, its rate) come as keywords too, named by its module in `sendonce_cdk/providers/`.
They are checked together by `sendonce_cdk.config.SendonceConfig` (a bad combination raises
`ConfigError` before synthesis). `provider_registry` replaces the registered providers
(`sendonce_cdk.providers.registry.registered`), for a provider of your own.
The grants between the parts and the cdk-nag acknowledgements come with it.
`sendonce_infra.stack.SendonceStack` is this construct with the stack outputs around it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from sendonce_cdk.account_health import AccountHealth
from sendonce_cdk.aggregator import Aggregator
from sendonce_cdk.bundling import lambda_code
from sendonce_cdk.config import COMMON_DEFAULTS, DEFAULTS, MAX_RECEIVE_COUNT, SendonceConfig
from sendonce_cdk.consumer import Consumer
from sendonce_cdk.dashboard import Dashboard
from sendonce_cdk.grants import SendOnceGrants
from sendonce_cdk.http_api import RouteThrottle
from sendonce_cdk.jobs import JobsWorker
from sendonce_cdk.ledger import LedgerTables
from sendonce_cdk.nag_findings import SendOnceFindings
from sendonce_cdk.oncall import OnCall
from sendonce_cdk.operator_api import OperatorApi
from sendonce_cdk.provider_events import ProviderEvents
from sendonce_cdk.providers.base import ProviderStack
from sendonce_cdk.providers.registry import context_defaults, registered
from sendonce_cdk.public_api import PublicApi
from sendonce_cdk.queues import SendQueues
from sendonce_cdk.scheduled_start import ScheduledStart

# What `grant_publish` allows on the operator API: create, publish, read.
PUBLISH_ROUTES = (
    ("POST", "/campaigns"),
    ("POST", "/campaigns/*/publish"),
    ("GET", "/campaigns/*"),
    ("GET", "/campaigns/*/delivery-status"),
)
STAGE = "$default"


class SendOnce(SendOnceGrants, SendOnceFindings, Construct):
    """Queues, ledger tables, consumer, operator and public APIs, provider events, on-call
    alarms and dashboard, wired and granted (docs/deploy.md, docs/operations.md).

    Public attributes: `queue`, `dead_letter_queue`, `ledger_table`, `campaigns_table`,
    `suppressions_table`, `consumer` (the consumer function), `on_call_topic`,
    `operator_api_url`, `public_api_url`, and `config` (the validated settings); the parts
    themselves as `queues`, `tables`, `consumer_parts`, `jobs` (the jobs worker and its
    queue), `operator_api`, `provider_events`, `public_api`, `oncall`, `dashboard`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        providers: Sequence[str],
        sender_domain: str,
        unsubscribe_key_secret_name: str = DEFAULTS["unsubscribe_key_secret_name"],
        unsubscribe_base_url: str | None = None,
        feedback_id_sender_id: str = DEFAULTS["feedback_id_sender_id"],
        feedback_id_stream: str = DEFAULTS["feedback_id_stream"],
        feedback_id_customer: str = DEFAULTS["feedback_id_customer"],
        mailbox_groups: Mapping[str, Sequence[str]] | str | None = None,
        pacing: Mapping[str, float] | str | None = None,
        warmup: Mapping[str, Mapping[str, Any]] | str | None = None,
        recipients_bucket: str | None = None,
        oncall_email: str | None = None,
        oncall_https_url: str | None = None,
        send_rate: float = DEFAULTS["send_rate"],
        send_concurrency: int = DEFAULTS["send_concurrency"],
        provider_timeout_seconds: int = DEFAULTS["provider_timeout_seconds"],
        provider_latency_ms: int = DEFAULTS["provider_latency_ms"],
        batch_size: int = DEFAULTS["batch_size"],
        max_concurrency: int | None = None,
        queue_age_alarm_minutes: int = DEFAULTS["queue_age_alarm_minutes"],
        removal_policy: Literal["retain", "destroy"] = DEFAULTS["removal_policy"],
        unsubscribe_rate_limit: int = DEFAULTS["unsubscribe_rate_limit"],
        unsubscribe_burst_limit: int = DEFAULTS["unsubscribe_burst_limit"],
        webhook_rate_limit: int = DEFAULTS["webhook_rate_limit"],
        webhook_burst_limit: int = DEFAULTS["webhook_burst_limit"],
        events_reserved_concurrency: int | None = None,
        unsubscribe_reserved_concurrency: int = DEFAULTS["unsubscribe_reserved_concurrency"],
        api_reserved_concurrency: int = DEFAULTS["api_reserved_concurrency"],
        account_concurrency: int = DEFAULTS["account_concurrency"],
        code: lambda_.Code | None = None,
        provider_registry: Mapping[str, ProviderStack] | None = None,
        **provider_props: Any,
    ) -> None:
        super().__init__(scope, id)
        # Every other keyword is a context key of the same name (sendonce_cdk.config.DEFAULTS,
        # and the registered providers' keys).
        props: dict[str, Any] = {
            key: value
            for key, value in locals().items()
            if key
            not in ("self", "scope", "id", "code", "providers", "provider_registry", "provider_props", "__class__")
        }
        stacks = provider_registry if provider_registry is not None else registered()
        if unknown := set(props) - set(COMMON_DEFAULTS) or set(provider_props) - set(context_defaults(stacks)):
            raise TypeError(f"SendOnce props without a context key: {sorted(unknown)}")
        # The stack's name prefixes the alarms and the dashboard, and names a provider's
        # resources where it has any (the default SES configuration set).
        config = SendonceConfig.from_context(
            {
                **props,
                **provider_props,
                "provider": list(providers),
                "stack_name": cdk.Stack.of(self).stack_name,
            },
            providers=stacks,
        )
        self.config = config
        # One asset for every function: one bundle, one upload.
        code = code or lambda_code()
        removal_policy = cdk.RemovalPolicy.RETAIN if config.retain else cdk.RemovalPolicy.DESTROY
        function_timeout = cdk.Duration.seconds(config.function_timeout_seconds)

        self.queues = SendQueues(
            self,
            "Queues",
            visibility_timeout=cdk.Duration.seconds(config.visibility_timeout_seconds),
            max_receive_count=MAX_RECEIVE_COUNT,
            removal_policy=removal_policy,
        )
        self.tables = LedgerTables(self, "Tables", removal_policy=removal_policy)
        self.consumer_parts = Consumer(
            self,
            "Consumer",
            queue=self.queues.queue,
            dead_letter_queue=self.queues.dead_letter_queue,
            max_receive_count=self.queues.max_receive_count,
            ledger_table=self.tables.ledger,
            campaigns_table=self.tables.campaigns,
            suppressions_table=self.tables.suppressions,
            timeout=function_timeout,
            batch_size=config.batch_size,
            max_concurrency=config.max_concurrency,
            send_concurrency=config.send_concurrency,
            provider_timeout_seconds=config.provider_timeout_seconds,
            safety_margin_ms=config.safety_margin_ms,
            provider_settings=_prefixed(
                [(stack, stack.standing_consumer_settings(config)) for stack in config.provider_stacks.values()]
                + [(stack, stack.consumer_settings(config)) for stack in config.deployed]
            ),
            unsubscribe_key_secret_name=config.unsubscribe_key_secret_name if config.unsubscribe_base_url else None,
            unsubscribe_base_url=config.unsubscribe_base_url,
            feedback_id=config.feedback_id_settings,
            pacing=config.pacing_settings,
            reserved_concurrency=config.consumer_reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )
        self.jobs = JobsWorker(
            self,
            "Jobs",
            ledger_table=self.tables.ledger,
            campaigns_table=self.tables.campaigns,
            campaign_queue=self.queues.queue,
            campaign_dead_letter_queue=self.queues.dead_letter_queue,
            suppressions_table=self.tables.suppressions,
            provider_settings=_prefixed(
                [(stack, stack.standing_consumer_settings(config)) for stack in config.provider_stacks.values()]
                + [(stack, stack.audit_settings(config)) for stack in config.deployed]
            ),
            pacing=config.pacing_settings,
            removal_policy=removal_policy,
            code=code,
        )
        self.scheduled_start = ScheduledStart(
            self,
            "ScheduledStart",
            ledger_table=self.tables.ledger,
            campaigns_table=self.tables.campaigns,
            queue=self.queues.queue,
            dead_letter_queue=self.queues.dead_letter_queue,
            jobs_queue=self.jobs.queue,
            removal_policy=removal_policy,
            code=code,
        )
        self.operator_api = OperatorApi(
            self,
            "OperatorApi",
            ledger_table=self.tables.ledger,
            campaigns_table=self.tables.campaigns,
            queue=self.queues.queue,
            dead_letter_queue=self.queues.dead_letter_queue,
            suppressions_table=self.tables.suppressions,
            scheduling={
                "scheduler_group": self.scheduled_start.group_name,
                "scheduler_role_arn": self.scheduled_start.scheduler_role.role_arn,
                "scheduled_start_function_arn": self.scheduled_start.function.function_arn,
            },
            jobs_queue=self.jobs.queue,
            provider_settings=_prefixed(
                [(stack, stack.standing_consumer_settings(config)) for stack in config.provider_stacks.values()]
            ),
            feedback_id=config.feedback_id_settings,
            pacing=config.pacing_settings,
            reserved_concurrency=config.api_reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )
        self.provider_events = ProviderEvents(
            self,
            "ProviderEvents",
            ledger_table=self.tables.ledger,
            campaigns_table=self.tables.campaigns,
            suppressions_table=self.tables.suppressions,
            provider_settings=_prefixed([(stack, stack.events_settings(config)) for stack in config.deployed]),
            sources=[stack.descriptor.events_title for stack in config.provider_stacks.values()],
            pacing=config.pacing_settings,
            reserved_concurrency=config.events_reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )
        for stack in config.deployed:
            stack.add_event_sources(self.provider_events, config)
        webhook_paths = [stack.webhook_path for stack in config.deployed if stack.webhook_path]
        self.public_api = PublicApi(
            self,
            "PublicApi",
            suppressions_table=self.tables.suppressions,
            ledger_table=self.tables.ledger,
            campaigns_table=self.tables.campaigns,
            unsubscribe_key_secret_name=config.unsubscribe_key_secret_name,
            unsubscribe_throttle=RouteThrottle(
                rate_limit=config.unsubscribe_rate_limit, burst_limit=config.unsubscribe_burst_limit
            ),
            webhook_throttle=RouteThrottle(
                rate_limit=config.webhook_rate_limit, burst_limit=config.webhook_burst_limit
            ),
            events_function=self.provider_events.function if webhook_paths else None,
            webhook_paths=webhook_paths,
            unsubscribe_reserved_concurrency=config.unsubscribe_reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )
        self.aggregator = Aggregator(
            self,
            "Aggregator",
            ledger_table=self.tables.ledger,
            campaigns_table=self.tables.campaigns,
            reserved_concurrency=config.aggregator_reserved_concurrency,
            removal_policy=removal_policy,
            code=code,
        )
        # One check per deployed provider that has an account state to read (SES).
        self.account_health: dict[str, AccountHealth] = {
            stack.name: AccountHealth(
                self,
                f"{stack.descriptor.label.replace(' ', '')}AccountHealth",
                campaigns_table=self.tables.campaigns,
                provider=stack.name,
                removal_policy=removal_policy,
                code=code,
            )
            for stack in config.deployed
            if stack.account_health
        }
        self._secrets: dict[str, secretsmanager.ISecret] = {}
        self._grant_aggregator()
        self._grant_account_health()
        self._grant_consumer()
        self._grant_operator_api()
        self._grant_scheduled_start()
        self._grant_jobs()
        self._grant_provider_events()
        self._grant_unsubscribe()

        self.oncall = OnCall(
            self,
            "OnCall",
            queue=self.queues.queue,
            dead_letter_queue=self.queues.dead_letter_queue,
            function=self.consumer_parts.function,
            events_function=self.provider_events.function,
            events_dead_letter_queue=self.provider_events.dead_letter_queue,
            aggregator_function=self.aggregator.function,
            aggregator_dead_letter_queue=self.aggregator.dead_letter_queue,
            account_health_functions={p: a.function for p, a in self.account_health.items()},
            queue_age_threshold=cdk.Duration.minutes(config.queue_age_alarm_minutes),
            email=config.oncall_email,
            https_url=config.oncall_https_url,
            removal_policy=removal_policy,
        )
        self.dashboard = Dashboard(
            self,
            "Dashboard",
            dashboard_name=config.stack_name,
            queue=self.queues.queue,
            dead_letter_queue=self.queues.dead_letter_queue,
            function=self.consumer_parts.function,
            function_timeout=function_timeout,
            events_function=self.provider_events.function,
            events_dead_letter_queue=self.provider_events.dead_letter_queue,
            alarm_names=self.oncall.alarm_names,
        )

        self.queue = self.queues.queue
        self.dead_letter_queue = self.queues.dead_letter_queue
        self.ledger_table = self.tables.ledger
        self.campaigns_table = self.tables.campaigns
        self.suppressions_table = self.tables.suppressions
        self.consumer = self.consumer_parts.function
        self.on_call_topic = self.oncall.topic
        self.operator_api_url = self.operator_api.url
        self.public_api_url = self.public_api.url
        self._acknowledge_findings()

    @classmethod
    def from_config(
        cls, scope: Construct, id: str, *, config: SendonceConfig, code: lambda_.Code | None = None
    ) -> SendOnce:
        """The construct for settings already parsed from CDK context (what SendonceStack does)."""
        construct = cls(scope, id, **props_of(config), code=code)
        if construct.config != config:
            raise ValueError(f"{id}: settings changed on the way in (stack name {config.stack_name!r}?)")
        return construct

    # --- for other principals ---------------------------------------------------------

    def grant_publish(self, grantee: iam.IGrantable) -> iam.Grant:
        """Create campaigns, publish recipients to them and read their status, through the
        operator API (which records every batch; never straight onto the queue)."""
        api = self.operator_api.api
        resource_arns = [api.arn_for_execute_api(method, path, STAGE) for method, path in PUBLISH_ROUTES]
        self._acknowledge_route_wildcards(grantee, resource_arns)
        return iam.Grant.add_to_principal(grantee=grantee, actions=["execute-api:Invoke"], resource_arns=resource_arns)

    def grant_operate(self, grantee: iam.IGrantable) -> iam.Grant:
        """Every operator route: create, publish, pause, resume, cancel, status."""
        resource_arns = [self.operator_api.api.arn_for_execute_api("ANY", "/*", STAGE)]
        self._acknowledge_route_wildcards(grantee, resource_arns)
        return iam.Grant.add_to_principal(grantee=grantee, actions=["execute-api:Invoke"], resource_arns=resource_arns)

    def allow_secret_read(
        self, function: lambda_.IFunction, id: str, secret_name: str, *, sid: str
    ) -> secretsmanager.ISecret:
        """GetSecretValue on one secret, imported by name (never created in the template)."""
        if id not in self._secrets:
            self._secrets[id] = secretsmanager.Secret.from_secret_name_v2(self, id, secret_name)
        secret = self._secrets[id]
        function.add_to_role_policy(
            iam.PolicyStatement(
                sid=sid,
                actions=["secretsmanager:GetSecretValue"],
                # Secrets Manager appends six random characters to the name.
                resources=[f"{secret.secret_arn}-??????"],
            )
        )
        return secret


def props_of(config: SendonceConfig) -> dict[str, Any]:
    """`SendOnce` keyword arguments that rebuild `config` (its stack name comes from the stack)."""
    return {
        "providers": list(config.providers),
        "provider_registry": config.provider_stacks,
        **dict(config.provider_context),
        "sender_domain": config.sender_domain,
        "unsubscribe_key_secret_name": config.unsubscribe_key_secret_name,
        "unsubscribe_base_url": config.unsubscribe_base_url,
        "feedback_id_sender_id": config.feedback_id_sender_id,
        "feedback_id_stream": config.feedback_id_stream,
        "feedback_id_customer": config.feedback_id_customer,
        "mailbox_groups": config.mailbox_groups or None,
        "pacing": config.pacing or None,
        "warmup": config.warmup or None,
        "recipients_bucket": config.recipients_bucket,
        "oncall_email": config.oncall_email,
        "oncall_https_url": config.oncall_https_url,
        "send_rate": config.send_rate,
        "send_concurrency": config.send_concurrency,
        "provider_timeout_seconds": config.provider_timeout_seconds,
        "provider_latency_ms": config.provider_latency_ms,
        "batch_size": config.batch_size,
        "max_concurrency": config.max_concurrency_override,
        "queue_age_alarm_minutes": config.queue_age_alarm_minutes,
        "removal_policy": config.removal_policy,
        "unsubscribe_rate_limit": config.unsubscribe_rate_limit,
        "unsubscribe_burst_limit": config.unsubscribe_burst_limit,
        "webhook_rate_limit": config.webhook_rate_limit,
        "webhook_burst_limit": config.webhook_burst_limit,
        "events_reserved_concurrency": config.events_reserved_concurrency_override,
        "unsubscribe_reserved_concurrency": config.unsubscribe_reserved_concurrency,
        "api_reserved_concurrency": config.api_reserved_concurrency,
        "account_concurrency": config.account_concurrency,
    }


def _prefixed(parts: Sequence[tuple[ProviderStack, Mapping[str, str]]]) -> dict[str, str]:
    """Providers' settings by their functions' field names: `<provider>_<field>`."""
    return {f"{stack.name}_{key}": value for stack, settings in parts for key, value in settings.items()}
