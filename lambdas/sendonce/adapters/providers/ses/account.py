"""The SES account's state from SES v2 `GetAccount` (domain/deliverability/account_health.py)."""

from __future__ import annotations

from typing import Any

from sendonce.domain.deliverability.ports import AccountState, Enforcement

PROVIDER = "ses"


class SesAccount:
    """`SendingEnabled` and `EnforcementStatus` of the account the client signs for. A failed
    read raises (botocore's error): the scheduled check fails, and the next one reads again."""

    def __init__(self, *, client: Any):
        self._client = client

    def state(self) -> AccountState:
        answer = self._client.get_account()
        return AccountState(
            provider=PROVIDER,
            # Absent only from a malformed answer: read as able to send, so nothing is paused
            # on a guess (a refused send still halts its campaign).
            sending_enabled=bool(answer.get("SendingEnabled", True)),
            enforcement=str(answer.get("EnforcementStatus") or Enforcement.HEALTHY),
        )
