"""What the counters' aggregator writes per recipient when its stream batches are shaped as a
deployed table's would be at a campaign's sending rate.

    python -m bench.stream_replay RECORDS.jsonl [--rates 88,1000,10000] [--campaign ID] [--out stream-replay.json]

RECORDS.jsonl is the stream records as the aggregator was handed them
(`python -m bench.scale --sizes 10000 --capture-stream RECORDS.jsonl`); one campaign's are
replayed: `--campaign`, or the last one in the file (bench-scale's largest size).

Why: bench-scale runs on moto, which gives each table's stream one shard, and sends ~90
recipients/s, so every aggregator batch spans all 256 ledger shards of the campaign with a
few records each, and the aggregator writes a counter item (and the report's items) about
once per record. The aggregator's writes are per (partition-key value, batch), not per
record: a table taking `R × W` write units/s has at least `R × W / 1,000` partitions, each
with a stream shard of its own, and the mapping hands over one stream shard's records at a
time. So at a higher rate a batch holds fewer ledger shards and more records of each.

How: one run per rate. The stack is deployed into a fresh moto (the demo's), the campaign is
created under its own id, and the captured records are replayed through the real aggregator
(handler, domain service, DynamoDB adapter), batched as the mapping would batch them:
each record goes to stream shard `BLAKE2b(partition key) mod P` of its table; the campaign's
timeline is compressed to `recipients / R` seconds (record times scaled, order kept); a
shard's batch closes at the mapping's batch size or batching window, whichever comes first;
batches are applied in the order they close, each record's creation time set to its new
time (the report's minutes follow it). Every DynamoDB write is counted per partition-key
value (`WriteUnitAccountant`). At the end the counters must equal the ledger's final states
in the records (and the published count the distinct recipients): `exact`.

`--domains N` gives the recipients N domains instead of the captured ones (bench-scale's
are all one domain), drawn by rank from a Zipf mix (the k-th domain ∝ 1/k; recipient by
recipient, the same domain for every event of a recipient): the report keeps an item per
domain, so its writes per batch grow with the domains a batch touches.

P, unless given: `max(1, ceil(R × W / 1,000))`, the fewest partitions that can take the
campaign's ledger writes (W = `--ledger-write-units`, bench-scale's 8.0 per recipient with
events). DynamoDB may well have more (a table splits as it grows): more shards, fewer ledger
shards per batch, so fewer writes. Only the aggregator's writes are counted: the records'
own writes (the consumer's, the events function's) are the same at any rate.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import itertools
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from bench.core import machine
from bench.run import stdout_to_devnull
from bench.scale_figures import key_kinds
from bench.scale_stack import SENDER_DOMAIN, bench_campaign
from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.contract import AGGREGATOR_BATCH_SIZE, AGGREGATOR_BATCHING_WINDOW_SECONDS
from sendonce.domain.sending.shards import shard_of
from sendonce.settings import ApiSettings
from sendonce.wiring.api import build_campaign_service
from sendonce.wiring.clients import clients
from sendonce_local.demo.stack import DeployedConsumer, deploy_stack
from sendonce_local.moto_server import DemoMotoServer, aws_env
from sendonce_local.poller import LocalLambdaContext
from sendonce_local.request_counter import RequestCounter
from sendonce_local.stream_poller import aggregator_handler
from sendonce_local.write_units import PARTITION_WRITE_UNITS_PER_SECOND, WriteUnitAccountant

DEFAULT_RATES = (88.0, 1_000.0, 10_000.0)
LEDGER_WRITE_UNITS = 8.0  # per recipient, batch mode with `sent` and `delivered` (bench-scale)

Record = dict[str, Any]


@dataclass(frozen=True)
class Shape:
    """How a deployed mapping would batch the records: at `rate` recipients/s, over `shards`
    stream shards per table."""

    rate: float
    shards: int
    batch_size: int = AGGREGATOR_BATCH_SIZE
    window_s: float = float(AGGREGATOR_BATCHING_WINDOW_SECONDS)


@dataclass(frozen=True)
class Batch:
    closes_at: float  # seconds from the campaign's first record
    stream: tuple[str, int]  # (stream ARN, shard)
    records: tuple[Record, ...]


def shards_for(rate: float, ledger_write_units: float) -> int:
    """The fewest partitions that take the campaign's ledger writes at `rate`."""
    return max(1, math.ceil(rate * ledger_write_units / PARTITION_WRITE_UNITS_PER_SECOND))


