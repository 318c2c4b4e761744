"""`sendonce cost`: the command line (its options, one per provider plan) and the text it
prints; `--json` prints `CampaignCost.as_dict()` instead."""

from __future__ import annotations

import json
from typing import Any

import click

from sendonce.adapters.providers import registry
from sendonce_ops.cost.model import DEFAULT_SEND_RATE, MODES, PROVIDERS, Assumptions, CampaignCost, campaign_cost
from sendonce_ops.cost.prices import PLANNED, REGISTERED, resolve_plan


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
        f"  ledger's share   {_money(data['ledger_share'])}  ({data['ledger_share_pct']:.0f} %: ledger, send groups,"
        " batch records, the aggregator's counters, report and markers, Lambda time waiting on them)",
        f"  limiter's share  {_money(data['limiter_share'])}",
        f"  provider events  {_money(data['events_share'])}  (EventBridge or webhook requests, the events function and its writes)",
        f"  logs and metrics {_money(data['observability_share'])}",
        f"storage kept       {result.storage_gb * 1024:,.1f} MB: {_money(result.storage_per_month)} per month, every month"
        " (records never expire)",
        result.provider_note,
        "",
        *_writers_text(result),
        f"Prices: {result.prices.as_of}.",
    ]
    return "\n".join(lines)


def _writers_text(result: CampaignCost) -> list[str]:
    """Every DynamoDB writer of the stack: its fixed and per-recipient write units, and
    those of this campaign; the ones no immediate campaign runs, listed unpriced."""
    how = result.measured
    lines = [
        f"DynamoDB writes by writer: {result.write_units:,.0f} write units,"
        f" {result.write_units / result.recipients:.2f} per recipient (bench-scale, {how.get('measured_on')})",
        f"  {'writer':<40} {'fixed':>8} {'per recipient':>14} {'write units':>14}",
    ]
    for w in result.writers:
        if w.writer.scales == "not_measured":
            lines.append(f"  {w.writer.name:<40} {'not priced: ' + w.writer.what}")
        else:
            lines.append(f"  {w.writer.name:<40} {w.fixed:>8,.1f} {w.per_recipient:>14.4f} {w.write_units:>14,.0f}")
    requests = ", ".join(f"{name} {n:,.0f}" for name, n in result.dynamodb_requests.items())
    lines += [f"  DynamoDB requests by function: {requests}", ""]
    return lines


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
