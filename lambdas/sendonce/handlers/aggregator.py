"""The counters' aggregator: DynamoDB stream records of the ledger and of the campaigns
table in, per-campaign counters out (domain/campaigns/counters.py).

The event source mapping delivers one shard's records in order. Applying a record twice
counts it once (each counter item keeps the last sequence number it applied), so a
failure raises: Lambda retries the batch (bisecting it), and whatever was applied before
the failure is skipped on the retry.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from sendonce.adapters.dynamodb.stream_records import changes_of
from sendonce.contract import Metric
from sendonce.domain.campaigns.counters import CounterAggregator
from sendonce.handlers.observability import count, logger, metrics
from sendonce.settings import AggregatorSettings
from sendonce.wiring.aggregator import aggregator_service


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext, service: CounterAggregator | None = None) -> dict:
    service = service or aggregator_service(AggregatorSettings.from_env(os.environ))
    records = event.get("Records", [])
    report = service.apply(changes_of(records))
    count(Metric.COUNTER_RECORDS_APPLIED, report.applied)
    count(Metric.COUNTER_RECORDS_REPEATED, report.repeated)
    count(Metric.CAMPAIGNS_COMPLETED_BY_COUNTERS, len(report.completed))
    logger.info(
        "stream records applied",
        extra={"records": len(records), "applied": report.applied, "repeated": report.repeated},
    )
    return {"applied": report.applied, "repeated": report.repeated, "completed": report.completed}