def partition_key(record: Record) -> str:
    keys = record["dynamodb"]["Keys"]
    value = keys.get("campaign_id") or keys.get("pk")
    if value is None:
        raise ValueError(f"a stream record without a partition key: {sorted(keys)}")
    return str(value["S"])


def recipients_in(records: Iterable[Record]) -> int:
    """Distinct recipients in the ledger's records."""
    return len({r["dynamodb"]["Keys"]["recipient_id"]["S"] for r in records if "recipient_id" in r["dynamodb"]["Keys"]})


def batches(records: list[Record], shape: Shape, recipients: int) -> list[Batch]:
    """The records as the mapping would hand them over at `shape`, in the order the batches
    close; each record a copy whose creation time is its place on the compressed timeline."""
    if not records:
        return []
    started = [float(r["dynamodb"]["ApproximateCreationDateTime"]) for r in records]
    first, last = min(started), max(started)
    scale = (recipients / shape.rate) / (last - first) if last > first else 0.0
    per_shard: dict[tuple[str, int], list[tuple[float, Record]]] = {}
    latest: dict[tuple[str, int], float] = {}
    for record, at in zip(records, started, strict=True):
        stream = (record["eventSourceARN"], shard_of(partition_key(record), shape.shards))
        # A shard's records keep their order: time never goes back within one.
        moved = max((at - first) * scale, latest.get(stream, 0.0))
        latest[stream] = moved
        copy = {**record, "dynamodb": {**record["dynamodb"], "ApproximateCreationDateTime": first + moved}}
        per_shard.setdefault(stream, []).append((moved, copy))
    out: list[Batch] = []
    for stream, timed in per_shard.items():
        i = 0
        while i < len(timed):
            opened = timed[i][0]
            j = i
            while j < len(timed) and j - i < shape.batch_size and timed[j][0] <= opened + shape.window_s:
                j += 1
            closes = timed[j - 1][0] if j - i == shape.batch_size else opened + shape.window_s
            out.append(Batch(closes_at=closes, stream=stream, records=tuple(r for _, r in timed[i:j])))
            i = j
    return sorted(out, key=lambda b: b.closes_at)


def expected_counts(records: Iterable[Record]) -> tuple[dict[str, int], int]:
    """The ledger's final state per recipient, counted; and the distinct recipients published."""
    final: dict[tuple[str, str], str] = {}
    published: set[str] = set()
    for record in records:
        data = record["dynamodb"]
        keys = data["Keys"]
        if "recipient_id" in keys:
            key = (keys["campaign_id"]["S"], keys["recipient_id"]["S"])
            state = (data.get("NewImage") or {}).get("state", {}).get("S")
            if state is None:
                final.pop(key, None)
            else:
                final[key] = state
        elif record.get("eventName") == "INSERT" and "body" in (data.get("NewImage") or {}):
            body = json.loads(data["NewImage"]["body"]["S"])
            published.update(r["recipient_id"] for r in body["recipients"])
    return dict(Counter(final.values())), len(published)


def groups_in(batch: Batch) -> int:
    """Counter writes the batch makes at most: one per (campaign, partition-key value)."""
    return len({partition_key(r) for r in batch.records})


class ZipfDomains:
    """A recipient's domain, one of `count`, the k-th with weight 1/k; the same per recipient."""

    def __init__(self, count: int):
        self.count = count
        self._cumulative = list(itertools.accumulate(1 / k for k in range(1, count + 1)))

    def of(self, recipient_id: str) -> str:
        digest = hashlib.blake2b(recipient_id.encode(), digest_size=8).digest()
        u = int.from_bytes(digest, "big") / 2**64 * self._cumulative[-1]
        return f"d{bisect.bisect_left(self._cumulative, u)}.example.com"


