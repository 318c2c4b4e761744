"""bench-scale's writers: which function wrote which kind of key, and what of it is fixed.

Each function of the stack runs on a boto3 session of its own (the operator API, the
consumer, the events function, the aggregator), hooked by the one `WriteUnitAccountant`
with the function's name and by a `RequestCounter` of its own. A write is then put under
one writer of `sendonce_ops.cost.writers.WRITERS` (the cost model's list of every writer
the deployed stack has) by its function, its table and its kind of key; a write no entry
describes is kept as `<function>: unclassified <kind of key>`, so that the capture shows it
and the cost model's test fails until the model knows it.

Fixed and per recipient: each campaign's write units per writer, publish and send
together, are measured at two sizes and fitted to a line; its slope is the writer's units
per recipient, its intercept what a campaign costs whatever its size (`fit`).

    python -m bench.scale_writers bench-scale.json [--out src/sendonce_ops/cost/measured.json]

writes the cost model's capture from a bench-scale report (`capture`): the one source of
`sendonce cost`'s DynamoDB write units (docs/benchmarks.md, "Every writer").
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3

from bench.scale_figures import key_kind
from sendonce.domain.models import MAX_RECIPIENTS_PER_BATCH
from sendonce_local.request_counter import RequestCounter
from sendonce_local.write_units import WriteUnitAccountant
from sendonce_ops.cost.writers import WRITERS, classify

# The functions bench-scale runs, each on a session of its own.
FUNCTIONS = ("api", "consumer", "events", "aggregator")


def sort_kind(value: str) -> str:
    """A sort-key value's kind: its text before the first `#`, numbers and hashes
    generalized (`deliverability#sent#3` -> `deliverability`, `r0000042` -> `r<k>`)."""
    head = value.split("#", 1)[0]
    head = re.sub(r"[0-9a-f]{16,}", "<h>", head)
    return re.sub(r"\d+", "<k>", head)


class FunctionSessions:
    """One hooked session per function, and the DynamoDB requests each made."""

    def __init__(self, accountant: WriteUnitAccountant):
        self.sessions = {name: boto3.session.Session() for name in FUNCTIONS}
        self.counters = {}
        for name, session in self.sessions.items():
            accountant.attach(session, writer=name)
            self.counters[name] = RequestCounter(session)

    def __getitem__(self, name: str) -> boto3.session.Session:
        return self.sessions[name]

    def reset(self) -> None:
        for counter in self.counters.values():
            counter.reset()

    def total(self, service: str) -> int:
        return sum(c.total(service) for c in self.counters.values())

    def by_function(self, service: str = "dynamodb") -> dict[str, int]:
        return {name: c.total(service) for name, c in self.counters.items()}


def writer_units(
    accountant: WriteUnitAccountant, roles: Mapping[str, str], campaign_id: str
) -> dict[str, dict[str, Any]]:
    """Write units and items written per writer, and the kinds of key each wrote."""
    out: dict[str, dict[str, Any]] = {}
    for (function, table, partition, sk_kind), units, writes in accountant.by_writers():
        role = roles.get(table, table)
        kind = key_kind(partition, campaign_id)
        writer = classify(function, role, kind, sk_kind)
        entry = out.setdefault(writer, {"write_units": 0, "writes": 0, "keys": []})
        entry["write_units"] += units
        entry["writes"] += writes
        key = f"{role}: {kind} / {sk_kind or '-'}"
        if key not in entry["keys"]:
            entry["keys"].append(key)
    return out


def add_phases(*phases: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The writers of several phases of one campaign, summed."""
    out: dict[str, dict[str, Any]] = {}
    for phase in phases:
        for writer, entry in phase.items():
            into = out.setdefault(writer, {"write_units": 0, "writes": 0, "keys": []})
            into["write_units"] += entry["write_units"]
            into["writes"] += entry["writes"]
            into["keys"] += [k for k in entry["keys"] if k not in into["keys"]]
    return dict(sorted(out.items()))


def campaign_writers(
    publish: Mapping[str, Any], send: Mapping[str, Any], recipients: int, webhooks: int
) -> dict[str, Any]:
    """One campaign's writers and requests, publish and send together."""
    writers = add_phases(publish["writers"], send["writers"])
    requests = Counter(publish["dynamodb_requests_by_function"])
    requests.update(send["dynamodb_requests_by_function"])
    messages = math.ceil(recipients / MAX_RECIPIENTS_PER_BATCH)
    units = sum(w["write_units"] for w in writers.values())
    return {
        "recipients": recipients,
        "messages": messages,
        "provider_events": webhooks,
        "write_units": units,
        "write_units_per_recipient": round(units / recipients, 4),
        "writers": {
            name: {**entry, "write_units_per_recipient": round(entry["write_units"] / recipients, 4)}
            for name, entry in writers.items()
        },
        "dynamodb_requests_by_function": dict(sorted(requests.items())),
        "consumer_dynamodb_requests_per_message": round(requests["consumer"] / messages, 2),
    }


