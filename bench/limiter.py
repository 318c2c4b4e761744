"""`make bench-limiter`: what the shared limiter's key costs per send, from 4 to 10,000 sends a second.

    python -m bench.limiter [--slots 6] [--scenarios all|NAME,…] [--out bench-limiter.json]

The real `DynamoDBRateLimiter` against a DynamoDB table in moto's server, its consumers as
threads on one virtual timeline (`sendonce_local/limiter_run.py`): each scenario runs Lambda
instances of `threads` send threads (one limiter each, as the consumer shares one among its
threads), each thread taking `send_s` (virtual) per send, for campaigns of equal weight. The
write-unit accountant (`sendonce_local/write_units.py`) counts every write to the limiter's
key, `limiter#resend`, refused conditional writes included.

For each scenario: places a second once every instance is under way (from the second slot),
the limiter's writes and write units per send over the whole run, its write units a second,
the ceiling the key sets (sends a second at which it would take a partition's 1,000 units),
and Jain's index of the campaigns' places. Time is the virtual clock's, so the figures are
counts: the same on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import boto3

from bench.cold_start import machine
from sendonce.domain.sending.shares import Claimant, jain
from sendonce_local.limiter_run import run_consumers
from sendonce_local.moto_server import REGION, MotoServer
from sendonce_local.write_units import PARTITION_WRITE_UNITS_PER_SECOND, WriteUnitAccountant

LIMITER_KEY = "limiter#resend"


@dataclass(frozen=True)
class Scenario:
    name: str
    rate: float  # the provider's rate, sends a second
    instances: int  # Lambda instances, one limiter each
    threads: int  # send threads an instance
    campaigns: int  # campaigns of equal weight; instance k serves campaign k % campaigns
    send_s: float  # one send, virtual seconds
    reserve: float = 0.0


SCENARIOS = (
    # bench-fair's single-mode rounds: Resend's 5/s less one in reserve, one thread a message
    Scenario("resend-5", rate=5, instances=6, threads=1, campaigns=4, send_s=0.2, reserve=1),
    Scenario("ses-100", rate=100, instances=4, threads=8, campaigns=2, send_s=0.08),
    Scenario("ses-1000", rate=1_000, instances=20, threads=8, campaigns=4, send_s=0.08),
    Scenario("ses-10000", rate=10_000, instances=150, threads=8, campaigns=4, send_s=0.08),
)


@dataclass(frozen=True)
class Figures:
    scenario: str
    rate: float
    consumers: str
    campaigns: int
    sends: int
    sends_per_s: float
    writes: int
    units: int
    writes_per_send: float
    units_per_send: float
    units_per_s: float
    ceiling_sends_per_s: float
    jain: float


def measure(client: Any, reader: Any, table: str, scenario: Scenario, *, slots: int, start: float) -> Figures:
    """One scenario on `table`, its writes counted by an accountant reading with `reader`."""
    accountant = WriteUnitAccountant(reader)
    accountant.attach(client)
    names = [f"c{k}" for k in range(scenario.campaigns)]
    claimants: list[Claimant | None] = [Claimant(names[k % len(names)]) for k in range(scenario.instances)]
    per_slot = run_consumers(
        client,
        table,
        claimants,
        rate=scenario.rate,
        slots=slots,
        start=start,
        reserve=scenario.reserve,
        threads=scenario.threads,
        send_s=scenario.send_s,
        stagger=min(0.001, 0.5 / (scenario.instances * scenario.threads)),
    )
    steady: Counter[str] = Counter()
    for got in per_slot[1:]:
        steady.update(got)
    sends = sum(sum(got.values()) for got in per_slot)
    key = [k for k in accountant.hottest(table, n=None) if k.partition == LIMITER_KEY]
    units = key[0].units if key else 0
    writes = key[0].writes if key else 0
    return Figures(
        scenario=scenario.name,
        rate=scenario.rate,
        consumers=f"{scenario.instances} × {scenario.threads}",
        campaigns=scenario.campaigns,
        sends=sends,
        sends_per_s=round(sum(steady.values()) / max(1, slots - 1), 1),
        writes=writes,
        units=units,
        writes_per_send=round(writes / max(1, sends), 4),
        units_per_send=round(units / max(1, sends), 4),
        units_per_s=round(units / slots, 1),
        ceiling_sends_per_s=round(PARTITION_WRITE_UNITS_PER_SECOND * sends / units) if units else 0,
        jain=round(jain(steady[name] for name in names), 3),
    )


def create_table(client: Any, name: str) -> None:
    client.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
    )


def table_lines(figures: list[Figures]) -> list[str]:
    lines = [
        "| scenario | rate | instances × threads | campaigns | sends/s | limiter writes / send | units / send | units/s | key's ceiling (sends/s) | Jain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        lines.append(
            f"| {f.scenario} | {f.rate:g} | {f.consumers} | {f.campaigns} | {f.sends_per_s:g} | {f.writes_per_send:.3f} | "
            f"{f.units_per_send:.3f} | {f.units_per_s:g} | {f.ceiling_sends_per_s:,} | {f.jain:.3f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.limiter", description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=6, help="virtual seconds a scenario runs")
    parser.add_argument("--scenarios", default="all", help="comma-separated names, or all")
    parser.add_argument("--out", type=Path, default=Path("bench-limiter.json"))
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if args.scenarios == "all" or s.name in args.scenarios.split(",")]
    if not chosen:
        parser.error(f"--scenarios: none of {args.scenarios!r}; known: {', '.join(s.name for s in SCENARIOS)}")
    figures = []
    with MotoServer() as server:
        options = {"endpoint_url": server.endpoint, "region_name": REGION}
        options |= {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        client, reader = boto3.client("dynamodb", **options), boto3.client("dynamodb", **options)
        for k, scenario in enumerate(chosen):
            table = f"limiter-bench-{k}"
            create_table(reader, table)
            print(f"[bench-limiter] {scenario.name}", file=sys.stderr, flush=True)
            figures.append(measure(client, reader, table, scenario, slots=args.slots, start=2_000_000_000.0))
    print("\n".join(table_lines(figures)))
    args.out.write_text(
        json.dumps({"machine": machine(), "slots": args.slots, "scenarios": [asdict(f) for f in figures]}, indent=2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
