"""Counts AWS API calls made through a boto3 session, by service and operation."""

from __future__ import annotations

import threading
from collections import Counter

import boto3


class RequestCounter:
    def __init__(self, session: boto3.session.Session):
        self.calls: Counter = Counter()
        self._lock = threading.Lock()
        # Clients created from the session afterwards inherit this handler.
        session.events.register("before-call", self._count)

    def _count(self, model, **_):
        with self._lock:
            self.calls[f"{model.service_model.service_name}.{model.name}"] += 1

    def total(self, service: str) -> int:
        return sum(n for key, n in self.calls.items() if key.startswith(service + "."))

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
