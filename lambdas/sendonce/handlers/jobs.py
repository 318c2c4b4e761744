"""The jobs worker: each SQS message names a job; one step of it per message (domain/jobs).

A step that raises fails its message alone (partial batch response): the message comes back
and the step is taken again from the job's own cursor.
"""

from __future__ import annotations

import json
import os
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from sendonce.domain.errors import JobNotFoundError
from sendonce.domain.jobs.service import JobService
from sendonce.handlers.observability import logger, metrics
from sendonce.settings import JobsSettings
from sendonce.wiring.jobs import job_service


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext, service: JobService | None = None) -> dict:
    jobs = service or job_service(JobsSettings.from_env(os.environ))

    def record_handler(record: SQSRecord) -> None:
        try:
            message = json.loads(record.body)
            job_id, part = message["job_id"], message.get("part")
            moved = jobs.work(job_id) if part is None else jobs.work_part(job_id, int(part))
        except (ValueError, KeyError, TypeError, JobNotFoundError) as exc:
            # Never a step of any job: taking it again cannot help (it is dropped, and said).
            logger.error("not a step of a job", extra={"message_id": record.message_id, "error": str(exc)[:200]})
            return
        logger.info(
            "job step",
            extra={
                "job_id": job_id,
                "part": part,
                "moved": moved is not None,
                "state": moved.state.value if moved else None,
                "steps": moved.steps if moved else None,
            },
        )

    return process_partial_response(
        event=event, record_handler=record_handler, processor=BatchProcessor(event_type=EventType.SQS), context=context
    )
