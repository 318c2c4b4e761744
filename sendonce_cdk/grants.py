"""SendOnce's grants between its parts: per function, the IAM actions its code calls, per
resource (tests/infra/test_permissions.py holds each function to exactly that). A mixin of
`SendOnce` (sendonce_cdk/construct.py), which builds the parts these read."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs

from sendonce import contract
from sendonce.contract import CAMPAIGNS_BY_STATE_INDEX

# The campaigns table as the API and the jobs worker use it: items read one by one and in
# batches, written (PutItem, UpdateItem; never DeleteItem), and queried by partition.
CAMPAIGN_ITEMS_READ_WRITE = (
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:Query",
)


class SendOnceGrants:
    """The `_grant_*` steps of `SendOnce.__init__`; they read the parts it has built."""

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
        # (UpdateItem) and throttle state (PutItem, GetItem), the reads a reservation needs
        # together in one BatchGetItem.
        self._grant_campaigns(
            function,
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
        )
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

    def _grant_account_health(self) -> None:
        """Each provider's account health check: its record (GetItem, PutItem), the sending
        campaigns (Query of the campaigns-by-state index, BatchGetItem) and their pause
        (UpdateItem); the provider's own account read. Nothing on the ledger."""
        for provider, parts in self.account_health.items():
            self._grant_campaigns(
                parts.function,
                "dynamodb:GetItem",
                "dynamodb:BatchGetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                query_index=CAMPAIGNS_BY_STATE_INDEX,
            )
            self.config.provider_stacks[provider].grant_account_health(self, parts.function)

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
        self._grant_campaigns(function, *CAMPAIGN_ITEMS_READ_WRITE, query_index=CAMPAIGNS_BY_STATE_INDEX)
        # Publish enqueues batches (SendMessageBatch is authorized by SendMessage); the API
        # never consumes them. Resume and cancel submit their job's first step.
        self._allow_send(function, self.queues.queue)
        self._allow_send(function, self.jobs.queue)
        # A forecast reads the suppression list, 100 addresses a consistent BatchGetItem; it
        # never writes it. (Who shares the rate: the limiter's slots and state item in the
        # campaigns table, read with the Query and GetItem above.)
        self.tables.suppressions.grant(function, "dynamodb:BatchGetItem")
        if self.config.recipients_bucket:
            # A publish or forecast naming an S3 object HEADs it (authorized by s3:GetObject);
            # the jobs worker reads it.
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
        # records a page at a time (Query) and, for a start's job, their enqueued markers
        # (BatchGetItem; PutItem), the campaign, its publish lease and its completion (GetItem,
        # UpdateItem).
        self._grant_campaigns(function, *CAMPAIGN_ITEMS_READ_WRITE)
        # A forecast_s3 job's parts read the suppression list (BatchGetItem; never a write); its
        # end reads the limiter's slots and state item (campaigns table: Query, GetItem above).
        self.tables.suppressions.grant(function, "dynamodb:BatchGetItem")
        # Republished batches onto the campaign queue; its own next step onto the jobs queue
        # (the event source's grant covers receiving and deleting).
        self._allow_send(function, self.queues.queue)
        self._allow_send(function, self.jobs.queue)
        # An audit job reads the campaign's provider's own records (sendonce_cdk/providers/).
        for stack in self.config.deployed:
            stack.grant_audit(self, function)
        if self.config.recipients_bucket:
            # An S3 publish's or forecast's parts: each reads its byte range of the object (GetObject).
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
        # A deferral cuts its mailbox group's factor (GetItem, then UpdateItem of limiter#group#<g>).
        # An open or click of a tracking campaign: the recipient's engagement item read, then it
        # and the report's minute item updated in one transaction (GetItem, UpdateItem).
        self._grant_campaigns(
            function, "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem"
        )
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
