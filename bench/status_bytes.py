"""What one `campaign status` reads from DynamoDB, before (a full read) and after (counters).

    python -m bench.status_bytes [--sizes 1000,10000] [--speed]

For each size: a counted campaign (default 256 ledger shards) is published, every delivery
sent (one through the real ledger adapter, the others copies of its item), the counters'
aggregator drains both streams (sendonce_local.stream_poller), then the same status is read
twice: from the counters, and in full (every batch record and ledger record). Printed per
read: DynamoDB requests, response bytes (the HTTP bodies moto answered) and seconds; and
whether the two reads agree. Not a timed test: a benchmark run by hand (docs/scale.md).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3

from sendonce.adapters.dynamodb.campaigns import DynamoDBCampaignStore
from sendonce.adapters.dynamodb.counters import DynamoDBCounters
from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.ledger_keys import CampaignShards, LedgerKeys
from sendonce.domain.campaigns.status import delivery_status
from sendonce.domain.models import Campaign, Content, DeliveryKey, DeliveryRequest, Receipt, Recipient
from sendonce_local.moto_server import MotoServer, aws_env
from sendonce_local.resources import create_local_resources
from sendonce_local.stream_poller import counters_poller


class ResponseBytes:
    """DynamoDB requests and response body bytes of every call made through a session."""

    def __init__(self, session: boto3.session.Session):
        self.calls: Counter[str] = Counter()
        self.bytes = 0
        self._lock = threading.Lock()
        session.events.register("after-call.dynamodb", self._count)

    def _count(self, http_response: Any, model: Any, **_: Any) -> None:
        with self._lock:
            self.calls[model.name] += 1
            self.bytes += len(http_response.content or b"")

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.bytes = 0


def populate(session: boto3.session.Session, resources: Any, campaign_id: str, size: int) -> None:
    from sendonce.domain.campaigns.ports import CampaignCounters
    from sendonce.domain.campaigns.service import CampaignService

    dynamodb = session.client("dynamodb")
    campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=resources.campaigns_table, counted=True)
    counters: CampaignCounters = DynamoDBCounters(client=dynamodb, table_name=resources.campaigns_table)

    class NoQueue:
        def publish(self, campaign_id: str, bodies: list[str]) -> None:
            pass

    service = CampaignService(
        campaigns=campaigns,
        ledger=None,  # type: ignore[arg-type]
        queue=NoQueue(),  # type: ignore[arg-type]
        provider_names=["resend"],
        counters=counters,
    )
    service.create(
        Campaign(
            campaign_id=campaign_id,
            name="bench",
            provider="resend",
            sender="news@example.com",
            content=Content(subject="Hello {{ name }}", html="<p>Hi {{ name }}</p>", text="Hi {{ name }}"),
        )
    )
    recipients = [
        Recipient(recipient_id=f"r{i:07d}", email=f"user{i}@example.com", variables={"name": f"User {i}"})
        for i in range(size)
    ]
    service.publish(campaign_id, recipients)
    # One delivery claimed and sent through the real ledger adapter; the others are copies
    # of its item under their own keys (same attributes, same size), written 25 per request:
    # the reads measured see what a sent campaign holds, without waiting for moto to take
    # two conditional writes per recipient.
    ledger = DynamoDBLedger(client=dynamodb, table_name=resources.ledger_table, shards_of=CampaignShards(campaigns.get))
    now = int(time.time() * 1000)
    first = recipients[0]
    request = DeliveryRequest(
        campaign_id=campaign_id,
        recipient_id=first.recipient_id,
        batch_id="b",
        email=first.email,
        variables=first.variables,
        owner="bench",
        provider="resend",
        provider_idempotent=True,
    )
    ledger.claim(request, payload_hash="h" * 64, lease_until_ms=now + 600_000, now_ms=now)
    ledger.mark_sent(request.key, owner="bench", receipt=Receipt(provider_message_id="m" * 36))
    keys = LedgerKeys(CampaignShards(campaigns.get))
    template = dynamodb.get_item(TableName=resources.ledger_table, Key=keys.key(request.key))["Item"]

    def copies(chunk: list[Recipient]) -> None:
        items = [
            {
                "PutRequest": {
                    "Item": {**template, **keys.key(DeliveryKey(campaign_id=campaign_id, recipient_id=r.recipient_id))}
                }
            }
            for r in chunk
        ]
        while items:
            response = dynamodb.batch_write_item(RequestItems={resources.ledger_table: items})
            items = response.get("UnprocessedItems", {}).get(resources.ledger_table, [])

    chunks = [recipients[i : i + 25] for i in range(1, size, 25)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(copies, chunks))


def measure(size: int, session: boto3.session.Session, resources: Any, meter: ResponseBytes) -> dict[str, Any]:
    campaign_id = f"bench{size}"
    started = time.monotonic()
    populate(session, resources, campaign_id, size)
    populated = time.monotonic() - started
    started = time.monotonic()
    counters_poller(session, ledger_table=resources.ledger_table, campaigns_table=resources.campaigns_table).drain(
        max_seconds=3600
    )
    drained = time.monotonic() - started
    dynamodb = session.client("dynamodb")
    campaigns = DynamoDBCampaignStore(client=dynamodb, table_name=resources.campaigns_table)
    ledger = DynamoDBLedger(client=dynamodb, table_name=resources.ledger_table, shards_of=CampaignShards(campaigns.get))
    counters = DynamoDBCounters(client=dynamodb, table_name=resources.campaigns_table)
    figures: dict[str, Any] = {"recipients": size, "populate_s": round(populated, 1), "aggregate_s": round(drained, 1)}
    compared, status = compare_status_reads(campaigns, ledger, counters, campaign_id, meter)
    return {**figures, **compared, "sent": status.sent}


def compare_status_reads(campaigns: Any, ledger: Any, counters: Any, campaign_id: str, meter: Any) -> tuple[dict, Any]:
    """One status read from the counters and one in full, each metered (requests, response
    bytes, seconds), and whether they agree; with the counters' status."""
    figures: dict[str, Any] = {}
    statuses = {}
    for name, source in (("counters", counters), ("full_read", None)):
        meter.reset()
        started = time.monotonic()
        statuses[name] = delivery_status(campaigns, ledger, campaign_id, source)
        figures[name] = {
            "requests": sum(meter.calls.values()),
            "bytes": meter.bytes,
            "seconds": round(time.monotonic() - started, 2),
        }
    figures["agree"] = statuses["counters"] == statuses["full_read"]
    return figures, statuses["counters"]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.status_bytes", description=__doc__)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--speed", action="store_true", help="moto with the demo's speed patches")
    args = parser.parse_args()
    with MotoServer(speed_patches=args.speed) as moto:
        os.environ.update(aws_env(moto.endpoint))
        session = boto3.session.Session()
        meter = ResponseBytes(session)
        resources = create_local_resources(session, streams=True)
        rows = []
        for size in (int(s) for s in args.sizes.split(",")):
            row = measure(size, session, resources, meter)
            rows.append(row)
            print(row, flush=True)
        if len(rows) > 1:
            first, last = rows[0], rows[-1]
            for name in ("counters", "full_read"):
                ratio = last[name]["bytes"] / max(1, first[name]["bytes"])
                print(f"{name}: {last['recipients'] // first['recipients']}x the recipients, {ratio:.2f}x the bytes")


if __name__ == "__main__":
    main()
