"""What a campaign costs on AWS, and how much of it is the ledger: `sendonce cost`.

Registered on the main command line by `cli.add_command(cost)` (sendonce_ops/cli.py).
Pure arithmetic from list prices and the counts the benchmark measured (bench/run.py,
docs/benchmarks.md); no AWS call.

Prices are AWS list prices for us-east-1 as of 2026 that have stood for years. They were
not checked against the pricing pages when written (no network): check them before
quoting a figure. Resend bills by plan (a monthly email quota), not through AWS, so a
Resend campaign's provider cost is not in the AWS total.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import click

KB = 1024
SQS_CHUNK_BYTES = 64 * KB  # each 64 KB of a request's payload is billed as one request
SQS_BATCH_ENTRIES = 10
DYNAMODB_ITEM_OVERHEAD_BYTES = 100  # storage counts 100 bytes per item besides its data
GB = 1024**3

PROVIDERS = ("ses", "resend")
MODES = ("single", "batch")
# The consumer's defaults (sendonce/settings.py): SES recipients per second (a new
# production account's MaxSendRate is often 14), Resend requests per second per team.
DEFAULT_SEND_RATE = {"ses": 14.0, "resend": 10.0}


@dataclass(frozen=True)
class Prices:
    """US East (N. Virginia) list prices; check them before quoting (see the module docstring)."""

    as_of: str = "2026 list prices, us-east-1, unverified offline: check the AWS pricing pages"
    lambda_gb_second_arm64: float = 0.0000133334
    lambda_request: float = 0.20 / 1_000_000
    dynamodb_write_request_unit: float = 0.625 / 1_000_000  # on-demand, after the Nov 2024 cut
    dynamodb_read_request_unit: float = 0.125 / 1_000_000
    dynamodb_storage_gb_month: float = 0.25  # Standard table class
    sqs_request: float = 0.40 / 1_000_000  # standard queue, after the free tier
    ses_email: float = 0.10 / 1_000  # outbound email, no attachments


PRICES = Prices()


@dataclass(frozen=True)
class Assumptions:
    """Inputs other than the campaign's size. Defaults: the stack's defaults (infra/config.py,
    sendonce/settings.py) and what the benchmark measured (docs/benchmarks.md)."""

    recipients_per_message: int = 100
    bytes_per_recipient: int = 100  # one recipient in a message body (the benchmark's: 99 B)
    message_envelope_bytes: int = 200
    lambda_memory_mb: int = 512  # arm64
    send_concurrency: int = 8  # provider calls in parallel per invocation
    max_concurrency: int = 2  # concurrent invocations (the event source's MaximumConcurrency)
    send_rate: float | None = None  # emails/s in single mode, requests/s in batch mode; None: the defaults
    provider_latency_s: float = 0.125  # the incident's model: 50-200 ms, uniform
    dynamodb_latency_s: float = 0.005  # one DynamoDB request in-region
    overhead_s_per_message: float = 0.05  # event parsing, the campaign read, logging
    ledger_item_bytes: int = 700  # measured 516 (Resend), 660 (SES), 649 (batch mode): one write unit
    # The shared limiter's conditional ADD per reservation. Single mode at the binding rate the
    # benchmark counted ~1.7 per send (failed reservations on a full second still cost a write
    # unit each); ~0.25 when the rate never binds. Batch mode: one reservation per request.
    limiter_writes_per_send: float = 1.7
    limiter_writes_per_batch_request: float = 2.0

    def rate(self, provider: str) -> float:
        return self.send_rate if self.send_rate is not None else DEFAULT_SEND_RATE[provider]


@dataclass(frozen=True)
class LineItem:
    service: str
    item: str
    quantity: float
    unit: str
    unit_price: float
    share: str  # "ledger": what sendonce's records add; "limiter"; "pipeline": any consumer pays it

    @property
    def cost(self) -> float:
        return self.quantity * self.unit_price

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cost": self.cost}


@dataclass(frozen=True)
class CampaignCost:
    recipients: int
    provider: str
    mode: str
    messages: int
    seconds_per_message: float
    items: list[LineItem]
    storage_gb: float
    storage_per_month: float
    assumptions: Assumptions
    prices: Prices = field(default=PRICES)

    @property
    def aws_total(self) -> float:
        return sum(i.cost for i in self.items)

    def share(self, name: str) -> float:
        return sum(i.cost for i in self.items if i.share == name)

    @property
    def provider_note(self) -> str:
        if self.provider == "ses":
            return "SES is billed per email and included above."
        return "Resend bills by plan (monthly email quota), not through AWS: not included in the AWS total."

    def as_dict(self) -> dict[str, Any]:
        total = self.aws_total
        return {
            "recipients": self.recipients,
            "provider": self.provider,
            "mode": self.mode,
            "messages": self.messages,
            "seconds_per_message": round(self.seconds_per_message, 3),
            "items": [i.as_dict() for i in self.items],
            "aws_total": total,
            "per_1000_recipients": total / self.recipients * 1000,
            "ledger_share": self.share("ledger"),
            "ledger_share_pct": 100 * self.share("ledger") / total if total else 0.0,
            "limiter_share": self.share("limiter"),
            "storage_gb": self.storage_gb,
            "storage_per_month": self.storage_per_month,
            "provider_note": self.provider_note,
            "assumptions": asdict(self.assumptions),
            "prices": asdict(self.prices),
        }


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def seconds_per_message(provider: str, mode: str, a: Assumptions, *, ledger: bool = True) -> float:
    """How long one invocation runs for one message: the provider-bound path, or the
    share of the send rate one of `max_concurrency` invocations gets, whichever is longer."""
    size = a.recipients_per_message
    if mode == "batch":
        # group lookup, BatchGetItem, group put, claim and completion transactions
        path = a.provider_latency_s + (5 * a.dynamodb_latency_s if ledger else 0.0)
        paced = a.max_concurrency / a.rate(provider)  # one request per message
    else:
        ledger_requests = (3 if provider == "ses" else 2) if ledger else 0
        rounds = math.ceil(size / a.send_concurrency)
        path = rounds * (a.provider_latency_s + ledger_requests * a.dynamodb_latency_s)
        paced = size * a.max_concurrency / a.rate(provider)
    return max(path + a.overhead_s_per_message, paced)


def campaign_cost(recipients: int, provider: str, mode: str = "single", *, assumptions: Assumptions | None = None,
                  prices: Prices = PRICES) -> CampaignCost:
    if recipients < 1:
        raise ValueError("recipients must be at least 1")
    if provider not in PROVIDERS:
        raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if mode == "batch" and provider != "resend":
        raise ValueError("batch mode needs Resend (one /emails/batch request per message)")
    a = assumptions or Assumptions()
    p = prices
    n = recipients
    size = a.recipients_per_message
    messages = _ceil_div(n, size)
    body_bytes = size * a.bytes_per_recipient + a.message_envelope_bytes
    body_kb = _ceil_div(body_bytes, KB)
    memory_gb = a.lambda_memory_mb / 1024
    duration = seconds_per_message(provider, mode, a)
    extra_for_ledger = duration - seconds_per_message(provider, mode, a, ledger=False)
    items: list[LineItem] = []

    def add(service: str, item: str, quantity: float, unit: str, unit_price: float, share: str) -> None:
        if quantity:
            items.append(LineItem(service, item, quantity, unit, unit_price, share))

    # Lambda: one invocation per message (BatchSize 1).
    add("Lambda", "invocations", messages, "requests", p.lambda_request, "pipeline")
    add("Lambda", "duration", messages * (duration - extra_for_ledger) * memory_gb, "GB-s", p.lambda_gb_second_arm64,
        "pipeline")
    add("Lambda", "duration added by ledger requests", messages * extra_for_ledger * memory_gb, "GB-s",
        p.lambda_gb_second_arm64, "ledger")

    wru, rru = p.dynamodb_write_request_unit, p.dynamodb_read_request_unit
    item_units = _ceil_div(a.ledger_item_bytes, KB)
    # Publishing: each message's batch record (its body) and the campaign's counter, in one
    # transaction (2 units per item per KB), then the record marked enqueued.
    add("DynamoDB", "batch records (publish transaction)", messages * (2 * body_kb + 2), "WRU", wru, "ledger")
    add("DynamoDB", "batch records marked enqueued", messages * body_kb, "WRU", wru, "ledger")
    if mode == "single":
        writes = 3 if provider == "ses" else 2  # claim, (mark_in_flight,) mark_sent
        add("DynamoDB", f"ledger: {writes} conditional writes per recipient", n * writes * item_units, "WRU", wru, "ledger")
        add("DynamoDB", "limiter reservations", n * a.limiter_writes_per_send, "WRU", wru, "limiter")
    else:
        add("DynamoDB", "ledger: claim + completion transactions (2 units per item)", n * 2 * 2 * item_units, "WRU", wru,
            "ledger")
        add("DynamoDB", "ledger: BatchGetItem before forming a send group", n, "RRU", rru, "ledger")
        add("DynamoDB", "send-group records (put)", messages * body_kb, "WRU", wru, "ledger")
        add("DynamoDB", "send-group lookup (query)", messages, "RRU", rru, "ledger")
        add("DynamoDB", "limiter reservations", messages * a.limiter_writes_per_batch_request, "WRU", wru, "limiter")
    sending_seconds = messages * duration / a.max_concurrency
    # Each environment re-reads the shared throttle factor every 2 s (eventually consistent).
    add("DynamoDB", "limiter state reads", math.ceil(a.max_concurrency * sending_seconds / 2) * 0.5, "RRU", rru, "limiter")
    add("DynamoDB", "campaign state read per message", messages, "RRU", rru, "pipeline")

    send_batches = [min(SQS_BATCH_ENTRIES, messages - start) for start in range(0, messages, SQS_BATCH_ENTRIES)]
    send_requests = sum(_ceil_div(k * body_bytes, SQS_CHUNK_BYTES) for k in send_batches)
    add("SQS", "SendMessageBatch (10 messages, billed per 64 KB)", send_requests, "requests", p.sqs_request, "pipeline")
    add("SQS", "ReceiveMessage (one message per invocation)", messages * _ceil_div(body_bytes, SQS_CHUNK_BYTES), "requests",
        p.sqs_request, "pipeline")
    add("SQS", "DeleteMessageBatch", messages, "requests", p.sqs_request, "pipeline")
    if provider == "ses":
        add("SES", "emails", n, "emails", p.ses_email, "pipeline")

    stored = n * (a.ledger_item_bytes + DYNAMODB_ITEM_OVERHEAD_BYTES) + messages * (body_bytes + DYNAMODB_ITEM_OVERHEAD_BYTES)
    if mode == "batch":
        stored += messages * (body_bytes + DYNAMODB_ITEM_OVERHEAD_BYTES)
    storage_gb = stored / GB
    return CampaignCost(
        recipients=n, provider=provider, mode=mode, messages=messages, seconds_per_message=duration, items=items,
        storage_gb=storage_gb, storage_per_month=storage_gb * p.dynamodb_storage_gb_month, assumptions=a, prices=p,
    )


def _money(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 else f"${value:,.4f}" if value >= 0.0001 else f"${value:.6f}"


def render_text(result: CampaignCost) -> str:
    data = result.as_dict()
    rate = result.assumptions.rate(result.provider)
    rate_unit = "requests/s" if result.mode == "batch" else "emails/s"
    lines = [
        f"Campaign of {result.recipients:,} recipients, {result.provider}, {result.mode} mode: {result.messages:,} messages,"
        f" {result.seconds_per_message:.1f} s of Lambda each (send rate {rate:g} {rate_unit},"
        f" {result.assumptions.max_concurrency} invocations at once)",
        "",
        f"{'service':<9} {'item':<58} {'quantity':>14} {'unit':<9} {'cost':>10}  share",
    ]
    for item in result.items:
        lines.append(f"{item.service:<9} {item.item:<58} {item.quantity:>14,.1f} {item.unit:<9} {_money(item.cost):>10}"
                     f"  {item.share}")
    lines += [
        "",
        f"AWS total          {_money(data['aws_total'])}  ({_money(data['per_1000_recipients'])} per 1,000 recipients)",
        f"  ledger's share   {_money(data['ledger_share'])}  ({data['ledger_share_pct']:.0f} %: ledger table, send groups,"
        " batch records, Lambda time waiting on them)",
        f"  limiter's share  {_money(data['limiter_share'])}",
        f"storage kept       {result.storage_gb * 1024:,.1f} MB: {_money(result.storage_per_month)} per month, every month"
        " (records never expire)",
        result.provider_note,
        f"Prices: {result.prices.as_of}.",
    ]
    return "\n".join(lines)


@click.command("cost")
@click.option("--recipients", type=click.IntRange(min=1), required=True, help="Recipients in the campaign.")
@click.option("--provider", type=click.Choice(PROVIDERS), required=True, help="Email provider.")
@click.option("--mode", type=click.Choice(MODES), default="single", show_default=True,
              help="single: one provider call per recipient; batch: one Resend /emails/batch per message.")
@click.option("--send-rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Shared send rate: emails/s (single) or requests/s (batch). Default: SES 14, Resend 10.")
@click.option("--max-concurrency", type=click.IntRange(min=1), default=2, show_default=True,
              help="Concurrent consumer invocations.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
def cost(recipients: int, provider: str, mode: str, send_rate: float | None, max_concurrency: int, as_json: bool) -> None:
    """Estimate a campaign's AWS cost and the ledger's share of it (list prices; no AWS call)."""
    try:
        result = campaign_cost(
            recipients, provider, mode, assumptions=Assumptions(send_rate=send_rate, max_concurrency=max_concurrency)
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(json.dumps(result.as_dict(), indent=2) if as_json else render_text(result))
