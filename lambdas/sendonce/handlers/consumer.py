"""SQS consumer: one message is one batch of up to 100 recipients of one campaign."""

from __future__ import annotations

import math
import os
import time
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from sendonce.contract import FAILURE_METRICS, Metric
from sendonce.domain.sending.batch_run import BatchIncompleteError, BatchReport
from sendonce.handlers.observability import count, count_for_campaign, logger, metrics
from sendonce.settings import ConsumerSettings
from sendonce.wiring.consumer import ConsumerRuntime, consumer_runtime


def _emit(report: BatchReport) -> None:
    counts = {
        Metric.EMAILS_SENT: report.sent,
        Metric.DUPLICATE_SENDS_PREVENTED: report.duplicates_prevented,
        Metric.UNKNOWN_OUTCOMES: report.unknown,
        Metric.DEAD_LETTERED_RECIPIENTS: report.dead_lettered,
        Metric.RECIPIENTS_SUPPRESSED: report.suppressed,
        Metric.PAYLOAD_CONFLICTS: report.conflicts,
        Metric.POISON_MESSAGES: 1 if report.poison_reason else 0,
        Metric.CAMPAIGN_SKIPS_PAUSED: 1 if report.skipped_state else 0,
    }
    for error_class, failures in report.errors_by_class.items():
        name = FAILURE_METRICS.get(error_class)
        if name:
            counts[name] = counts.get(name, 0) + failures
    for name, value in counts.items():
        count(name, value)
    count_for_campaign(report.campaign_id, counts)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext, runtime: ConsumerRuntime | None = None) -> dict:
    runtime = runtime or consumer_runtime(ConsumerSettings.from_env(os.environ))
    # First, before any claim: leases are the function's remaining time.
    runtime.register_lambda_context(context)

    def record_handler(record: SQSRecord) -> None:
        logger.append_keys(message_id=record.message_id, campaign_id=None, batch_id=None)
        sent_at = record.attributes.sent_timestamp
        report = runtime.service.process(
            record.body,
            receive_count=int(record.attributes.approximate_receive_count or 1),
            remaining_ms=context.get_remaining_time_in_millis,
            dwell_ms=max(0, int(time.time() * 1000) - int(sent_at)) if sent_at else None,
        )
        logger.append_keys(campaign_id=report.campaign_id, batch_id=report.batch_id)
        _emit(report)
        logger.info(
            "batch processed",
            extra={
                "sent": report.sent,
                "duplicates_prevented": report.duplicates_prevented,
                "failed": report.failed,
                "unknown": report.unknown,
                "returning": report.returning,
                "dead_lettered": report.dead_lettered,
                "suppressed": report.suppressed,
                "skipped_state": report.skipped_state,
                "halted_reason": report.halted_reason,
            },
        )
        if report.must_return:
            if report.return_at_ms:
                # Another consumer holds some recipients: come back when its lease ends
                # instead of spending receives (and reaching the DLQ) while it works.
                wait_s = math.ceil((report.return_at_ms - time.time() * 1000) / 1000) + 1
                if wait_s > 0:
                    runtime.queue.return_later(record.event_source_arn, record.receipt_handle, seconds=wait_s)
            raise BatchIncompleteError(report)

    return process_partial_response(
        event=event, record_handler=record_handler, processor=BatchProcessor(event_type=EventType.SQS), context=context
    )
