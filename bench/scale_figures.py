"""bench-scale's figures: write units per key per second, and the sizes not run."""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import Any

from sendonce_local.write_units import WriteUnitAccountant


class KeyRates:
    """Write units per partition-key value per second: the accountant's totals sampled every
    second, the most any key took in one second kept (per phase)."""

    def __init__(self, accountant: WriteUnitAccountant, interval_s: float = 1.0):
        self._accountant = accountant
        self._interval_s = interval_s
        self._last: dict[tuple[str, str], int] = {}
        self.peak: Counter[tuple[str, str]] = Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="bench-key-rates", daemon=True)

    def start(self) -> KeyRates:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def reset(self) -> None:
        with self._lock:
            self._last = self._totals()
            self.peak.clear()

    def _totals(self) -> dict[tuple[str, str], int]:
        return {(f.table, f.partition): f.units for f in self._accountant.hottest(None, n=1_000_000)}

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            with self._lock:
                now = self._totals()
                for key, units in now.items():
                    delta = units - self._last.get(key, 0)
                    if delta > self.peak[key]:
                        self.peak[key] = delta
                self._last = now


def extrapolate(measured: list[dict[str, Any]], size: int) -> dict[str, Any]:
    """A size not run: its time at the last measured size's rates (both phases scale
    linearly in recipients here: each recipient costs the same requests)."""
    last = measured[-1]
    publish_rate = last["publish"]["recipients_per_s"] or 0
    send_rate = last["send"]["recipients_per_s"] or 0
    publish_s = size / publish_rate if publish_rate else None
    send_s = size / send_rate if send_rate else None
    return {
        "recipients": size,
        "from_size": last["recipients"],
        "publish_s": round(publish_s) if publish_s else None,
        "send_s": round(send_s) if send_s else None,
        "hours": round(((publish_s or 0) + (send_s or 0)) / 3600, 1),
    }


def status_ratio(measured: list[dict[str, Any]]) -> dict[str, Any] | None:
    if len(measured) < 2:
        return None
    first, last = measured[0], measured[-1]
    return {
        "recipients_ratio": last["recipients"] / first["recipients"],
        "counters_bytes_ratio": round(
            last["status"]["counters"]["bytes"] / max(1, first["status"]["counters"]["bytes"]), 2
        ),
        "full_read_bytes_ratio": round(
            last["status"]["full_read"]["bytes"] / max(1, first["status"]["full_read"]["bytes"]), 2
        ),
    }


def key_kind(partition: str, campaign_id: str) -> str:
    """`campaign#scale1000#sent#3` -> `campaign#<id>#sent#<k>`; hashes -> `<h>`."""
    kind = partition.replace(campaign_id, "<id>") if campaign_id else partition
    kind = re.sub(r"[0-9a-f]{16,}", "<h>", kind)
    return re.sub(r"\d+", "<k>", kind)


def key_kinds(figures: list[Any], recipients: int, campaign_id: str, most: int = 12) -> dict[str, float]:
    units: dict[str, int] = {}
    for figure in figures:
        kind = key_kind(figure.partition, campaign_id)
        units[kind] = units.get(kind, 0) + figure.units
    ranked = sorted(units.items(), key=lambda item: -item[1])[:most]
    return {kind: round(n / recipients, 4) for kind, n in ranked}
