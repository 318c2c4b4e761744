"""BatchGetItem of any number of keys: 100 keys a request (DynamoDB's limit), its unprocessed
keys asked again with jittered backoff, a bounded number of times."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from sendonce.domain.errors import CampaignBusyError

KEYS_PER_REQUEST = 100
ATTEMPTS = 5
BASE_S = 0.05


def batch_get_items(
    client: Any,
    table: str,
    keys: list[dict[str, Any]],
    *,
    consistent: bool = True,
    attempts: int = ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """Every item of `keys` that exists. Keys still unprocessed after `attempts` requests
    raise CampaignBusyError (throttled: the caller's retry, e.g. a job step's message, takes
    it again), never a partial answer."""
    items: list[dict[str, Any]] = []
    for start in range(0, len(keys), KEYS_PER_REQUEST):
        request: dict[str, Any] = {
            table: {"Keys": keys[start : start + KEYS_PER_REQUEST], "ConsistentRead": consistent}
        }
        for attempt in range(attempts):
            if attempt:
                sleep(random.random() * BASE_S * 2**attempt)
            response = client.batch_get_item(RequestItems=request)
            items.extend(response.get("Responses", {}).get(table, []))
            request = response.get("UnprocessedKeys") or {}
            if not request:
                break
        else:
            left = len(request.get(table, {}).get("Keys", []))
            raise CampaignBusyError(f"{left} key(s) of {table} still unprocessed after {attempts} requests")
    return items