def with_domains(records: list[Record], domains: ZipfDomains) -> list[Record]:
    """The records with every provider event's domain re-drawn for its recipient."""

    def redrawn(image: dict[str, Any] | None, domain: str) -> dict[str, Any] | None:
        if not image or "provider_events" not in image:
            return image
        events = [
            {"M": {**{k: v for k, v in e["M"].items() if k != "domain"}, "d": {"S": domain}}} if "M" in e else e
            for e in image["provider_events"]["L"]
        ]
        return {**image, "provider_events": {"L": events}}

    out = []
    for record in records:
        data = record["dynamodb"]
        recipient = data["Keys"].get("recipient_id", {}).get("S")
        if recipient is None:
            out.append(record)
            continue
        domain = domains.of(recipient)
        changed = {**data}
        for side in ("OldImage", "NewImage"):
            if side in data:
                changed[side] = redrawn(data[side], domain)
        out.append({**record, "dynamodb": changed})
    return out


def campaign_of(record: Record) -> str:
    """The campaign a record belongs to: a ledger key `<campaign>#<shard>`, a batch record's
    `campaign#<campaign>#b<k>`."""
    keys = record["dynamodb"]["Keys"]
    if "campaign_id" in keys:
        return str(keys["campaign_id"]["S"]).split("#", 1)[0]
    return str(keys["pk"]["S"]).split("#")[1]


def campaign_of_records(records: Iterable[Record]) -> str:
    for record in records:
        if "recipient_id" in record["dynamodb"]["Keys"]:
            return campaign_of(record)
    raise ValueError("no ledger record: nothing to replay")


def of_campaign(records: list[Record], campaign_id: str | None) -> list[Record]:
    """The records of one campaign: `campaign_id`, or the last one the file names (a
    bench-scale capture holds its per-message campaigns and each size, the largest last)."""
    if not records:
        return records
    chosen = campaign_id or campaign_of(records[-1])
    return [r for r in records if campaign_of(r) == chosen]


def replay(records: list[Record], shape: Shape, say: Callable[[str], None]) -> dict[str, Any]:
    campaign_id = campaign_of_records(records)
    recipients = recipients_in(records)
    planned = batches(records, shape, recipients)
    moto = DemoMotoServer().start()
    try:
        os.environ.update(aws_env(moto.endpoint))
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            os.environ.pop(name, None)
        outputs = deploy_stack(moto.endpoint, context={"provider": "resend", "sender_domain": SENDER_DOMAIN})
        plain = boto3.session.Session()
        deployed = DeployedConsumer.read(plain, outputs)
        functions = {
            f["Handler"]: f.get("Environment", {}).get("Variables", {})
            for f in plain.client("lambda").list_functions()["Functions"]
        }
        operator = build_campaign_service(
            ApiSettings.from_env(functions["sendonce.handlers.api.lambda_handler"]),
            clients(),
            operator="sendonce stream-replay",
        )
        # The campaign as bench-scale created it: its counter keys recorded with it.
        operator.create(bench_campaign(campaign_id, f"stream replay {campaign_id}"))
        session = boto3.session.Session()
        accountant = WriteUnitAccountant(plain.client("dynamodb"))
        accountant.attach(session)
        requests = RequestCounter(session)
        handler = aggregator_handler(session, deployed.campaigns_table)
        context = LocalLambdaContext(
            function_name="sendonce-aggregator",
            invoked_function_arn="arn:aws:lambda:us-east-1:000000000000:function:sendonce-aggregator",
            timeout_s=300.0,
        )
        say(
            f"{shape.rate:g} recipients/s: {len(records):,} records in {len(planned):,} batches "
            f"over {shape.shards} stream shard(s) per table"
        )
        started = time.monotonic()
        for batch in planned:
            handler({"Records": list(batch.records)}, context)
        seconds = time.monotonic() - started
        totals = DynamoDBCounters(client=plain.client("dynamodb"), table_name=deployed.campaigns_table).totals(
            campaign_id
        )
    finally:
        moto.stop()
    expected_states, expected_published = expected_counts(records)
    counted_states = {s.value: n for s, n in totals.counts.states.items() if n} if totals else {}
    counted_published = totals.counts.published if totals else 0
    [hottest] = accountant.hottest(None, 1) or [None]
    groups = sum(groups_in(b) for b in planned)
    return {
        "rate_recipients_per_s": shape.rate,
        "stream_shards_per_table": shape.shards,
        "recipients": recipients,
        "records": len(records),
        "invocations": len(planned),
        "records_per_invocation": round(len(records) / len(planned), 1) if planned else 0,
        "records_per_counter_write": round(len(records) / groups, 2) if groups else 0,
        "write_units_per_recipient": round(accountant.total() / recipients, 3),
        "write_units_per_recipient_by_key_kind": key_kinds(accountant.hottest(None, None), recipients, campaign_id),
        "hottest_key": hottest.partition if hottest else None,
        "hottest_write_units_per_recipient": round(hottest.per_recipient(recipients), 4) if hottest else None,
        "dynamodb_requests_per_recipient": round(requests.total("dynamodb") / recipients, 3),
        "exact": counted_states == expected_states and counted_published == expected_published,
        "counted": {"states": counted_states, "published": counted_published},
        "expected": {"states": expected_states, "published": expected_published},
        "replay_seconds": round(seconds, 1),
    }


