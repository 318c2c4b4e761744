"""The DynamoDB write units bench-scale measured, writer by writer (measured.json), and a
campaign's write units computed from them: one source of numbers for the benchmark's report
and for `sendonce cost`.

measured.json is written by `python -m bench.scale_writers` from a `make bench-scale` run
(its command, date and commit are in the file). It holds, per writer of `writers.WRITERS`,
the write units it took in each campaign measured, and the line through the smallest and
the largest: `fixed` (what a campaign costs whatever its size) and `per_recipient`; and,
from bench-scale's one-by-one campaign (one provider request per recipient), each writer's
units per recipient: its sending, its events and its aggregator; and, from a
`bench-scale --tracking` run (`tracking`), the engagement writers' units per first open or
click.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from sendonce_ops.cost.prices import REGISTERED
from sendonce_ops.cost.writers import BY_NAME, WRITERS, Writer


@dataclass(frozen=True)
class Line:
    fixed: float  # write units per campaign
    per_recipient: float


@dataclass(frozen=True)
class Measured:
    """What one bench-scale capture measured (see measured.json's `how`)."""

    provider: str  # the provider of bench-scale's campaigns
    mode: str  # their delivery mode
    sizes: tuple[int, ...]
    writers: dict[str, Line]
    events_per_recipient: float  # provider events the measured campaigns had per recipient
    one_by_one: dict[str, float]  # write units per recipient of the one-by-one campaign, per writer
    one_by_one_events_per_recipient: float
    per_recipient_at: dict[int, float]  # every writer's write units per recipient, per size measured
    requests: dict[str, Line]  # DynamoDB requests per function
    how: dict[str, Any] = field(default_factory=dict)
    per_first: dict[str, float] = field(default_factory=dict)  # engagement writers: units per first open/click

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measured:
        fit = data["fit"]
        return cls(
            provider=data["how"]["provider"],
            mode=data["how"]["mode"],
            sizes=tuple(c["recipients"] for c in data["campaigns"]),
            writers={name: Line(**line) for name, line in fit["write_units"].items()},
            events_per_recipient=fit["provider_events_per_recipient"],
            one_by_one={name: w["write_units_per_recipient"] for name, w in data["one_by_one"]["writers"].items()},
            one_by_one_events_per_recipient=data["one_by_one"]["provider_events"] / data["one_by_one"]["recipients"],
            per_recipient_at={c["recipients"]: c["write_units_per_recipient"] for c in data["campaigns"]},
            requests={name: Line(**line) for name, line in fit["dynamodb_requests"].items()},
            how=data["how"],
            per_first=dict((data.get("tracking") or {}).get("write_units_per_first", {})),
        )

    @classmethod
    def load(cls) -> Measured:
        text = resources.files("sendonce_ops.cost").joinpath("measured.json").read_text()
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class WriterUnits:
    """One writer's part of a campaign."""

    writer: Writer
    write_units: float
    fixed: float
    per_recipient: float  # as the model uses it for this campaign (after scaling)
    basis: str  # how the figure was reached

    def as_dict(self) -> dict[str, Any]:
        w = self.writer
        return {
            "writer": w.name,
            "function": w.function,
            "table": w.table,
            "share": w.share,
            "measured": w.scales != "not_measured",
            "fixed_write_units": self.fixed,
            "write_units_per_recipient": self.per_recipient,
            "write_units": self.write_units,
            "basis": self.basis,
            "what": w.what,
        }


def ledger_writes_per_send(provider: str) -> int:
    """claim and mark_sent; and mark_in_flight before a send no idempotency key covers."""
    return 2 if REGISTERED[provider].capabilities.idempotent else 3


def campaign_writes(
    measured: Measured,
    recipients: int,
    provider: str,
    mode: str,
    events_per_email: float,
    firsts_per_email: float = 0.0,
) -> list[WriterUnits]:
    """Every writer's write units for a campaign of `recipients`, in `WRITERS`' order. A
    writer the capture holds and `WRITERS` does not is refused: the model would leave it out.

    In the campaigns' mode: each writer's fixed + per-recipient line. In the other (one provider
    request per recipient): the one-by-one campaign's units per recipient for the writers it
    wrote (its sending, events and aggregator, at its rate), the line for the others (the
    publish's, and a write once a campaign: one that did not grow with the recipients); a
    provider with no idempotency key adds a ledger write per recipient. `events_per_email`:
    the provider events that reach the ledger (not opens and clicks); `firsts_per_email`: a
    tracking campaign's first opens and clicks per email (0: tracking off)."""
    unknown = sorted((set(measured.writers) | set(measured.one_by_one)) - set(BY_NAME))
    if unknown:
        raise ValueError(f"the capture holds writers the cost model does not know: {', '.join(unknown)}")
    out = []
    for writer in WRITERS:
        line = measured.writers.get(writer.name, Line(0.0, 0.0))
        fixed, per_recipient, events = line.fixed, line.per_recipient, measured.events_per_recipient
        basis = f"bench-scale's {measured.provider} {measured.mode}-mode campaigns: fixed + per recipient"
        if writer.scales == "not_measured":
            fixed, per_recipient, basis = 0.0, 0.0, "not measured by bench-scale: not priced"
        elif writer.scales == "first_engagement":
            per_first = measured.per_first.get(writer.name)
            fixed, per_recipient = 0.0, (per_first or 0.0) * firsts_per_email
            if per_first is None:
                basis = "not in the capture (no bench-scale --tracking run): not priced"
            elif not firsts_per_email:
                basis = "tracking off: none"
            else:
                basis = (
                    f"bench-scale --tracking: {per_first:g} per first open or click x {firsts_per_email:g} an email"
                    " (each open and click taken as a first: an upper bound)"
                )
        elif mode != measured.mode and writer.batch_only:
            fixed, per_recipient, basis = 0.0, 0.0, f"not written in {mode} mode"
        elif mode != measured.mode and writer.name in measured.one_by_one and line.per_recipient == 0:
            basis += " (a write once a campaign, in either mode)"
        elif mode != measured.mode and writer.name in measured.one_by_one:
            fixed, per_recipient = 0.0, measured.one_by_one[writer.name]
            events = measured.one_by_one_events_per_recipient
            basis = f"bench-scale's one-by-one campaign ({measured.provider}): per recipient"
            if writer.per_ledger_write:
                ratio = ledger_writes_per_send(provider) / ledger_writes_per_send(measured.provider)
                if ratio != 1:
                    per_recipient *= ratio
                    basis += f", x{ratio:g}: {ledger_writes_per_send(provider)} conditional writes per recipient"
        if writer.scales == "provider_event" and events:
            per_recipient *= events_per_email / events
            basis += f"; per provider event ({events_per_email:g} an email here, {events:g} measured)"
        units = max(0.0, fixed + per_recipient * recipients)
        out.append(WriterUnits(writer, units, fixed, round(per_recipient, 4), basis))
    return out


def campaign_requests(measured: Measured, recipients: int) -> dict[str, float]:
    """DynamoDB requests per function (reads and writes), as bench-scale's campaigns made them."""
    return {name: max(0.0, line.fixed + line.per_recipient * recipients) for name, line in measured.requests.items()}
