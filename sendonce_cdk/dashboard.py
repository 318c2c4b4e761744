"""The operations dashboard: is it sending, is it sending once, is anything stuck."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce.contract import Metric
from sendonce_cdk import metrics

ONE_MINUTE = cdk.Duration.minutes(1)
WIDTH = 8  # three widgets per row of 24


class Dashboard(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        dashboard_name: str,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        function: lambda_.IFunction,
        function_timeout: cdk.Duration,
        events_function: lambda_.IFunction,
        events_dead_letter_queue: sqs.IQueue,
        alarm_names: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, id)

        def m(name: Metric, label: str) -> cw.Metric:
            return metrics.sendonce_metric(name, period=ONE_MINUTE, label=label)

        send_rate = cw.MathExpression(
            expression="sent / PERIOD(sent)",
            using_metrics={"sent": m(Metric.EMAILS_SENT, "EmailsSent")},
            label="Emails sent per second",
            period=ONE_MINUTE,
        )
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=dashboard_name,
            default_interval=cdk.Duration.hours(3),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Send rate (emails/s)", left=[send_rate], width=WIDTH),
            cw.GraphWidget(
                title="Duplicate sends prevented",
                left=[m(Metric.DUPLICATE_SENDS_PREVENTED, "DuplicateSendsPrevented")],
                width=WIDTH,
            ),
            cw.GraphWidget(
                title="Send failures by class",
                left=[
                    m(Metric.SEND_FAILURES_RETRYABLE, "Retryable"),
                    m(Metric.SEND_FAILURES_PERMANENT, "Permanent"),
                    m(Metric.SEND_FAILURES_HALT, "Halt"),
                    m(Metric.SEND_FAILURES_AMBIGUOUS, "Ambiguous"),
                    m(Metric.UNKNOWN_OUTCOMES, "Unknown outcome"),
                ],
                stacked=True,
                width=WIDTH,
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Dead-letter queue depth (batches)",
                left=[
                    dead_letter_queue.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=ONE_MINUTE, label="Batches in DLQ"
                    )
                ],
                width=WIDTH,
            ),
            cw.GraphWidget(
                title="Queue: age of oldest batch (s)",
                left=[queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=ONE_MINUTE)],
                right=[
                    queue.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=ONE_MINUTE, label="Waiting"
                    ),
                    queue.metric_approximate_number_of_messages_not_visible(
                        statistic="Maximum", period=ONE_MINUTE, label="In flight"
                    ),
                ],
                width=WIDTH,
            ),
            cw.GraphWidget(
                title="Dead-lettered, poison, conflicts, paused",
                left=[
                    m(Metric.DEAD_LETTERED_RECIPIENTS, "Dead-lettered recipients"),
                    m(Metric.POISON_MESSAGES, "Poison batches"),
                    m(Metric.PAYLOAD_CONFLICTS, "Payload conflicts"),
                    m(Metric.CAMPAIGN_SKIPS_PAUSED, "Skipped (campaign paused)"),
                ],
                width=WIDTH,
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Consumer: errors and throttles",
                left=[
                    function.metric_errors(statistic="Sum", period=ONE_MINUTE),
                    function.metric_throttles(statistic="Sum", period=ONE_MINUTE),
                ],
                width=WIDTH,
            ),
            cw.GraphWidget(
                title="Consumer: duration vs timeout (ms)",
                left=[
                    function.metric_duration(statistic="p99", period=ONE_MINUTE, label="p99"),
                    function.metric_duration(statistic="Maximum", period=ONE_MINUTE, label="max"),
                ],
                left_annotations=[cw.HorizontalAnnotation(value=function_timeout.to_milliseconds(), label="timeout")],
                width=WIDTH,
            ),
            cw.GraphWidget(
                title="Consumer: concurrent invocations",
                left=[
                    cw.Metric(
                        namespace="AWS/Lambda",
                        metric_name="ConcurrentExecutions",
                        dimensions_map={"FunctionName": function.function_name},
                        statistic="Maximum",
                        period=ONE_MINUTE,
                    )
                ],
                width=WIDTH,
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Deliverability: complaints, hard bounces, suppressions",
                left=[
                    m(Metric.COMPLAINTS, "Complaints"),
                    m(Metric.HARD_BOUNCES, "Hard bounces"),
                    m(Metric.SUPPRESSIONS_ADDED, "Suppressions added"),
                    m(Metric.RECIPIENTS_UNSUBSCRIBED, "Unsubscribed (one-click)"),
                    m(Metric.RECIPIENTS_SUPPRESSED, "Sends skipped (suppressed)"),
                ],
                width=WIDTH,
            ),
            cw.GraphWidget(
                title="Brakes and refused webhooks",
                left=[
                    m(Metric.COMPLAINT_BRAKE_TRIGGERED, "Complaint brake"),
                    m(Metric.BOUNCE_BRAKE_TRIGGERED, "Bounce brake"),
                    m(Metric.WEBHOOK_SIGNATURES_REJECTED, "Webhook signatures rejected"),
                ],
                width=WIDTH,
            ),
            cw.GraphWidget(
                title="Events function: errors, dead-lettered events",
                left=[events_function.metric_errors(statistic="Sum", period=ONE_MINUTE)],
                right=[
                    events_dead_letter_queue.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=ONE_MINUTE, label="Events in DLQ"
                    )
                ],
                width=WIDTH,
            ),
        )
        if alarm_names:
            # Referenced by name, not by Fn::GetAtt: moto's CloudFormation skips alarms,
            # and a GetAtt on a skipped resource fails the local deploy.
            stack = cdk.Stack.of(self)
            alarm_refs = [
                cw.Alarm.from_alarm_arn(
                    self,
                    f"Alarm{index}",
                    stack.format_arn(
                        service="cloudwatch",
                        resource="alarm",
                        resource_name=name,
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    ),
                )
                for index, name in enumerate(alarm_names)
            ]
            self.dashboard.add_widgets(cw.AlarmStatusWidget(title="Alarms", alarms=alarm_refs, width=24))
