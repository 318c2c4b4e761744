"""sendonce's own metrics, as Powertools publishes them (EMF), from the consumer and the
deliverability functions alike; their names are `sendonce.contract.Metric`.

Powertools adds the default dimension `service` = POWERTOOLS_SERVICE_NAME to every
metric, so an alarm must name that dimension to match the published series.
"""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw

from sendonce import contract
from sendonce.contract import METRICS_NAMESPACE, SERVICE_NAME, Metric

# Published, but neither alarmed nor graphed, on purpose. tests/infra/test_contract.py
# holds every other Metric to an alarm or a dashboard widget, so a metric added to the
# contract is either watched or listed here with its reason.
NOT_WATCHED: Mapping[Metric, str] = {
    Metric.PROVIDER_EVENTS_APPLIED: "every event the ledger took; its volume follows EmailsSent",
    Metric.PROVIDER_EVENTS_DUPLICATE: "providers deliver events at least once; the ledger ignores the repeat",
    Metric.PROVIDER_EVENTS_UNMATCHED: "events of mail with no sendonce delivery: untagged, or sent by another app",
    Metric.UNKNOWN_OUTCOMES_RESOLVED: "unknown outcomes a Send event settled; UnknownOutcomes is the one to act on",
    Metric.UNSUBSCRIBE_TOKENS_REJECTED: "forged or stale links, answered 403; the route throttle bounds what they cost",
    Metric.COUNTER_RECORDS_APPLIED: "its volume follows the ledger's writes; CountersLagging watches the delay",
    Metric.COUNTER_RECORDS_REPEATED: "a retried batch's records, counted once by design",
    Metric.CAMPAIGNS_COMPLETED_BY_COUNTERS: "a campaign's completion is its state change, visible in its status",
    Metric.CAMPAIGNS_PAUSED_FOR_ACCOUNT: "each pause is its campaign's state and reason; AccountSendingStopped pages",
}


# Alarms and widgets read five-minute sums unless they say otherwise.
FIVE_MINUTES = cdk.Duration.minutes(5)


def sendonce_metric(
    name: Metric,
    *,
    statistic: str = "Sum",
    period: cdk.Duration = FIVE_MINUTES,
    label: str | None = None,
) -> cw.Metric:
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name.value,
        dimensions_map={contract.METRIC_SERVICE_DIMENSION: SERVICE_NAME},
        statistic=statistic,
        period=period,
        label=label,
    )


def failure_rate_percent(*, period: cdk.Duration = FIVE_MINUTES, minimum_volume: int = 20) -> cw.MathExpression:
    """(permanent + retryable failures) / (sent + those), in percent.

    Below `minimum_volume` attempts in a period the rate reads 0: two bounces out of
    three sends is not a provider outage.
    """
    failed = "(FILL(permanent, 0) + FILL(retryable, 0))"
    attempted = f"(FILL(sent, 0) + {failed})"
    return cw.MathExpression(
        expression=f"IF({attempted} >= {minimum_volume}, 100 * {failed} / {attempted}, 0)",
        using_metrics={
            "sent": sendonce_metric(Metric.EMAILS_SENT, period=period),
            "permanent": sendonce_metric(Metric.SEND_FAILURES_PERMANENT, period=period),
            "retryable": sendonce_metric(Metric.SEND_FAILURES_RETRYABLE, period=period),
        },
        period=period,
        label="Provider failure rate (%)",
    )
