"""The account health check, invoked on a schedule (an EventBridge rule, every few minutes):
read the provider's account, pause its sending campaigns when it cannot send, and publish
what was seen for the alarms (domain/deliverability/account_health.py).

A failed read raises: the invocation fails (the check's error alarm) and the next firing
reads again; nothing was paused on a guess.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from sendonce.contract import Metric
from sendonce.domain.deliverability.account_health import AccountHealthService
from sendonce.domain.deliverability.ports import Verdict
from sendonce.handlers.observability import count, logger, metrics
from sendonce.settings import AccountHealthSettings
from sendonce.wiring.account_health import account_health_service


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext, service: AccountHealthService | None = None) -> dict:
    service = service or account_health_service(AccountHealthSettings.from_env(os.environ))
    check = service.check()
    count(Metric.ACCOUNT_ON_PROBATION, int(check.verdict is Verdict.PROBATION))
    count(Metric.ACCOUNT_SENDING_STOPPED, int(check.verdict is Verdict.STOPPED))
    count(Metric.CAMPAIGNS_PAUSED_FOR_ACCOUNT, len(check.paused))
    log = logger.warning if check.verdict is not Verdict.HEALTHY else logger.info
    log(
        "account checked",
        extra={
            "provider": check.state.provider,
            "verdict": check.verdict.value,
            "reason": check.state.reason,
            "paused": len(check.paused),
            "came_back": check.came_back,
        },
    )
    return check.as_dict()
