"""What a campaign costs on AWS, and how much of it is the ledger: `sendonce cost`.

Registered on the main command line by `cli.add_command(cost)` (sendonce_ops/cli.py).
Pure arithmetic from list prices and the counts the benchmark measured (bench/run.py,
docs/benchmarks.md); no AWS call.

Every price, its source and date, and which are unconfirmed, are in one table in
docs/benchmarks.md ("What a campaign costs"); `PRICE_SOURCES` below holds the same rows.
What each provider charges, and whether through AWS, is its folder's (`Provider.billing`,
sendonce/adapters/providers/); the providers, their default rates, which send batches and
how their events arrive come from the provider registry.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import click

from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import Plan, Provider

KB = 1024
SQS_CHUNK_BYTES = 64 * KB  # each 64 KB of a request's payload is billed as one request
SQS_BATCH_ENTRIES = 10
DYNAMODB_ITEM_OVERHEAD_BYTES = 100  # storage counts 100 bytes per item besides its data
GB = 1024**3

REGISTERED = registry.registered()
PROVIDERS = tuple(REGISTERED)
MODES = ("single", "batch")
# The consumer's defaults (each provider's settings): its rate less the reserve the
# limiter keeps (SES 14 recipients/s; Resend's default team limit 5 requests/s less 1).
DEFAULT_SEND_RATE = {name: provider.default_rate() for name, provider in REGISTERED.items()}
# The providers billed per email under a plan (`--<provider>-plan`, e.g. --ses-plan).
PLANNED = {name: p for name, p in REGISTERED.items() if p.billing.plans}
HOURS_PER_MONTH = 730  # CloudWatch prorates a metric by the hour


@dataclass(frozen=True)
class Prices:
    """US East (N. Virginia) list prices; sources and dates in PRICE_SOURCES."""

    as_of: str = (
        "us-east-1 list prices as last known (2025) and not re-checked offline; SES plan prices unconfirmed;"
        " see docs/benchmarks.md, 'What a campaign costs'"
    )
    lambda_gb_second_arm64: float = 0.0000133334
    lambda_request: float = 0.20 / 1_000_000
    dynamodb_write_request_unit: float = 0.625 / 1_000_000  # on-demand, after the Nov 2024 cut
    dynamodb_read_request_unit: float = 0.125 / 1_000_000
    dynamodb_storage_gb_month: float = 0.25  # Standard table class
    sqs_request: float = 0.40 / 1_000_000  # standard queue, after the free tier
    api_gateway_http_request: float = 1.00 / 1_000_000  # HTTP API, first 300 M a month, per 512 KB
    eventbridge_event: float = 1.00 / 1_000_000  # an event published to a bus (see PRICE_SOURCES)
    cloudwatch_logs_ingested_gb: float = 0.50  # Standard log class
    cloudwatch_logs_stored_gb_month: float = 0.03
    cloudwatch_metric_month: float = 0.30  # a custom metric (EMF creates them), first 10,000


@dataclass(frozen=True)
class PriceSource:
    price: str
    figure: str
    source: str
    as_of: str
    confirmed: bool


# One row per price: docs/benchmarks.md prints the same table (tests/unit/test_cost.py checks it).
# The providers' own rows (what they charge per email) come from their folders.
AWS_PRICE_SOURCES: tuple[PriceSource, ...] = (
    PriceSource("lambda_request", "$0.20 per 1M requests", "aws.amazon.com/lambda/pricing, us-east-1", "2025", False),
    PriceSource(
        "lambda_gb_second_arm64", "$0.0000133334 per GB-s (arm64)", "aws.amazon.com/lambda/pricing", "2025", False
    ),
    PriceSource(
        "dynamodb_write_request_unit",
        "$0.625 per 1M WRU (on-demand)",
        "aws.amazon.com/dynamodb/pricing (Nov 2024 cut)",
        "2024-11",
        False,
    ),
    PriceSource(
        "dynamodb_read_request_unit",
        "$0.125 per 1M RRU (on-demand)",
        "aws.amazon.com/dynamodb/pricing",
        "2024-11",
        False,
    ),
    PriceSource(
        "dynamodb_storage_gb_month", "$0.25 per GB-month (Standard)", "aws.amazon.com/dynamodb/pricing", "2025", False
    ),
    PriceSource(
        "sqs_request", "$0.40 per 1M requests (standard, per 64 KB)", "aws.amazon.com/sqs/pricing", "2025", False
    ),
    PriceSource(
        "api_gateway_http_request",
        "$1.00 per 1M HTTP API requests (first 300M/month)",
        "aws.amazon.com/api-gateway/pricing",
        "2025",
        False,
    ),
    PriceSource(
        "eventbridge_event",
        "$1.00 per 1M events published",
        "aws.amazon.com/eventbridge/pricing; events AWS "
        "services publish to the default bus may be free: SES's event destination may cost nothing here",
        "2025",
        False,
    ),
    PriceSource(
        "cloudwatch_logs_ingested_gb",
        "$0.50 per GB ingested (Standard)",
        "aws.amazon.com/cloudwatch/pricing",
        "2025",
        False,
    ),
    PriceSource(
        "cloudwatch_logs_stored_gb_month",
        "$0.03 per GB-month stored",
        "aws.amazon.com/cloudwatch/pricing",
        "2025",
        False,
    ),
    PriceSource(
        "cloudwatch_metric_month",
        "$0.30 per metric-month, prorated by the hour (first 10,000)",
        "aws.amazon.com/cloudwatch/pricing",
        "2025",
        False,
    ),
)
PRICE_SOURCES: tuple[PriceSource, ...] = AWS_PRICE_SOURCES + tuple(
    PriceSource(*row) for provider in REGISTERED.values() for row in provider.billing.price_sources
)


def resolve_plan(provider: str, name: str, *, per_1000: float | None = None, monthly_fee: float | None = None) -> Plan:
    """The provider's pricing plan with the caller's figures; an unconfirmed plan needs them."""
    return REGISTERED[provider].billing.plan(name, per_1000=per_1000, monthly_fee=monthly_fee)


PRICES = Prices()


@dataclass(frozen=True)
class Assumptions:
    """Inputs other than the campaign's size. Defaults: the stack's defaults (sendonce_cdk/config.py,
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
    # The events pipeline: per email, SES publishes Send and then Delivery or Bounce (and
    # Complaint) to EventBridge, one events-function invocation each; Resend posts
    # email.sent and email.delivered / email.bounced (and email.complained) webhooks, each an
    # API Gateway request and an invocation. Opens and clicks only if tracking is enabled
    # (the stack's configuration set does not publish them).
    bounce_rate: float = 0.02
    complaint_rate: float = 0.001
    open_rate: float = 0.0  # opens per email when open tracking is on (e.g. 0.3)
    click_rate: float = 0.0
    events_lambda_memory_mb: int = 256  # sendonce_cdk/function.py's default, arm64
    events_invocation_s: float = 0.03  # parse, dedupe record, ledger update: a few DynamoDB requests
    event_write_units: float = 2.0  # the event's dedupe record and the delivery's update (assumed)
    # CloudWatch Logs: what each invocation writes. Platform START/END/REPORT lines ~300 B;
    # the consumer's "batch processed" line measured 565 B (a local run); the events
    # function's "provider event" line ~500 B; one EMF document ~230 B with one metric
    # (Powertools 3.37.0, measured).
    log_bytes_per_consumer_invocation: int = 300 + 565 + 250
    log_bytes_per_event_invocation: int = 300 + 500 + 240
    log_retention_months: float = 1.0
    custom_metrics: int = 8  # metric names the functions publish during a campaign (EmailsSent, ...)

    def rate(self, provider: str) -> float:
        return self.send_rate if self.send_rate is not None else DEFAULT_SEND_RATE[provider]

    def events_per_email(self) -> float:
        """Provider events per email: sent, then delivered or bounced, complaints, opens, clicks."""
        return 2.0 + self.complaint_rate + self.open_rate + self.click_rate


@dataclass(frozen=True)
class LineItem:
    service: str
    item: str
    quantity: float
    unit: str
    unit_price: float
    # "ledger": what sendonce's records add; "limiter"; "pipeline": any consumer pays it;
    # "events": the provider events' pipeline; "observability": logs and metrics
    share: str

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
    plan: Plan | None = None  # the provider's pricing plan, when it bills through AWS
    sending_hours: float = 0.0

    @property
    def aws_total(self) -> float:
        return sum(i.cost for i in self.items)

    def share(self, name: str) -> float:
        return sum(i.cost for i in self.items if i.share == name)

    @property
    def provider_note(self) -> str:
        provider = REGISTERED[self.provider]
        if self.plan is None:
            return provider.billing.note
        fee = f"; the plan's ${self.plan.monthly_fee:,.2f} a month is not in the total" if self.plan.monthly_fee else ""
        return (
            f"{provider.title} is billed per email and included above: plan {self.plan.name},"
            f" ${self.plan.per_1000:g} per 1,000 ({self.plan.note}){fee}."
        )

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
            "events_share": self.share("events"),
            "observability_share": self.share("observability"),
            "sending_hours": self.sending_hours,
            **{f"{name}_plan": asdict(self.plan) if name == self.provider and self.plan else None for name in PLANNED},
            "provider_note": self.provider_note,
            "assumptions": asdict(self.assumptions),
            "prices": asdict(self.prices),
        }


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def ledger_writes_per_send(provider: str) -> int:
    """claim, mark_sent, and mark_in_flight before a send no idempotency key covers."""
    return 2 if REGISTERED[provider].capabilities.idempotent else 3


