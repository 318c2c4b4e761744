"""The Powertools Logger and Metrics every handler uses, named from `sendonce.contract`.

One of each per execution environment: a function runs one handler, and Powertools shares
a namespace's metric set between instances anyway. (No Tracer: the functions do not enable
X-Ray, and the bundle does not carry its SDK.)
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from sendonce.contract import METRICS_NAMESPACE, SERVICE_NAME, Metric

logger = Logger(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


def count(name: Metric, value: int = 1) -> None:
    """Add a count metric; zero is not published."""
    if value:
        metrics.add_metric(name=name.value, unit=MetricUnit.Count, value=int(value))
