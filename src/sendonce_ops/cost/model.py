"""The cost model: the assumptions (the stack's defaults and what the benchmark measured) and
the arithmetic that turns a campaign's size, provider and mode into line items, each with the
share it belongs to (ledger, limiter, pipeline, events, observability). Pure; no AWS call.

DynamoDB's write units come writer by writer from what bench-scale measured (measured.py,
writers.py): every writer the deployed stack has is listed, each priced from its measured
fixed and per-recipient units; reads, Lambda, SQS and the rest from the assumptions below."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import Plan, Provider
from sendonce_ops.cost.measured import Measured, WriterUnits, campaign_requests, campaign_writes, ledger_writes_per_send
from sendonce_ops.cost.prices import PLANNED, PRICES, REGISTERED, Prices

KB = 1024
SQS_CHUNK_BYTES = 64 * KB  # each 64 KB of a request's payload is billed as one request
SQS_BATCH_ENTRIES = 10
DYNAMODB_ITEM_OVERHEAD_BYTES = 100  # storage counts 100 bytes per item besides its data
GB = 1024**3

PROVIDERS = tuple(REGISTERED)
MODES = ("single", "batch")
# The consumer's defaults (each provider's settings): its rate less the reserve the
# limiter keeps (SES 14 recipients/s; Resend's default team limit 5 requests/s less 1).
DEFAULT_SEND_RATE = {name: provider.default_rate() for name, provider in REGISTERED.items()}
HOURS_PER_MONTH = 730  # CloudWatch prorates a metric by the hour


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
    # Storage: a ledger item after its sent and delivered events, measured 877 B one by one and
    # 995 B in batch mode with a 21-character campaign id (tests/integration/test_ledger_item_size.py)
    ledger_item_bytes: int = 1000
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
        return self.ledger_events_per_email() + self.open_rate + self.click_rate

    def ledger_events_per_email(self) -> float:
        """The events recorded on the ledger: opens and clicks never are (engagement is apart)."""
        return 2.0 + self.complaint_rate


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
    writers: list[WriterUnits] = field(default_factory=list)  # every DynamoDB writer, priced or not
    dynamodb_requests: dict[str, float] = field(default_factory=dict)  # per function, as bench-scale counted
    measured: dict[str, Any] = field(default_factory=dict)  # where the writers' figures come from

    @property
    def aws_total(self) -> float:
        return sum(i.cost for i in self.items)

    def share(self, name: str) -> float:
        return sum(i.cost for i in self.items if i.share == name)

    @property
    def write_units(self) -> float:
        """DynamoDB write units, every writer's."""
        return sum(w.write_units for w in self.writers)

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
            "dynamodb_write_units": self.write_units,
            "dynamodb_write_units_per_recipient": self.write_units / self.recipients,
            "writers": [w.as_dict() for w in self.writers],
            "dynamodb_requests_by_function": self.dynamodb_requests,
            "measured": self.measured,
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
        # BatchGetItem, group put, claim and completion transactions (a first attempt reads
        # no send groups: none of its recipients has a record)
        path = a.provider_latency_s + (4 * a.dynamodb_latency_s if ledger else 0.0)
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
    measured: Measured | None = None,
) -> CampaignCost:
    """`measured`: bench-scale's writer figures (default: the capture shipped, measured.json)."""
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
    # Writes: every writer of the deployed stack, from bench-scale's measured figures.
    measured = measured or Measured.load()
    writers = campaign_writes(
        measured, n, provider, mode, a.ledger_events_per_email(), firsts_per_email=a.open_rate + a.click_rate
    )
    for w in writers:
        add("DynamoDB", f"writes: {w.writer.name}", w.write_units, "WRU", wru, w.writer.share)
    if mode == "batch":
        add("DynamoDB", "ledger: BatchGetItem before forming a send group", n, "RRU", rru, "ledger")
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
        writers=writers,
        dynamodb_requests=campaign_requests(measured, n),
        measured=measured.how,
    )


def audience_cost(audience: int, provider: str, mode: str = "single") -> dict[str, Any]:
    """What a forecast shows of the cost of sending to `audience` recipients (`campaign forecast`,
    and the client's forecast, which prices the API's answer here): the AWS total, per 1,000
    recipients, and what the provider bills outside AWS. A provider or mode the model cannot
    price is said, with a null total."""
    if not audience:
        return {"aws_total": 0.0, "note": "nobody to send to"}
    try:
        cost = campaign_cost(audience, provider, mode).as_dict()
    except ValueError as exc:
        return {"aws_total": None, "note": str(exc)}
    return {
        "aws_total": cost["aws_total"],
        "per_1000_recipients": cost["per_1000_recipients"],
        "note": cost["provider_note"],
    }