def read_records(path: Path) -> list[Record]:
    records = []
    with path.open() as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{number}: not a JSON stream record ({exc.msg})") from None
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stream_replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, help="JSON lines from `bench.scale --capture-stream`")
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in DEFAULT_RATES), help="recipients/s")
    parser.add_argument("--shards", type=int, default=None, help="stream shards per table (default: from the rate)")
    parser.add_argument("--ledger-write-units", type=float, default=LEDGER_WRITE_UNITS)
    parser.add_argument("--domains", type=int, default=None, help="re-draw the recipients' domains from N (Zipf)")
    parser.add_argument("--campaign", default=None, help="the campaign to replay (default: the last one in the file)")
    parser.add_argument("--out", type=Path, default=Path("stream-replay.json"))
    args = parser.parse_args(argv)
    try:
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates: comma-separated recipients per second, not {args.rates!r}")
    if any(r <= 0 for r in rates):
        parser.error("--rates: each rate must be above 0")
    if args.shards is not None and args.shards < 1:
        parser.error("--shards: at least 1")
    if not args.records.is_file():
        parser.error(f"{args.records}: no such file")
    if args.domains is not None and args.domains < 1:
        parser.error("--domains: at least 1")
    records = of_campaign(read_records(args.records), args.campaign)
    try:
        campaign_of_records(records)
    except ValueError as exc:
        parser.error(f"{args.records}, campaign {args.campaign or 'the last one'}: {exc}")
    if args.domains:
        records = with_domains(records, ZipfDomains(args.domains))

    def say(message: str) -> None:
        print(f"[stream-replay {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    runs = []
    with stdout_to_devnull():
        for rate in rates:
            shards = args.shards or shards_for(rate, args.ledger_write_units)
            runs.append(replay(records, Shape(rate=rate, shards=shards), say))
            say(
                f"{rate:g}/s: {runs[-1]['write_units_per_recipient']} write units per recipient, "
                f"{runs[-1]['records_per_counter_write']} records per counter write, exact {runs[-1]['exact']}"
            )
    result = {
        "runs": runs,
        "config": {
            "batch_size": AGGREGATOR_BATCH_SIZE,
            "batching_window_s": float(AGGREGATOR_BATCHING_WINDOW_SECONDS),
            "ledger_write_units": args.ledger_write_units,
            "domains": args.domains or "as captured",
        },
        "machine": machine(),
    }
    text = json.dumps(result, indent=2)
    args.out.write_text(text + "\n")
    print(text)
    return 0 if all(r["exact"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