def seconds_per_message(provider: str, mode: str, a: Assumptions, *, ledger: bool = True) -> float:
    """How long one invocation runs for one message: the provider-bound path, or the
    share of the send rate one of `max_concurrency` invocations gets, whichever is longer."""
    size = a.recipients_per_message
    if mode == "batch":
        # group lookup, BatchGetItem, group put, claim and completion transactions
        path = a.provider_latency_s + (5 * a.dynamodb_latency_s if ledger else 0.0)
        paced = a.max_concurrency / a.rate(provider)  # one request per message
    else:
        ledger_requests = ledger_writes_per_send(provider) if ledger else 0
        rounds = math.ceil(size / a.send_concurrency)
        path = rounds * (a.provider_latency_s + ledger_requests * a.dynamodb_latency_s)
        paced = size * a.max_concurrency / a.rate(provider)
    return max(path + a.overhead_s_per_message, paced)


def campaign_cost(
    recipients: int,
    provider: str,
    mode: str = "single",
    *,
    assumptions: Assumptions | None = None,
    prices: Prices = PRICES,
    plan: Plan | None = None,
) -> CampaignCost:
    if recipients < 1:
        raise ValueError("recipients must be at least 1")
    if provider not in PROVIDERS:
        raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if mode == "batch" and not REGISTERED[provider].capabilities.sends_batches:
        raise ValueError(
            f"batch mode needs a provider that sends batches ({', '.join(registry.batch_names(REGISTERED))}):"
            " one request per message"
        )
    described: Provider = REGISTERED[provider]
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
    add(
        "Lambda",
        "duration",
        messages * (duration - extra_for_ledger) * memory_gb,
        "GB-s",
        p.lambda_gb_second_arm64,
        "pipeline",
    )
    add(
        "Lambda",
        "duration added by ledger requests",
        messages * extra_for_ledger * memory_gb,
        "GB-s",
        p.lambda_gb_second_arm64,
        "ledger",
    )

    wru, rru = p.dynamodb_write_request_unit, p.dynamodb_read_request_unit
    item_units = _ceil_div(a.ledger_item_bytes, KB)
    # Publishing: each message's batch record (its body) and the campaign's counter, in one
    # transaction (2 units per item per KB), then the record marked enqueued.
    add("DynamoDB", "batch records (publish transaction)", messages * (2 * body_kb + 2), "WRU", wru, "ledger")
    add("DynamoDB", "batch records marked enqueued", messages * body_kb, "WRU", wru, "ledger")
    if mode == "single":
        writes = ledger_writes_per_send(provider)
        add(
            "DynamoDB",
            f"ledger: {writes} conditional writes per recipient",
            n * writes * item_units,
            "WRU",
            wru,
            "ledger",
        )
        add("DynamoDB", "limiter reservations", n * a.limiter_writes_per_send, "WRU", wru, "limiter")
    else:
        add(
            "DynamoDB",
            "ledger: claim + completion transactions (2 units per item)",
            n * 2 * 2 * item_units,
            "WRU",
            wru,
            "ledger",
        )
        add("DynamoDB", "ledger: BatchGetItem before forming a send group", n, "RRU", rru, "ledger")
        add("DynamoDB", "send-group records (put)", messages * body_kb, "WRU", wru, "ledger")
        add("DynamoDB", "send-group lookup (query)", messages, "RRU", rru, "ledger")
        add("DynamoDB", "limiter reservations", messages * a.limiter_writes_per_batch_request, "WRU", wru, "limiter")
    sending_seconds = messages * duration / a.max_concurrency
    # Each environment re-reads the shared throttle factor every 2 s (eventually consistent).
    add(
        "DynamoDB",
        "limiter state reads",
        math.ceil(a.max_concurrency * sending_seconds / 2) * 0.5,
        "RRU",
        rru,
        "limiter",
    )
    add("DynamoDB", "campaign state read per message", messages, "RRU", rru, "pipeline")

    send_batches = [min(SQS_BATCH_ENTRIES, messages - start) for start in range(0, messages, SQS_BATCH_ENTRIES)]
    send_requests = sum(_ceil_div(k * body_bytes, SQS_CHUNK_BYTES) for k in send_batches)
    add("SQS", "SendMessageBatch (10 messages, billed per 64 KB)", send_requests, "requests", p.sqs_request, "pipeline")
    add(
        "SQS",
        "ReceiveMessage (one message per invocation)",
        messages * _ceil_div(body_bytes, SQS_CHUNK_BYTES),
        "requests",
        p.sqs_request,
        "pipeline",
    )
    add("SQS", "DeleteMessageBatch", messages, "requests", p.sqs_request, "pipeline")
    if described.billing.through_aws:
        plan = plan or described.billing.plans[0]
        add(described.title, f"emails (plan {plan.name})", n, "emails", (plan.per_1000 or 0.0) / 1000, "pipeline")
    else:
        plan = None

    # The provider's events: each one an events-function invocation, plus an EventBridge
    # event (from an event bus) or an API Gateway request (a webhook).
    events = n * a.events_per_email()
    events_gb = a.events_lambda_memory_mb / 1024
    if described.bus_events is not None:
        add(
            "EventBridge",
            f"{described.title} events (send, delivery/bounce, complaint, opens/clicks)",
            events,
            "events",
            p.eventbridge_event,
            "events",
        )
    else:
        add(
            "API Gateway",
            f"{described.title} webhook requests (HTTP API)",
            events,
            "requests",
            p.api_gateway_http_request,
            "events",
        )
    add("Lambda", "events function: one invocation per event", events, "requests", p.lambda_request, "events")
    add(
        "Lambda",
        "events function: run time",
        events * a.events_invocation_s * events_gb,
        "GB-s",
        p.lambda_gb_second_arm64,
        "events",
    )
    add("DynamoDB", "events: dedupe record + delivery update", events * a.event_write_units, "WRU", wru, "events")

    # CloudWatch: what the invocations log (EMF metrics are log lines too), and the custom
    # metrics EMF creates, prorated by the hours the campaign publishes them.
    log_gb = (messages * a.log_bytes_per_consumer_invocation + events * a.log_bytes_per_event_invocation) / GB
    add(
        "CloudWatch",
        "log ingestion (consumer + events function, incl. EMF)",
        log_gb,
        "GB",
        p.cloudwatch_logs_ingested_gb,
        "observability",
    )
    add(
        "CloudWatch",
        f"log storage, {a.log_retention_months:g} month(s)",
        log_gb * a.log_retention_months,
        "GB-month",
        p.cloudwatch_logs_stored_gb_month,
        "observability",
    )
    sending_hours = max(1, math.ceil(sending_seconds / 3600))
    add(
        "CloudWatch",
        f"EMF custom metrics, {sending_hours} h",
        a.custom_metrics * sending_hours / HOURS_PER_MONTH,
        "metric-months",
        p.cloudwatch_metric_month,
        "observability",
    )

    stored = n * (a.ledger_item_bytes + DYNAMODB_ITEM_OVERHEAD_BYTES) + messages * (
        body_bytes + DYNAMODB_ITEM_OVERHEAD_BYTES
    )
    if mode == "batch":
        stored += messages * (body_bytes + DYNAMODB_ITEM_OVERHEAD_BYTES)
    storage_gb = stored / GB
    return CampaignCost(
        recipients=n,
        provider=provider,
        mode=mode,
        messages=messages,
        seconds_per_message=duration,
        items=items,
        storage_gb=storage_gb,
        storage_per_month=storage_gb * p.dynamodb_storage_gb_month,
        assumptions=a,
        prices=p,
        plan=plan,
        sending_hours=sending_seconds / 3600,
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
        lines.append(
            f"{item.service:<9} {item.item:<58} {item.quantity:>14,.1f} {item.unit:<9} {_money(item.cost):>10}"
            f"  {item.share}"
        )
    lines += [
        "",
        f"AWS total          {_money(data['aws_total'])}  ({_money(data['per_1000_recipients'])} per 1,000 recipients)",
        f"  ledger's share   {_money(data['ledger_share'])}  ({data['ledger_share_pct']:.0f} %: ledger table, send groups,"
        " batch records, Lambda time waiting on them)",
        f"  limiter's share  {_money(data['limiter_share'])}",
        f"  provider events  {_money(data['events_share'])}  (EventBridge or webhook requests, events function)",
        f"  logs and metrics {_money(data['observability_share'])}",
        f"storage kept       {result.storage_gb * 1024:,.1f} MB: {_money(result.storage_per_month)} per month, every month"
        " (records never expire)",
        result.provider_note,
        f"Prices: {result.prices.as_of}.",
    ]
    return "\n".join(lines)


def _plan_options(command):
    """--<provider>-plan, --<provider>-price-per-1000, --<provider>-plan-monthly-fee for each
    provider billed under a plan (SES: GetAccount's PricingAttributes.CurrentPlan)."""
    for name, provider in reversed(PLANNED.items()):
        title = provider.title
        command = click.option(
            f"--{name}-plan-monthly-fee",
            type=click.FloatRange(min=0),
            default=None,
            help="The plan's monthly fee in USD, if any (reported, not in the campaign's total).",
        )(command)
        command = click.option(
            f"--{name}-price-per-1000",
            type=click.FloatRange(min=0),
            default=None,
            help="USD per 1,000 emails on the plan (required where the plan's price is unconfirmed here).",
        )(command)
        command = click.option(
            f"--{name}-plan",
            type=click.Choice(tuple(p.name for p in provider.billing.plans)),
            default=provider.billing.plans[0].name,
            show_default=True,
            help=f"The account's {title} pricing plan.",
        )(command)
    return command


def _rates_help() -> str:
    rates = ", ".join(f"{p.title} {DEFAULT_SEND_RATE[n]:g}" for n, p in REGISTERED.items())
    return f"Shared send rate: emails/s (single) or requests/s (batch). Default: {rates} (limit less the reserve)."


@click.command("cost")
@click.option("--recipients", type=click.IntRange(min=1), required=True, help="Recipients in the campaign.")
@click.option("--provider", type=click.Choice(PROVIDERS), required=True, help="Email provider.")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="single",
    show_default=True,
    help="single: one provider call per recipient; batch: one batch request per message"
    f" ({', '.join(registry.batch_names(REGISTERED))}).",
)
@click.option("--send-rate", type=click.FloatRange(min=0, min_open=True), default=None, help=_rates_help())
@_plan_options
@click.option("--opens-clicks", is_flag=True, help="Open and click tracking on: 0.3 opens and 0.03 clicks per email.")
@click.option(
    "--max-concurrency",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Concurrent consumer invocations.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
def cost(
    recipients: int,
    provider: str,
    mode: str,
    send_rate: float | None,
    opens_clicks: bool,
    max_concurrency: int,
    as_json: bool,
    **plan_options: Any,
) -> None:
    """Estimate a campaign's AWS cost and the ledger's share of it (list prices; no AWS call)."""
    try:
        plan = None
        if provider in PLANNED:
            plan = resolve_plan(
                provider,
                plan_options[f"{provider}_plan"],
                per_1000=plan_options[f"{provider}_price_per_1000"],
                monthly_fee=plan_options[f"{provider}_plan_monthly_fee"],
            )
        tracking = {"open_rate": 0.3, "click_rate": 0.03} if opens_clicks else {}
        result = campaign_cost(
            recipients,
            provider,
            mode,
            plan=plan,
            assumptions=Assumptions(send_rate=send_rate, max_concurrency=max_concurrency, **tracking),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(json.dumps(result.as_dict(), indent=2) if as_json else render_text(result))
