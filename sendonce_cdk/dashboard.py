"""The operations dashboard: is it sending, is it sending once, is anything stuck."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sendonce import contract
from sendonce.contract import METRIC_CAMPAIGN_DIMENSION, METRICS_NAMESPACE, SERVICE_NAME, Metric
from sendonce_cdk import metrics

ONE_MINUTE = cdk.Duration.minutes(1)
WIDTH = 8  # three widgets per row of 24


def own(metric: Metric, label: str | None = None) -> cw.Metric:
    """One of the handlers' metrics, per minute, labelled with its name unless told."""
    return metrics.sendonce_metric(metric, period=ONE_MINUTE, label=label or metric.value)


# The per-campaign graphs name this placeholder as their campaign; the dashboard's `campaign`
# variable (a pattern variable) puts the campaign chosen in its list in its place.
CAMPAIGN_PLACEHOLDER = "sendonce-campaign"
# The metric schema of the per-campaign series (contract.CAMPAIGN_METRICS).
CAMPAIGN_SCHEMA = f"{{{METRICS_NAMESPACE},{METRIC_CAMPAIGN_DIMENSION},{contract.METRIC_SERVICE_DIMENSION}}}"


def of_campaign(metric: Metric, label: str) -> cw.Metric:
    """One of contract.CAMPAIGN_METRICS, of the campaign the dashboard's variable names."""
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric.value,
        dimensions_map={
            contract.METRIC_SERVICE_DIMENSION: SERVICE_NAME,
            METRIC_CAMPAIGN_DIMENSION: CAMPAIGN_PLACEHOLDER,
        },
        statistic="Sum",
        period=ONE_MINUTE,
        label=label,
    )


def by_campaign(*names: Metric, label: str) -> cw.MathExpression:
    """Every campaign's series of `names`, one line each, found by a SEARCH expression (no
    list of campaigns in the template: a new campaign shows up by itself)."""
    terms = " OR ".join(f'MetricName="{name.value}"' for name in names)
    return cw.MathExpression(
        expression=f"SEARCH('{CAMPAIGN_SCHEMA} {terms}', 'Sum', 60)", label=label, period=ONE_MINUTE
    )


def campaign_variable() -> cw.DashboardVariable:
    return cw.DashboardVariable(
        id="campaign",
        type=cw.VariableType.PATTERN,
        label="Campaign",
        input_type=cw.VariableInputType.SELECT,
        value=CAMPAIGN_PLACEHOLDER,
        values=cw.Values.from_search_components(
            namespace=METRICS_NAMESPACE,
            dimensions=[METRIC_CAMPAIGN_DIMENSION, contract.METRIC_SERVICE_DIMENSION],
            metric_name=Metric.EMAILS_SENT.value,
            populate_from=METRIC_CAMPAIGN_DIMENSION,
        ),
        default_value=cw.DefaultValue.FIRST,
        visible=True,
    )


def waiting(queue: sqs.IQueue, label: str) -> cw.Metric:
    return queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=ONE_MINUTE, label=label)


def graph(
    title: str, left: Sequence[cw.IMetric], *, right: Sequence[cw.IMetric] = (), **options: Any
) -> cw.GraphWidget:
    """A third of a row; `options` are GraphWidget's own (stacked, left_annotations, ...)."""
    return cw.GraphWidget(title=title, left=list(left), right=list(right) or None, width=WIDTH, **options)


