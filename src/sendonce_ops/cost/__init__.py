"""What a campaign costs on AWS, and how much of it is the ledger: `sendonce cost`.

Registered on the main command line by `cli.add_command(cost)` (sendonce_ops/cli.py).
Pure arithmetic from list prices and the counts the benchmarks measured (bench/run.py;
DynamoDB's write units writer by writer from bench-scale's capture, measured.json;
docs/benchmarks.md); no AWS call.

Every price, its source and date, and which are unconfirmed, are in one table in
docs/benchmarks.md ("What a campaign costs"); `PRICE_SOURCES` below holds the same rows.
What each provider charges, and whether through AWS, is its folder's (`Provider.billing`,
sendonce/adapters/providers/); the providers, their default rates, which send batches and
how their events arrive come from the provider registry.

The pieces: prices.py (list prices, their sources, the providers' plans), writers.py (every
writer of DynamoDB the deployed stack has), measured.py and measured.json (what bench-scale
measured per writer: fixed per campaign and per recipient; the one source of the model's
write units), model.py (the assumptions and the arithmetic: `campaign_cost`) and command.py
(the text and the click command). Every name is importable from `sendonce_ops.cost`.
"""

from __future__ import annotations

from sendonce_ops.cost.command import cost, render_text
from sendonce_ops.cost.measured import Line, Measured, WriterUnits, campaign_writes
from sendonce_ops.cost.model import (
    DEFAULT_SEND_RATE,
    DYNAMODB_ITEM_OVERHEAD_BYTES,
    GB,
    HOURS_PER_MONTH,
    KB,
    MODES,
    PROVIDERS,
    SQS_BATCH_ENTRIES,
    SQS_CHUNK_BYTES,
    Assumptions,
    CampaignCost,
    LineItem,
    audience_cost,
    campaign_cost,
    ledger_writes_per_send,
    seconds_per_message,
)
from sendonce_ops.cost.prices import (
    AWS_PRICE_SOURCES,
    PLANNED,
    PRICE_SOURCES,
    PRICES,
    REGISTERED,
    Prices,
    PriceSource,
    resolve_plan,
)
from sendonce_ops.cost.writers import WRITERS, Writer, classify

__all__ = [
    "AWS_PRICE_SOURCES",
    "DEFAULT_SEND_RATE",
    "DYNAMODB_ITEM_OVERHEAD_BYTES",
    "GB",
    "HOURS_PER_MONTH",
    "KB",
    "MODES",
    "PLANNED",
    "PRICES",
    "PRICE_SOURCES",
    "PROVIDERS",
    "REGISTERED",
    "SQS_BATCH_ENTRIES",
    "SQS_CHUNK_BYTES",
    "Assumptions",
    "CampaignCost",
    "Line",
    "LineItem",
    "Measured",
    "PriceSource",
    "Prices",
    "WRITERS",
    "Writer",
    "WriterUnits",
    "audience_cost",
    "campaign_cost",
    "campaign_writes",
    "classify",
    "cost",
    "ledger_writes_per_send",
    "render_text",
    "resolve_plan",
    "seconds_per_message",
]
