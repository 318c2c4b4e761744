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
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce import contract
from sendonce.contract import CAMPAIGNS_BY_STATE_INDEX
from sendonce_cdk.aggregator import Aggregator
from sendonce_cdk.bundling import lambda_code
from sendonce_cdk.config import COMMON_DEFAULTS, DEFAULTS, MAX_RECEIVE_COUNT, SendonceConfig
from sendonce_cdk.consumer import Consumer
from sendonce_cdk.dashboard import Dashboard
from sendonce_cdk.http_api import RouteThrottle
from sendonce_cdk.jobs import JobsWorker
from sendonce_cdk.ledger import LedgerTables
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


class SendOnce(Construct):
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
            provider_settings=_prefixed([(stack, stack.audit_settings(config)) for stack in config.deployed]),
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
            scheduling={
                "scheduler_group": self.scheduled_start.group_name,
                "scheduler_role_arn": self.scheduled_start.scheduler_role.role_arn,
                "scheduled_start_function_arn": self.scheduled_start.function.function_arn,
            },
            jobs_queue=self.jobs.queue,
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
        self._secrets: dict[str, secretsmanager.ISecret] = {}
        self._grant_aggregator()
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

    def _acknowledge_route_wildcards(self, grantee: iam.IGrantable, resource_arns: Sequence[str]) -> None:
        """cdk-nag's IAM5 on the grantee's policy, for exactly these execute-api ARNs.

        The `*` in them stands for a campaign id (or, for grant_operate, any route of this
        one API): the grant is this construct's, so is the acknowledgement. Only for a
        grantee in this stack: elsewhere the ARN reaches the policy as a cross-stack
        import, cdk-nag names the finding after that, and it stays for the app to judge.
        """
        if not Construct.is_construct(grantee) or cdk.Stack.of(grantee).node.path != cdk.Stack.of(self).node.path:
            return
        stack = cdk.Stack.of(self)
        for arn in resource_arns:
            rendered = _nag_rendering(stack.resolve(arn))
            if rendered is None:
                continue
            cdk.Validations.of(grantee).acknowledge(
                cdk.Acknowledgment(
                    id=f"AwsSolutions::AwsSolutions-IAM5[Resource::{rendered}]",
                    reason=(
                        "execute-api:Invoke on routes of the sendonce operator API only; the wildcard is"
                        " the campaign id in the path (or, for grant_operate, every route of that one API)."
                    ),
                )
            )

    # Every grant below is the list of IAM actions the function's code calls, per resource;
    # tests/infra/test_permissions.py holds each function to exactly that. No
    # grant_read_write_data / grant_read_data: they bring DeleteItem, BatchWriteItem,
    # PutItem and Scan. The ledger is append-only: only conditional UpdateItems write it
    # (a TransactWriteItems of Updates is authorized per item by dynamodb:UpdateItem),
    # nothing may put over, delete or scan a delivery record.

    def _grant_campaigns(self, function: lambda_.IFunction, *actions: str, query_index: str | None = None) -> None:
        """`actions` on the campaigns table, and Query on one named index (Table.grant would
        add `<table>/index/*` to every grant now that the table has an index)."""
        arn = self.tables.campaigns.table_arn
        function.add_to_role_policy(iam.PolicyStatement(actions=list(actions), resources=[arn]))
        if query_index:
            function.add_to_role_policy(
                iam.PolicyStatement(actions=["dynamodb:Query"], resources=[f"{arn}/index/{query_index}"])
            )

    def _grant_aggregator(self) -> None:
        function = self.aggregator.function
        # Its stream mappings grant reading both streams (and ListStreams, which has no
        # resource) and sending a failed batch's position to its dead-letter queue.
        # Counter positions and the campaign (GetItem), counter writes and `complete`
        # (UpdateItem), published markers (conditional PutItem), a campaign's counters (Query).
        # Nothing on the ledger's items.
        self._grant_campaigns(function, "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query")

    def _grant_consumer(self) -> None:
        function = self.consumer_parts.function
        # Claims, fenced marks and settlements, close_unclaimed, group claims and
        # completions (TransactWriteItems of Updates): UpdateItem. A record re-read after
        # a failed claim: GetItem. Batch mode's membership check and cancel's close: BatchGetItem.
        # The completion check when a campaign's last open batch settles: Query.
        self.tables.ledger.grant(
            function, "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:UpdateItem"
        )
        # The campaign (GetItem) and its automatic moves (UpdateItem); batch mode's send
        # groups (conditional PutItem, GetItem, Query); the shared rate limiter's slots
        # (UpdateItem) and throttle state (PutItem, GetItem).
        self._grant_campaigns(function, "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query")
        # One consistent BatchGetItem per message before sending; the consumer never writes it.
        self.tables.suppressions.grant(function, "dynamodb:GetItem", "dynamodb:BatchGetItem")
        # Poison batches are moved to the DLQ by the consumer itself (SendMessage only; the
        # event source's grant covers receiving, deleting and returning source messages).
        self._allow_send(function, self.queues.dead_letter_queue)

        if self.config.unsubscribe_base_url:
            self.allow_secret_read(
                function, "UnsubscribeKey", self.config.unsubscribe_key_secret_name, sid="ReadUnsubscribeKey"
            )
        # Each provider's own: its secrets, its send permissions (sendonce_cdk/providers/).
        for stack in self.config.deployed:
            stack.grant_consumer(self, function)

    def _grant_operator_api(self) -> None:
        function = self.operator_api.function
        # Read-only on the ledger: status and resume read a campaign's records (Query).
        # Its routes never write the ledger (cancel and pause are campaign state; reopening
        # unknowns and redrives are the CLI's, with the operator's own credentials).
        self.tables.ledger.grant(function, "dynamodb:Query")
        # Create (conditional PutItem), get, state moves and batch marks (UpdateItem), a
        # batch's record with its campaign's total (TransactWriteItems of a conditional Put
        # and an Update), the batches of a campaign (Query), GET /campaigns (Query of the
        # campaigns-by-state index, then BatchGetItem of the campaign items; nothing is scanned).
        self._grant_campaigns(
            function,
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
            query_index=CAMPAIGNS_BY_STATE_INDEX,
        )
        # Publish enqueues batches (SendMessageBatch is authorized by SendMessage); the API
        # never consumes them. Resume and cancel submit their job's first step.
        self._allow_send(function, self.queues.queue)
        self._allow_send(function, self.jobs.queue)
        if self.config.recipients_bucket:
            # A publish naming an S3 object HEADs it (authorized by s3:GetObject); the jobs
            # worker reads it.
            function.add_to_role_policy(
                iam.PolicyStatement(
                    sid="ReadRecipientFiles",
                    actions=["s3:GetObject"],
                    resources=[self._recipients_bucket().arn_for_objects("*")],
                )
            )

    def _grant_scheduled_start(self) -> None:
        """The API function sets and deletes the schedules of the stack's group and passes the
        scheduler role to them; the scheduled-start function starts a campaign: the campaign
        (GetItem, UpdateItem), its batches (Query; marked enqueued with UpdateItem), the
        completion check (ledger Query), and the queue (SendMessage)."""
        parts = self.scheduled_start
        api = self.operator_api.function
        api.add_to_role_policy(
            iam.PolicyStatement(
                sid="SetCampaignSchedules",
                actions=["scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule"],
                resources=[parts.schedules_arn],
            )
        )
        api.add_to_role_policy(
            iam.PolicyStatement(
                sid="PassSchedulerRole",
                actions=["iam:PassRole"],
                resources=[parts.scheduler_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            )
        )
        function = parts.function
        self.tables.ledger.grant(function, "dynamodb:Query")
        # A send window's opening also resumes: its republish job item (conditional PutItem),
        # submitted to the jobs queue (SendMessage), as the API's resume does.
        self._grant_campaigns(function, "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query")
        self._allow_send(function, self.queues.queue)
        self._allow_send(function, self.jobs.queue)
        self._wire_send_windows()

    def _wire_send_windows(self) -> None:
        """A consumer that reads a sending campaign outside its send window sets the one-time
        schedule of the next opening (create, or update when it exists; never delete) in the
        stack's group, passing the scheduler role to it."""
        parts = self.scheduled_start
        function = self.consumer_parts.function
        for name, value in {
            "scheduler_group": parts.group_name,
            "scheduler_role_arn": parts.scheduler_role.role_arn,
            "scheduled_start_function_arn": parts.function.function_arn,
        }.items():
            function.add_environment(contract.env_name(name), value)
        function.add_to_role_policy(
            iam.PolicyStatement(
                sid="SetWindowOpeningSchedules",
                actions=["scheduler:CreateSchedule", "scheduler:UpdateSchedule"],
                resources=[parts.schedules_arn],
            )
        )
        function.add_to_role_policy(
            iam.PolicyStatement(
                sid="PassSchedulerRole",
                actions=["iam:PassRole"],
                resources=[parts.scheduler_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            )
        )

    def _grant_jobs(self) -> None:
        function = self.jobs.function
        # A page of deliveries (BatchGetItem); the completion check when a resume's job has
        # read the whole campaign (Query). Never a ledger write.
        self.tables.ledger.grant(function, "dynamodb:BatchGetItem", "dynamodb:Query")
        # Job items (GetItem; conditional PutItem to move one on), the campaign's batch
        # records a page at a time (Query), the campaign and its completion (GetItem, UpdateItem).
        self._grant_campaigns(function, "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query")
        # Republished batches onto the campaign queue; its own next step onto the jobs queue
        # (the event source's grant covers receiving and deleting).
        self._allow_send(function, self.queues.queue)
        self._allow_send(function, self.jobs.queue)
        # An audit job reads the campaign's provider's own records (sendonce_cdk/providers/).
        for stack in self.config.deployed:
            stack.grant_audit(self, function)
        if self.config.recipients_bucket:
            # An S3 publish's parts: each reads its byte range of the object (GetObject).
            function.add_to_role_policy(
                iam.PolicyStatement(
                    sid="ReadRecipientFileRanges",
                    actions=["s3:GetObject"],
                    resources=[self._recipients_bucket().arn_for_objects("*")],
                )
            )

    def _recipients_bucket(self) -> s3.IBucket:
        found = self.node.try_find_child("RecipientsBucket")
        if found is not None:
            return found  # type: ignore[return-value]
        return s3.Bucket.from_bucket_name(self, "RecipientsBucket", str(self.config.recipients_bucket))

    def _grant_provider_events(self) -> None:
        function = self.provider_events.function
        # Annotations and unknown -> sent on the ledger (conditional UpdateItem, or an Update
        # in a transaction with the campaign's counter), the record read after a duplicate.
        self.tables.ledger.grant(function, "dynamodb:GetItem", "dynamodb:UpdateItem")
        # Feedback counters (UpdateItem, ADD), read back by the brakes (Query, and the 'sent'
        # shards' BatchGetItem), which pause a campaign (UpdateItem).
        self._grant_campaigns(function, "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem")
        # Hard bounces and complaints: a conditional PutItem (the first reason stays).
        self.tables.suppressions.grant(function, "dynamodb:PutItem")
        for stack in self.config.deployed:
            stack.grant_events(self, function)

    def _grant_unsubscribe(self) -> None:
        function = self.public_api.unsubscribe_function
        # Exactly what sendonce.domain.deliverability.unsubscribe needs: check and add a suppression, note the
        # click on the delivery's ledger record.
        self.tables.suppressions.grant(function, "dynamodb:GetItem", "dynamodb:PutItem")
        self.tables.ledger.grant(function, "dynamodb:GetItem", "dynamodb:UpdateItem")
        self.allow_secret_read(
            function, "UnsubscribeKey", self.config.unsubscribe_key_secret_name, sid="ReadUnsubscribeKey"
        )

    @staticmethod
    def _allow_send(function: lambda_.IFunction, queue: sqs.IQueue) -> None:
        """sqs:SendMessage alone (grant_send_messages adds GetQueueAttributes and GetQueueUrl)."""
        function.add_to_role_policy(iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[queue.queue_arn]))

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

    def _acknowledge_findings(self) -> None:
        """cdk-nag AwsSolutions findings this design accepts, each with its reason."""
        cdk.Validations.of(self.aggregator.role).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason=(
                    "Only dynamodb:ListStreams, which the stream event source needs and which IAM does not scope"
                    " to resources; the stream reads themselves are scoped to the two tables' streams."
                ),
            )
        )
        for function in (
            self.consumer_parts.function,
            self.operator_api.function,
            self.scheduled_start.function,
            self.provider_events.function,
            self.public_api.unsubscribe_function,
            self.aggregator.function,
            self.jobs.function,
        ):
            cdk.Validations.of(function).acknowledge(
                cdk.Acknowledgment(
                    id="AwsSolutions::AwsSolutions-L1",
                    reason=(
                        "Python 3.12 on purpose: the bundle is built from cp312 manylinux2014_aarch64 wheels"
                        " (pydantic-core, markupsafe) that must match the runtime, and the Lambda code is"
                        " tested on 3.12. Moving to a newer runtime changes RUNTIME and PYTHON_VERSION in"
                        " sendonce_cdk/bundling.py together, after the tests pass on it."
                    ),
                )
            )
        for stack in self.config.deployed:
            stack.acknowledge(self)
        cdk.Validations.of(self.operator_api.role).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions::AwsSolutions-IAM5[Resource::{_nag_rendering(cdk.Stack.of(self).resolve(self.scheduled_start.schedules_arn))}]",
                reason=(
                    "Only scheduler:CreateSchedule/UpdateSchedule/DeleteSchedule (statement SetCampaignSchedules)"
                    " on the schedules of this stack's one schedule group: a schedule is named after the"
                    " campaign it starts, known at request time. No other group, no schedule group changes."
                ),
            )
        )
        cdk.Validations.of(self.consumer_parts.role).acknowledge(
            cdk.Acknowledgment(
                id=f"AwsSolutions::AwsSolutions-IAM5[Resource::{_nag_rendering(cdk.Stack.of(self).resolve(self.scheduled_start.schedules_arn))}]",
                reason=(
                    "Only scheduler:CreateSchedule/UpdateSchedule (statement SetWindowOpeningSchedules) on the"
                    " schedules of this stack's one schedule group: a send window's opening schedule is named"
                    " after the campaign and the opening, known when the window pauses it. No delete, no other group."
                ),
            )
        )
        if self.config.recipients_bucket:
            for role in (self.operator_api.role, self.jobs.role):
                cdk.Validations.of(role).acknowledge(
                    cdk.Acknowledgment(
                        id=(
                            "AwsSolutions::AwsSolutions-IAM5"
                            f"[Resource::arn:<AWS::Partition>:s3:::{self.config.recipients_bucket}/*]"
                        ),
                        reason=(
                            "Only s3:GetObject (statements ReadRecipientFiles, ReadRecipientFileRanges) on the one"
                            " bucket operators publish recipient files from: a publish names its object key at"
                            " request time, so the keys cannot be listed in the policy. No list, write or delete."
                        ),
                    )
                )
        cdk.Validations.of(self.public_api.api).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions::AwsSolutions-APIG4",
                reason=(
                    "The public API's callers cannot sign with SigV4 or hold a token: mailbox providers and"
                    " people following a List-Unsubscribe link (RFC 8058), and email providers delivering"
                    " webhooks. Each handler authorizes the request itself: the unsubscribe token's"
                    " HMAC-SHA256, the webhook's signature as its provider defines it (Svix, a +-300 s window);"
                    " anything else gets 403/401 and changes nothing. The operator API (everything that"
                    " changes campaigns) requires AWS_IAM."
                ),
            )
        )
        cdk.Validations.of(self.provider_events.dead_letter_queue).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason=(
                    "This queue is itself a dead-letter queue: the EventBridge target's and the events"
                    " function's on-failure destination for asynchronous invocations. cdk-nag only"
                    " recognises DLQs named in another queue's RedrivePolicy."
                ),
            )
        )
        cdk.Validations.of(self.aggregator.dead_letter_queue).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason=(
                    "This queue is itself a dead-letter queue: the on-failure destination of the counters'"
                    " stream mappings. cdk-nag only recognises DLQs named in another queue's RedrivePolicy."
                ),
            )
        )


