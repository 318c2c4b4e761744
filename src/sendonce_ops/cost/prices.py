"""What sendonce's AWS services cost per unit (us-east-1 list prices), where each price comes
from and when it was read, and the pricing plans of the providers billed per email. The same
rows are in docs/benchmarks.md ("What a campaign costs"); tests/unit/test_cost.py checks it."""

from __future__ import annotations

from dataclasses import dataclass

from sendonce.adapters.providers import registry
from sendonce.adapters.providers.descriptor import Plan

REGISTERED = registry.registered()
# The providers billed per email under a plan (`--<provider>-plan`, e.g. --ses-plan).
PLANNED = {name: p for name, p in REGISTERED.items() if p.billing.plans}


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