class Dashboard(Construct):
    """Four rows of three graphs (sending, queues, the consumer, deliverability), two rows
    per campaign (the one chosen in the `campaign` variable; every campaign, a line each),
    then the alarms' states."""

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
        send_rate = cw.MathExpression(
            expression="sent / PERIOD(sent)",
            using_metrics={"sent": own(Metric.EMAILS_SENT)},
            label="Emails sent per second",
            period=ONE_MINUTE,
        )
        concurrent_executions = cw.Metric(
            namespace="AWS/Lambda",
            metric_name="ConcurrentExecutions",
            dimensions_map={"FunctionName": function.function_name},
            statistic="Maximum",
            period=ONE_MINUTE,
        )
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=dashboard_name,
            default_interval=cdk.Duration.hours(3),
            variables=[campaign_variable()],
        )
        rows: Sequence[Sequence[cw.IWidget]] = (
            (
                graph("Send rate (emails/s)", [send_rate]),
                graph("Duplicate sends prevented", [own(Metric.DUPLICATE_SENDS_PREVENTED)]),
                graph(
                    "Send failures by class",
                    [
                        own(Metric.SEND_FAILURES_RETRYABLE, "Retryable"),
                        own(Metric.SEND_FAILURES_PERMANENT, "Permanent"),
                        own(Metric.SEND_FAILURES_HALT, "Halt"),
                        own(Metric.SEND_FAILURES_AMBIGUOUS, "Ambiguous"),
                        own(Metric.UNKNOWN_OUTCOMES, "Unknown outcome"),
                    ],
                    stacked=True,
                ),
            ),
            (
                graph("Dead-letter queue depth (batches)", [waiting(dead_letter_queue, "Batches in DLQ")]),
                graph(
                    "Queue: age of oldest batch (s)",
                    [queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=ONE_MINUTE)],
                    right=[
                        waiting(queue, "Waiting"),
                        queue.metric_approximate_number_of_messages_not_visible(
                            statistic="Maximum", period=ONE_MINUTE, label="In flight"
                        ),
                    ],
                ),
                graph(
                    "Dead-lettered, poison, conflicts, paused",
                    [
                        own(Metric.DEAD_LETTERED_RECIPIENTS, "Dead-lettered recipients"),
                        own(Metric.POISON_MESSAGES, "Poison batches"),
                        own(Metric.PAYLOAD_CONFLICTS, "Payload conflicts"),
                        own(Metric.CAMPAIGN_SKIPS_PAUSED, "Skipped (campaign paused)"),
                    ],
                ),
            ),
            (
                graph(
                    "Consumer: errors and throttles",
                    [
                        function.metric_errors(statistic="Sum", period=ONE_MINUTE),
                        function.metric_throttles(statistic="Sum", period=ONE_MINUTE),
                    ],
                ),
                graph(
                    "Consumer: duration vs timeout (ms)",
                    [
                        function.metric_duration(statistic="p99", period=ONE_MINUTE, label="p99"),
                        function.metric_duration(statistic="Maximum", period=ONE_MINUTE, label="max"),
                    ],
                    left_annotations=[
                        cw.HorizontalAnnotation(value=function_timeout.to_milliseconds(), label="timeout")
                    ],
                ),
                graph("Consumer: concurrent invocations", [concurrent_executions]),
            ),
            (
                graph(
                    "Deliverability: complaints, hard bounces, suppressions",
                    [
                        own(Metric.COMPLAINTS, "Complaints"),
                        own(Metric.HARD_BOUNCES, "Hard bounces"),
                        own(Metric.SUPPRESSIONS_ADDED, "Suppressions added"),
                        own(Metric.RECIPIENTS_UNSUBSCRIBED, "Unsubscribed (one-click)"),
                        own(Metric.RECIPIENTS_SUPPRESSED, "Sends skipped (suppressed)"),
                    ],
                ),
                graph(
                    "Brakes and refused webhooks",
                    [
                        own(Metric.COMPLAINT_BRAKE_TRIGGERED, "Complaint brake"),
                        own(Metric.BOUNCE_BRAKE_TRIGGERED, "Bounce brake"),
                        own(Metric.WEBHOOK_SIGNATURES_REJECTED, "Webhook signatures rejected"),
                    ],
                ),
                graph(
                    "Events function: errors, dead-lettered events",
                    [events_function.metric_errors(statistic="Sum", period=ONE_MINUTE)],
                    right=[waiting(events_dead_letter_queue, "Events in DLQ")],
                ),
            ),
        )
        per_campaign: Sequence[Sequence[cw.IWidget]] = (
            (
                graph(
                    "Campaign: sent, duplicates prevented",
                    [of_campaign(Metric.EMAILS_SENT, "Sent")],
                    right=[of_campaign(Metric.DUPLICATE_SENDS_PREVENTED, "Duplicates prevented")],
                ),
                graph("Campaign: unknown outcomes", [of_campaign(Metric.UNKNOWN_OUTCOMES, "Unknown outcome")]),
                graph(
                    "Campaign: hard bounces, complaints",
                    [of_campaign(Metric.HARD_BOUNCES, "Hard bounces"), of_campaign(Metric.COMPLAINTS, "Complaints")],
                ),
            ),
            (
                graph("Every campaign: sent", [by_campaign(Metric.EMAILS_SENT, label="")]),
                graph(
                    "Every campaign: duplicates prevented, unknowns",
                    [by_campaign(Metric.DUPLICATE_SENDS_PREVENTED, Metric.UNKNOWN_OUTCOMES, label="")],
                ),
                graph(
                    "Every campaign: hard bounces, complaints",
                    [by_campaign(Metric.HARD_BOUNCES, Metric.COMPLAINTS, label="")],
                ),
            ),
        )
        for row in (*rows, *per_campaign):
            self.dashboard.add_widgets(*row)
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
