"""Jobs (domain/jobs) in the campaigns table, one item each:

    pk = job#<job id>, sk = job    body (the Job as JSON), version, campaign_id, state

Created with `attribute_not_exists` (starting a job with an id that exists returns that
job), moved on with a condition on the version read: the one write that decides which of
two workers on the same step goes on.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from sendonce.domain.errors import JobNotFoundError
from sendonce.domain.jobs.models import Job


def _key(job_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"job#{job_id}"}, "sk": {"S": "job"}}


def _item(job: Job) -> dict[str, Any]:
    return {
        **_key(job.job_id),
        "body": {"S": job.model_dump_json()},
        "version": {"N": str(job.version)},
        "campaign_id": {"S": job.campaign_id},
        "job_state": {"S": job.state.value},
    }


class DynamoDBJobStore:
    def __init__(self, *, client: Any, table_name: str):
        self._client = client
        self._table = table_name

    def create(self, job: Job) -> Job:
        try:
            self._client.put_item(
                TableName=self._table, Item=_item(job), ConditionExpression="attribute_not_exists(pk)"
            )
            return job
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return self.get(job.job_id)

    def get(self, job_id: str) -> Job:
        item = self._client.get_item(TableName=self._table, Key=_key(job_id), ConsistentRead=True).get("Item")
        if not item:
            raise JobNotFoundError(f"job {job_id!r} does not exist")
        return Job.model_validate_json(item["body"]["S"])

    def advance(self, old: Job, new: Job) -> bool:
        try:
            self._client.put_item(
                TableName=self._table,
                Item=_item(new),
                ConditionExpression="version = :v",
                ExpressionAttributeValues={":v": {"N": str(old.version)}},
            )
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
