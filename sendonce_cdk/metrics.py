"""sendonce's own metrics, as Powertools publishes them (EMF), from the consumer and the
deliverability functions alike; their names are `sendonce.contract.Metric`.

Powertools adds the default dimension `service` = POWERTOOLS_SERVICE_NAME to every
metric, so an alarm must name that dimension to match the published series.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw

from sendonce.contract import METRICS_NAMESPACE, SERVICE_NAME, Metric

def sendonce_metric(
    name: Metric,
    *,
    statistic: str = "Sum",
    period: cdk.Duration = cdk.Duration.minutes(5),
    label: str | None = None,
) -> cw.Metric:
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name.value,
        dimensions_map={"service": SERVICE_NAME},
        statistic=statistic,
        period=period,
        label=label,
    )


def failure_rate_percent(
    *, period: cdk.Duration = cdk.Duration.minutes(5), minimum_volume: int = 20
) -> cw.MathExpression:
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
