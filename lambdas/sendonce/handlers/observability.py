"""The Powertools Logger and Metrics every handler uses, named from `sendonce.contract`.

One of each per execution environment: a function runs one handler, and Powertools shares
a namespace's metric set between instances anyway. (No Tracer: the functions do not enable
X-Ray, and the bundle does not carry its SDK.)
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from sendonce.contract import CAMPAIGN_METRICS, METRIC_CAMPAIGN_DIMENSION, METRICS_NAMESPACE, SERVICE_NAME, Metric

logger = Logger(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)
# Not shared with `metrics`: each campaign's counts go out in a document of their own, with
# the campaign as a dimension (one per invocation's set would mix campaigns).
campaign_metrics = EphemeralMetrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


def count(name: Metric, value: int = 1) -> None:
    """Add a count metric; zero is not published."""
    if value:
        metrics.add_metric(name=name.value, unit=MetricUnit.Count, value=int(value))


def count_for_campaign(campaign_id: str | None, counts: Mapping[Metric, int]) -> None:
    """The CAMPAIGN_METRICS among `counts` again, per campaign: one EMF document, written now
    (nothing when they are all zero)."""
    shown = {name: int(value) for name, value in counts.items() if name in CAMPAIGN_METRICS and value}
    if not campaign_id or not shown:
        return
    campaign_metrics.add_dimension(name=METRIC_CAMPAIGN_DIMENSION, value=campaign_id)
    for name, value in shown.items():
        campaign_metrics.add_metric(name=name.value, unit=MetricUnit.Count, value=value)
    campaign_metrics.flush_metrics()
