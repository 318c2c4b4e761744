"""The shared limiter's state item: the throttle factor every consumer slows by after a
provider's 429, and the limit a provider stated (Resend's `ratelimit-limit`), learned by any
consumer and used by all.

    pk = limiter#<provider>, sk = state   throttle factor and when it was cut;
                                          the learned limit and when it was seen

A consumer trusts its copy for `STATE_TTL_S`. The factor is cut multiplicatively (`DECREASE`)
on each 429 and recovers additively (`RECOVERY_PER_SECOND`) while none arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DECREASE = 0.7  # factor kept after each provider 429
RECOVERY_PER_SECOND = 0.05  # factor regained per second without a 429
MIN_FACTOR = 0.1
STATE_TTL_S = 2.0  # how long a consumer trusts its copy of the shared factor


@dataclass(frozen=True)
class SharedState:
    factor: float  # the throttle factor, recovered to now
    limit: float | None  # the limit the provider stated, if any consumer has seen one
    read_at: float


class LimiterState:
    """One consumer's view of the state items, one per provider."""

    def __init__(self, *, client: Any, table_name: str, clock: Callable[[], float]):
        self._client = client
        self._table = table_name
        self._clock = clock
        self._state: dict[str, SharedState] = {}  # provider -> the state item as last read
        self.requests = 0

    def read(self, provider: str) -> SharedState:
        """The state as last read, read again when older than `STATE_TTL_S`."""
        if not self.stale(provider):
            return self._state[provider]
        self.requests += 1
        item = self._client.get_item(TableName=self._table, Key=_key(provider)).get("Item") or {}
        return self.adopt(provider, item)

    def stale(self, provider: str) -> bool:
        """Whether the next `read` asks DynamoDB (this copy is missing or too old)."""
        cached = self._state.get(provider)
        return cached is None or self._clock() - cached.read_at >= STATE_TTL_S

    @staticmethod
    def key(provider: str) -> dict[str, Any]:
        """The state item's key (for a caller that reads it with other items in one request)."""
        return _key(provider)

    def adopt(self, provider: str, item: dict[str, Any]) -> SharedState:
        """The state item as read now (empty: there is none yet), kept as this consumer's copy."""
        now = self._clock()
        factor = 1.0
        if "factor" in item:
            cut = float(item["factor"]["N"])
            factor = min(1.0, cut + RECOVERY_PER_SECOND * max(0.0, now - float(item["cut_at"]["N"])))
        limit = float(item["limit"]["N"]) if "limit" in item else None
        state = SharedState(factor=factor, limit=limit, read_at=now)
        self._state[provider] = state
        return state

    def cut(self, provider: str) -> None:
        """The provider said "too fast": the factor for every consumer is cut."""
        now = self._clock()
        state = self.read(provider)
        factor = max(MIN_FACTOR, state.factor * DECREASE)
        self.requests += 1
        # SET, not a put: the learned limit on the same item stays.
        self._client.update_item(
            TableName=self._table,
            Key=_key(provider),
            UpdateExpression="SET #factor = :f, cut_at = :t",
            ExpressionAttributeNames={"#factor": "factor"},
            ExpressionAttributeValues={":f": {"N": f"{factor:.4f}"}, ":t": {"N": f"{now:.3f}"}},
        )
        self._state[provider] = SharedState(factor=factor, limit=state.limit, read_at=now)

    def learn(self, provider: str, limit_per_s: float) -> bool:
        """The provider stated its limit: recorded for every consumer when it differs from
        what this one last knew (a steady limit costs no request). True when it changed."""
        state = self.read(provider)
        if state.limit == limit_per_s:
            return False
        now = self._clock()
        self.requests += 1
        self._client.update_item(
            TableName=self._table,
            Key=_key(provider),
            UpdateExpression="SET #limit = :l, limit_seen_at = :t",
            ExpressionAttributeNames={"#limit": "limit"},
            ExpressionAttributeValues={":l": {"N": f"{limit_per_s:g}"}, ":t": {"N": f"{now:.3f}"}},
        )
        self._state[provider] = SharedState(factor=state.factor, limit=limit_per_s, read_at=state.read_at)
        return True


def _key(provider: str) -> dict[str, Any]:
    return {"pk": {"S": f"limiter#{provider}"}, "sk": {"S": "state"}}
