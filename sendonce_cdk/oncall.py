"""The on-call topic and the alarms that notify it (runbook: docs/operations.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce.contract import Metric
from sendonce_cdk import metrics

RUNBOOK = "docs/operations.md"
FIVE_MINUTES = cdk.Duration.minutes(5)
ONE_MINUTE = cdk.Duration.minutes(1)
FIFTEEN_MINUTES = cdk.Duration.minutes(15)


@dataclass(frozen=True)
class AlarmSpec:
    """One alarm: above `threshold` for `evaluation_periods` periods of `metric`, it notifies
    on-call. `id` names the alarm and its runbook entry (docs/operations.md#<id, lowercased>)."""

    id: str
    severity: Literal["page", "warning"]  # "page" wakes someone; "warning" is looked at in working hours
    summary: str
    metric: cw.IMetric
    threshold: float
    evaluation_periods: int = 1


class OnCall(Construct):
    """An encrypted SNS topic for on-call, its optional subscription, and the alarms."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        function: lambda_.IFunction,
        events_function: lambda_.IFunction,
        events_dead_letter_queue: sqs.IQueue,
        queue_age_threshold: cdk.Duration,
        aggregator_function: lambda_.IFunction | None = None,
        aggregator_dead_letter_queue: sqs.IQueue | None = None,
        account_health_functions: Mapping[str, lambda_.IFunction] | None = None,
        email: str | None = None,
        https_url: str | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, id)
        stack = cdk.Stack.of(self)

        # A customer managed key: CloudWatch cannot publish to a topic encrypted with
        # the AWS managed SNS key, because that key's policy cannot be changed.
        self.key = kms.Key(
            self,
            "Key",
            description="sendonce on-call topic",
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublishEncrypted",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                # In a key policy "*" is this key. No source conditions: AWS documents
                # this statement without them, and a condition KMS does not receive
                # would silently drop every page.
                resources=["*"],
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="sendonce on-call",
            master_key=self.key,
            enforce_ssl=True,
        )
        # enforce_ssl writes a topic policy, which replaces SNS's default one; allow
        # this account's alarms to publish explicitly.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="cloudwatch",
                            resource="alarm",
                            resource_name="*",
                            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                        )
                    },
                },
            )
        )
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        if https_url:
            self.topic.add_subscription(
                subscriptions.UrlSubscription(https_url, protocol=sns.SubscriptionProtocol.HTTPS)
            )

        self.alarms: dict[str, cw.Alarm] = {}
        # Literal names (alarm.alarm_name is a Ref), for references that must not
        # depend on the alarm resources.
        self.alarm_names: list[str] = []
        dlq_depth = dead_letter_queue.metric_approximate_number_of_messages_visible(
            statistic="Maximum", period=ONE_MINUTE
        )
        oldest_batch_age = queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=FIVE_MINUTES)
        events_dlq_depth = events_dead_letter_queue.metric_approximate_number_of_messages_visible(
            statistic="Maximum", period=ONE_MINUTE
        )

        def own(metric: Metric) -> cw.Metric:
            return metrics.sendonce_metric(metric, period=FIVE_MINUTES)

        # In this order on the dashboard's alarm widget.
        for spec in (
            AlarmSpec("DeadLetterQueueNotEmpty", "warning", "A batch is in the dead-letter queue",
                      metric=dlq_depth, threshold=0),
            AlarmSpec("DeadLetterQueueFlooded", "page", "More than 100 batches in the dead-letter queue",
                      metric=dlq_depth, threshold=100),
            AlarmSpec("QueueStuck", "page", f"The oldest batch waited over {queue_age_threshold.to_minutes()} minutes",
                      metric=oldest_batch_age, threshold=queue_age_threshold.to_seconds()),
            AlarmSpec("DuplicateSendsPrevented", "warning", "Over 10 duplicate sends prevented in 5 minutes",
                      metric=own(Metric.DUPLICATE_SENDS_PREVENTED), threshold=10),
            AlarmSpec("UnknownOutcomes", "warning", "A send's outcome is unknown and needs reconciling",
                      metric=own(Metric.UNKNOWN_OUTCOMES), threshold=0),
            AlarmSpec("ProviderHalted", "page", "The provider told the consumer to stop sending",
                      metric=own(Metric.SEND_FAILURES_HALT), threshold=0),
            AlarmSpec("ProviderFailureRate", "page", "Over 5 % of sends failed for 15 minutes",
                      metric=metrics.failure_rate_percent(period=FIVE_MINUTES), threshold=5, evaluation_periods=3),
            AlarmSpec("ConsumerErrors", "warning", "The consumer function failed an invocation",
                      metric=function.metric_errors(statistic="Sum", period=FIVE_MINUTES), threshold=0),
            AlarmSpec("ConsumerThrottles", "warning", "Lambda throttled the consumer",
                      metric=function.metric_throttles(statistic="Sum", period=FIVE_MINUTES), threshold=0),
            AlarmSpec("ComplaintBrakeTriggered", "page", "A campaign paused itself: its complaint rate is too high",
                      metric=own(Metric.COMPLAINT_BRAKE_TRIGGERED), threshold=0),
            AlarmSpec("BounceBrakeTriggered", "page", "A campaign paused itself: its hard-bounce rate is too high",
                      metric=own(Metric.BOUNCE_BRAKE_TRIGGERED), threshold=0),
            AlarmSpec("EventsErrors", "warning", "The events function failed an invocation",
                      metric=events_function.metric_errors(statistic="Sum", period=FIVE_MINUTES), threshold=0),
            AlarmSpec("ProviderEventsDeadLettered", "warning", "A provider event could not be applied",
                      metric=events_dlq_depth, threshold=0),
        ):  # fmt: skip
            self._alarm(spec)
        if aggregator_function is not None and aggregator_dead_letter_queue is not None:
            # The counters lag the ledger by the stream's delay: status, completion and the
            # brakes wait for them; sends never do.
            iterator_age = cw.Metric(
                namespace="AWS/Lambda",
                metric_name="IteratorAge",
                dimensions_map={"FunctionName": aggregator_function.function_name},
                statistic="Maximum",
                period=FIVE_MINUTES,
            )
            counters_dlq_depth = aggregator_dead_letter_queue.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=ONE_MINUTE
            )
            for spec in (
                AlarmSpec("CountersLagging", "warning", "The counters' aggregator is over 5 minutes behind the ledger",
                          metric=iterator_age, threshold=5 * 60 * 1000),
                AlarmSpec("CountersDeadLettered", "warning", "Stream records the counters could not apply",
                          metric=counters_dlq_depth, threshold=0),
            ):  # fmt: skip
                self._alarm(spec)
        if account_health_functions:
            # The check runs every 5 minutes and publishes only what is not zero: a
            # 15-minute maximum holds three checks, so one late check does not clear an alarm.
            def account(metric: Metric) -> cw.Metric:
                return metrics.sendonce_metric(metric, statistic="Maximum", period=FIFTEEN_MINUTES)

            errors = [
                f.metric_errors(statistic="Sum", period=FIFTEEN_MINUTES) for f in account_health_functions.values()
            ]
            checks_failing: cw.IMetric = (
                errors[0]
                if len(errors) == 1
                else cw.MathExpression(
                    expression=" + ".join(f"FILL(e{i}, 0)" for i in range(len(errors))),
                    using_metrics={f"e{i}": e for i, e in enumerate(errors)},
                    period=FIFTEEN_MINUTES,
                )
            )
            for spec in (
                AlarmSpec("AccountSendingStopped", "page",
                          "The provider account cannot send: its sending campaigns were paused",
                          metric=account(Metric.ACCOUNT_SENDING_STOPPED), threshold=0),
                AlarmSpec("AccountOnProbation", "warning", "The provider put the sending account on probation",
                          metric=account(Metric.ACCOUNT_ON_PROBATION), threshold=0),
                AlarmSpec("AccountHealthCheckFailing", "warning",
                          "The account health check could not read the account", metric=checks_failing,
                          threshold=1),
            ):  # fmt: skip
                self._alarm(spec)

    def _alarm(self, spec: AlarmSpec) -> cw.Alarm:
        alarm_name = f"{cdk.Stack.of(self).stack_name}-{spec.id}"
        alarm = cw.Alarm(
            self,
            spec.id,
            alarm_name=alarm_name,
            alarm_description=f"[{spec.severity}] {spec.summary}. Runbook: {RUNBOOK}#{spec.id.lower()}",
            metric=spec.metric,
            threshold=spec.threshold,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=spec.evaluation_periods,
            datapoints_to_alarm=spec.evaluation_periods,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        action = cw_actions.SnsAction(self.topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        self.alarms[spec.id] = alarm
        self.alarm_names.append(alarm_name)
        return alarm