def props_of(config: SendonceConfig) -> dict[str, Any]:
    """`SendOnce` keyword arguments that rebuild `config` (its stack name comes from the stack)."""
    return {
        "providers": list(config.providers),
        "provider_registry": config.provider_stacks,
        **dict(config.provider_context),
        "sender_domain": config.sender_domain,
        "unsubscribe_key_secret_name": config.unsubscribe_key_secret_name,
        "unsubscribe_base_url": config.unsubscribe_base_url,
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


def _nag_rendering(resolved: Any) -> str | None:
    """A resolved ARN the way cdk-nag names it in a finding: `Ref`s as `<Name>`,
    `Fn::GetAtt`s as `<Name.Attribute>`, joined. None for anything else."""
    if isinstance(resolved, str):
        return resolved
    if isinstance(resolved, dict) and len(resolved) == 1:
        ((function, argument),) = resolved.items()
        if function == "Ref" and isinstance(argument, str):
            return f"<{argument}>"
        if function == "Fn::GetAtt" and isinstance(argument, list) and len(argument) == 2:
            return f"<{argument[0]}.{argument[1]}>"
        if function == "Fn::Join" and isinstance(argument, list) and len(argument) == 2:
            parts = [_nag_rendering(part) for part in argument[1]]
            return None if None in parts else str(argument[0]).join(parts)  # type: ignore[arg-type]
    return None
