"""Scheduled sends: the function a campaign's one-time schedule invokes, the stack's schedule
group, and the role EventBridge Scheduler assumes to invoke that function (and nothing else).

The operator API creates, updates and deletes the schedules (one per campaign, in this group);
the stack grants it that, and iam:PassRole on this role only (sendonce_cdk/construct.py). The
consumer creates a send window's opening schedule (same group, same function) when the window
pauses a campaign; the function's firing then resumes it with a republish job (jobs queue).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce_cdk.function import ServiceFunction

HANDLER = "sendonce.handlers.scheduled_start.lambda_handler"
# Enqueueing a large scheduled campaign's recorded batches (ten per SQS request) takes time;
# an interrupted start is finished by the schedule's next attempt.
TIMEOUT = cdk.Duration.minutes(5)
SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"


class ScheduledStart(Construct):
    """Public attributes: `function`, `role` (the function's), `group_name`, `group_arn`,
    `schedules_arn` (every schedule of the group), `scheduler_role` (what schedules assume)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        ledger_table: dynamodb.ITable,
        campaigns_table: dynamodb.ITable,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        jobs_queue: sqs.IQueue | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, id)
        handler = ServiceFunction(
            self,
            "Handler",
            handler=HANDLER,
            description="sendonce scheduled start: a campaign's schedule fired; start it (or resume it at its"
            " send window's opening) if still due at that time",
            # sendonce.settings.ApiSettings, without the scheduler: this function never schedules.
            # A window opening's resume republishes as a job on the jobs queue, as the API's does.
            settings={
                "ledger_table": ledger_table.table_name,
                "campaigns_table": campaigns_table.table_name,
                "queue_url": queue.queue_url,
                "dead_letter_queue_url": dead_letter_queue.queue_url,
                **({"jobs_queue_url": jobs_queue.queue_url} if jobs_queue is not None else {}),
            },
            timeout=TIMEOUT,
            removal_policy=removal_policy,
            code=code,
        )
        self.function = handler.function
        self.role = handler.role
        self.log_group = handler.log_group

        stack = cdk.Stack.of(self)
        # A literal name (not a GetAtt), so that policies naming the group's schedules stand
        # without the group resource (moto's CloudFormation skips AWS::Scheduler::*).
        self.group_name = cdk.Names.unique_resource_name(self, max_length=64, separator="-")
        self.group = scheduler.CfnScheduleGroup(self, "Group", name=self.group_name)
        self.group.apply_removal_policy(removal_policy)
        self.group_arn = stack.format_arn(service="scheduler", resource="schedule-group", resource_name=self.group_name)
        self.schedules_arn = stack.format_arn(
            service="scheduler", resource="schedule", resource_name=f"{self.group_name}/*"
        )

        self.scheduler_role = iam.Role(
            self,
            "SchedulerRole",
            description="EventBridge Scheduler: invoke the scheduled-start function, nothing else",
            # Confused-deputy guard: only schedules of this account, in this group.
            assumed_by=iam.ServicePrincipal(
                SCHEDULER_PRINCIPAL,
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": self.schedules_arn},
                },
            ),
        )
        self.scheduler_role.add_to_policy(
            iam.PolicyStatement(
                sid="InvokeScheduledStart", actions=["lambda:InvokeFunction"], resources=[self.function.function_arn]
            )
        )
