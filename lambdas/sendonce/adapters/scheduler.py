"""EventBridge Scheduler as the CampaignScheduler port: one one-time schedule per campaign
for its start, and one per send-window opening that resumes it (named after the campaign
and the opening's instant, so that setting the next opening never touches one that is
firing).

Each schedule is `at(...)` in UTC, in the stack's schedule group, deleted by the service
after it runs (ActionAfterCompletion DELETE), and invokes the scheduled-start function with
the campaign id and the instant it was set for (plus the execution id, for the logs). The
service retries the invoke for up to 24 h (RetryPolicy); the firing's conditional write
makes every retry after the first a no-op.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

from botocore.exceptions import ClientError

from sendonce.domain.campaigns.scheduling import Firing

# Replaced by EventBridge Scheduler in a templated target's Input at each invocation.
EXECUTION_ID = "<aws.scheduler.execution-id>"
RETRY_POLICY = {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}
NAME_CHARS = 64  # a schedule's name: 1-64 of [0-9a-zA-Z-_.]


def schedule_name(campaign_id: str) -> str:
    """The campaign's schedule name: its id (ids are letters, digits, '_' and '-'), cut and
    suffixed with a hash when longer than a schedule name may be."""
    if len(campaign_id) <= NAME_CHARS:
        return campaign_id
    digest = hashlib.sha256(campaign_id.encode()).hexdigest()[:16]
    return f"{campaign_id[: NAME_CHARS - 17]}-{digest}"


def opening_schedule_name(campaign_id: str, opens_at_ms: int) -> str:
    return schedule_name(f"{campaign_id}.w{opens_at_ms // 1000}")


def at_expression(send_at_ms: int) -> str:
    return f"at({dt.datetime.fromtimestamp(send_at_ms // 1000, dt.UTC):%Y-%m-%dT%H:%M:%S})"


class EventBridgeScheduler:
    def __init__(self, *, client: Any, group_name: str, target_arn: str, role_arn: str):
        self._client = client
        self._group = group_name
        self._target_arn = target_arn
        self._role_arn = role_arn

    def set(self, campaign_id: str, send_at_ms: int) -> None:
        firing = Firing(campaign_id=campaign_id, send_at_ms=send_at_ms, execution_id=EXECUTION_ID)
        self._put(schedule_name(campaign_id), firing, f"sendonce: start campaign {campaign_id}")

    def set_opening(self, campaign_id: str, opens_at_ms: int) -> None:
        firing = Firing(campaign_id=campaign_id, send_at_ms=opens_at_ms, execution_id=EXECUTION_ID, window_opening=True)
        name = opening_schedule_name(campaign_id, opens_at_ms)
        self._put(name, firing, f"sendonce: resume campaign {campaign_id} at its send window's opening")

    def set_pick(self, campaign_id: str, pick_at_ms: int) -> None:
        firing = Firing(campaign_id=campaign_id, send_at_ms=pick_at_ms, execution_id=EXECUTION_ID, variant_pick=True)
        name = schedule_name(f"{campaign_id}.pick")
        self._put(name, firing, f"sendonce: pick the A/B winner of campaign {campaign_id}")

    def _put(self, name: str, firing: Firing, description: str) -> None:
        request = {
            "Name": name,
            "GroupName": self._group,
            "ScheduleExpression": at_expression(firing.send_at_ms),
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Description": description[:512],
            "Target": {
                "Arn": self._target_arn,
                "RoleArn": self._role_arn,
                "Input": json.dumps(firing.as_event()),
                "RetryPolicy": RETRY_POLICY,
            },
        }
        try:
            self._client.create_schedule(**request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConflictException":
                raise
            self._client.update_schedule(**request)  # it exists: move it (an update replaces it whole)

    def delete(self, campaign_id: str) -> None:
        try:
            self._client.delete_schedule(Name=schedule_name(campaign_id), GroupName=self._group)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