def fit(campaigns: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Per writer (and per function's requests): fixed per campaign and per recipient, the
    line through the smallest and the largest campaign measured. None with one size."""
    sizes = sorted(campaigns, key=lambda c: c["recipients"])
    if len(sizes) < 2 or sizes[0]["recipients"] == sizes[-1]["recipients"]:
        return None
    small, large = sizes[0], sizes[-1]
    span = large["recipients"] - small["recipients"]

    def line(a: float, b: float) -> dict[str, float]:
        slope = (b - a) / span
        return {"fixed": round(a - slope * small["recipients"], 2), "per_recipient": round(slope, 4)}

    writers = sorted(set(small["writers"]) | set(large["writers"]))
    units = {
        w: line(
            small["writers"].get(w, {}).get("write_units", 0),
            large["writers"].get(w, {}).get("write_units", 0),
        )
        for w in writers
    }
    functions = sorted(set(small["dynamodb_requests_by_function"]) | set(large["dynamodb_requests_by_function"]))
    requests = {
        f: line(
            small["dynamodb_requests_by_function"].get(f, 0),
            large["dynamodb_requests_by_function"].get(f, 0),
        )
        for f in functions
    }
    return {
        "from_sizes": [small["recipients"], large["recipients"]],
        "write_units": units,
        "write_units_total": line(small["write_units"], large["write_units"]),
        "dynamodb_requests": requests,
        "provider_events_per_recipient": round(large["provider_events"] / large["recipients"], 4),
    }


def capture(report: Mapping[str, Any], commit: str) -> dict[str, Any]:
    """The cost model's figures (src/sendonce_ops/cost/measured.json) from a bench-scale
    report of at least two sizes with provider events and the one-by-one campaign."""
    campaigns = [c for c in report["campaigns"] if c["provider_events"]]
    fitted = fit([c["writers"] for c in campaigns])
    if fitted is None or not report.get("per_message"):
        raise ValueError("a capture needs two sizes with provider events and the per-message campaigns")
    one_by_one = report["per_message"]["one_by_one"]
    return {
        "how": {
            "command": report.get("command", "python -m bench.scale"),
            "measured_on": report.get("started_at"),
            "commit": commit,
            "provider": report["config"]["provider"],
            "mode": report["config"]["delivery_mode"],
            "conditions": (
                "the CDK stack deployed into moto, batch mode against the local Resend server, suppressions,"
                f" the shared limiter ({report['config']['resend_requests_per_second']} requests/s),"
                f" {report['config']['consumers']} consumers, provider events (sent, delivered) and the"
                " aggregator on (its stream mappings batched as deployed; moto gives each stream one shard)"
            ),
            "method": (
                "each campaign's write units per writer, publish and send together, until its last webhook and"
                " stream record were applied; fixed and per_recipient: the line through the smallest and the"
                " largest campaign"
            ),
            "machine": report.get("machine"),
        },
        "campaigns": [
            {
                **{k: c["writers"][k] for k in ("recipients", "messages", "provider_events", "write_units")},
                "write_units_per_recipient": c["writers"]["write_units_per_recipient"],
                "send_recipients_per_s": c["send"]["recipients_per_s"],
                "writers": {
                    name: {k: w[k] for k in ("write_units", "writes", "write_units_per_recipient")}
                    for name, w in c["writers"]["writers"].items()
                },
                "dynamodb_requests_by_function": c["writers"]["dynamodb_requests_by_function"],
                "consumer_dynamodb_requests_per_message": c["writers"]["consumer_dynamodb_requests_per_message"],
            }
            for c in campaigns
        ],
        "fit": fitted,
        "one_by_one": {
            "recipients": one_by_one["recipients"],
            "provider_events": one_by_one["provider_events"],
            "writers": {
                name: {k: w[k] for k in ("write_units", "writes", "write_units_per_recipient")}
                for name, w in one_by_one["writers"].items()
            },
        },
    }


ENGAGEMENT_WRITERS = tuple(w.name for w in WRITERS if w.scales == "first_engagement")


def tracking_capture(report: Mapping[str, Any]) -> dict[str, Any]:
    """The engagement writers' write units per first open or click, from a `bench-scale
    --tracking` report (every email opened and clicked): the first-engagement writer's
    writes are the firsts (one each; a repeat writes nothing)."""
    campaign = max(report["campaigns"], key=lambda c: c["recipients"])
    writers = campaign["writers"]["writers"]
    if any(name not in writers for name in ENGAGEMENT_WRITERS):
        raise ValueError("the tracking capture needs a bench-scale --tracking report (no engagement writes in it)")
    firsts = writers[ENGAGEMENT_WRITERS[0]]["writes"]
    return {
        "command": report.get("command", "python -m bench.scale --tracking"),
        "measured_on": report.get("started_at"),
        "recipients": campaign["recipients"],
        "firsts": firsts,
        "write_units_per_first": {name: round(writers[name]["write_units"] / firsts, 4) for name in ENGAGEMENT_WRITERS},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale_writers",
        description="Write the cost model's measured figures from a bench-scale report.",
    )
    parser.add_argument("report", type=Path, help="bench-scale's JSON (--out)")
    parser.add_argument("--out", type=Path, default=Path("src/sendonce_ops/cost/measured.json"))
    parser.add_argument("--tracking", type=Path, help="a bench-scale --tracking JSON: the engagement writers")
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    ).stdout.strip()
    data = capture(json.loads(args.report.read_text()), commit or "unknown")
    if args.tracking is not None:
        data["tracking"] = tracking_capture(json.loads(args.tracking.read_text()))
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.out}: {', '.join(str(c['recipients']) for c in data['campaigns'])} recipients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
