"""A consumer with faults injected at exact points, for chaos tests and the demo.

It is the real consumer — the real handler, adapters and Powertools guard — assembled
from `sendonce.wiring.consumer` with thin wrappers around the ledger and the provider that kill
this process (SIGKILL, no cleanup) or fail a write at the point named in
SENDONCE_FAULTS, a JSON list such as:

    [{"at": "after_accept", "recipient_id": "r7"},
     {"at": "after_claim", "recipient_id": "r9"},
     {"at": "ledger_write_fails", "recipient_id": "r3"}]

Each fault fires once across all processes sharing SENDONCE_FAULT_MARKERS (a directory
where a fired fault leaves a marker file), so a restarted consumer does not die again.
"""

from __future__ import annotations

import json
import os
import signal
from functools import lru_cache
from pathlib import Path
from typing import Any

from sendonce.domain.models import DeliveryKey, OutboundEmail, Receipt
from sendonce.domain.sending.ports import ClaimStatus
from sendonce.handlers import consumer
from sendonce.settings import ConsumerSettings
from sendonce.wiring.clients import clients
from sendonce.wiring.consumer import ConsumerParts, ConsumerRuntime, build_consumer_parts, build_consumer_runtime

FAULT_POINTS = ("after_claim", "after_accept", "ledger_write_fails")


class InjectedFault(RuntimeError):
    pass


class Faults:
    def __init__(self, spec: list[dict[str, str]], marker_dir: str | None):
        for fault in spec:
            if fault.get("at") not in FAULT_POINTS:
                raise ValueError(
                    f"SENDONCE_FAULTS: unknown fault point {fault.get('at')!r} (known: {', '.join(FAULT_POINTS)})"
                )
        self._spec = spec
        self._markers = Path(marker_dir) if marker_dir else None

    def fires(self, at: str, recipient_id: str) -> bool:
        for fault in self._spec:
            if fault["at"] == at and fault.get("recipient_id") in (recipient_id, "*"):
                if self._markers is None:
                    return True
                marker = self._markers / f"{at}-{recipient_id}"
                try:
                    marker.touch(exist_ok=False)  # atomic: exactly one process fires it
                    return True
                except FileExistsError:
                    return False
        return False


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class FaultyLedger:
    def __init__(self, inner, faults: Faults):
        self._inner = inner
        self._faults = faults

    def claim(self, request, **kwargs):
        result = self._inner.claim(request, **kwargs)
        if result.status is ClaimStatus.CLAIMED and self._faults.fires("after_claim", request.recipient_id):
            _die()
        return result

    def mark_sent(self, key: DeliveryKey, *, owner: str, receipt: Receipt) -> None:
        if self._faults.fires("ledger_write_fails", key.recipient_id):
            raise InjectedFault(f"injected: ledger write after send failed for {key.recipient_id}")
        self._inner.mark_sent(key, owner=owner, receipt=receipt)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class FaultyProvider:
    def __init__(self, inner, faults: Faults):
        self._inner = inner
        self._faults = faults
        self.name = inner.name
        self.idempotent = inner.idempotent

    def send(self, email: OutboundEmail) -> Receipt:
        receipt = self._inner.send(email)
        if self._faults.fires("after_accept", email.tags.get("recipient_id", "")):
            _die()  # the provider accepted; the ledger never hears of it
        return receipt

    def send_batch(self, emails: list[OutboundEmail], *, idempotency_key: str):
        results = self._inner.send_batch(emails, idempotency_key=idempotency_key)
        if any(self._faults.fires("after_accept", e.tags.get("recipient_id", "")) for e in emails):
            _die()  # the whole batch was accepted; the ledger never hears of it
        return results

    @property
    def max_batch(self) -> int:
        return self._inner.max_batch


@lru_cache(maxsize=1)
def _runtime() -> ConsumerRuntime:
    settings = ConsumerSettings.from_env(os.environ)
    faults = Faults(json.loads(os.environ.get("SENDONCE_FAULTS", "[]")), os.environ.get("SENDONCE_FAULT_MARKERS"))
    parts = build_consumer_parts(settings, clients())
    wrapped = ConsumerParts(
        ledger=FaultyLedger(parts.ledger, faults),
        campaigns=parts.campaigns,
        providers={name: FaultyProvider(p, faults) for name, p in parts.providers.items()},
        queue=parts.queue,
        limiter=parts.limiter,
        suppressions=parts.suppressions,
        unsubscribe=parts.unsubscribe,
        scheduler=parts.scheduler,  # a send window's opening, when the window pauses a campaign
    )
    return build_consumer_runtime(settings, wrapped)


def init() -> None:
    """The runtime built before the first invocation (`python -m sendonce_local.poller --init`)."""
    _runtime()


def lambda_handler(event: dict[str, Any], context: Any) -> dict:
    return consumer.lambda_handler(event, context, runtime=_runtime())
