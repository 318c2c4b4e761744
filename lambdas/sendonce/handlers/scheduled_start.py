"""A campaign's one-time schedule fired (EventBridge Scheduler invokes this function with
the schedule's input): start the send if the campaign is still scheduled for exactly that
instant, or, for a send window's opening, resume the campaign if the window paused it for
exactly that opening (domain/campaigns/window_pauses.py). Any other firing changes nothing;
the answer and the log say why.

The answer is the same for a repeat, so a retried invocation is harmless; only an error
(the campaigns table unreachable) raises, for Lambda's asynchronous retries to try again.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.scheduling import Firing
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.errors import CampaignNotFoundError, InvalidCampaignError
from sendonce.handlers.observability import logger
from sendonce.settings import ApiSettings
from sendonce.wiring.api import campaign_service


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext, service: CampaignService | None = None) -> dict:
    try:
        firing = Firing.from_event(event)
    except InvalidCampaignError as exc:
        logger.error("not a schedule's firing; nothing started", extra={"reason": str(exc)})
        return {"started": False, "reason": str(exc)}
    service = service or campaign_service(ApiSettings.from_env(os.environ), operator=lifecycle.AUTOMATIC)
    try:
        if firing.window_opening:
            return service.open_window(firing).as_dict()
        if firing.variant_pick:
            return service.pick_on_schedule(firing)
        return service.start_scheduled(firing).as_dict()
    except CampaignNotFoundError as exc:
        logger.warning("schedule fired for no campaign; nothing started", extra={"campaign_id": firing.campaign_id})
        return {"campaign_id": firing.campaign_id, "started": False, "reason": str(exc)}
