"""`sendonce dlq list|redrive`: what is in the dead-letter queue and why; send it again.
Registered on `sendonce` by sendonce_ops/cli.py."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from sendonce_ops.cli_context import (
    Cli,
    json_option,
    pass_cli,
)
from sendonce_ops.endpoints import queue_arn

# --- dead-letter queue --------------------------------------------------------------


@click.group()
def dlq() -> None:
    """The dead-letter queue: what is there and why; send it again."""


@dlq.command("list")
@click.option(
    "--limit", type=click.IntRange(min=1), default=1000, show_default=True, help="Read at most this many messages."
)
@json_option
@pass_cli
def dlq_list(cli: Cli, limit: int, as_json: bool) -> None:
    """Messages in the DLQ grouped by campaign, with the last error (read, not consumed)."""
    from sendonce_ops.dead_letters import read_dead_letters

    letters = read_dead_letters(cli.sqs(), cli.endpoints.dead_letter_queue_url, limit=limit)
    summary = cli.service().dead_letter_summary(letters)
    if as_json:
        cli.json(summary.as_dict())
        return
    if not summary.messages:
        click.echo("the dead-letter queue is empty")
        return
    table = Table(title=f"dead-letter queue: {len(summary.messages)} message(s)", title_justify="left")
    for column, justify in (
        ("campaign", "left"),
        ("messages", "right"),
        ("recipients", "right"),
        ("dead-lettered", "right"),
        ("last error", "left"),
    ):
        table.add_column(column, justify=justify)
    for group in summary.groups:
        table.add_row(
            group.campaign_id or "(not a batch)",
            str(group.messages),
            str(group.recipients),
            str(group.dead_lettered),
            Text(group.last_error or "-"),
        )
    cli.out.print(table)


@dlq.command("redrive")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Move at most N messages (moved by this command: SQS move tasks take no count).",
)
@click.option("--rate", type=click.IntRange(1, 500), default=None, help="Messages per second for the SQS move task.")
@json_option
@pass_cli
def dlq_redrive(cli: Cli, limit: int | None, rate: int | None, as_json: bool) -> None:
    """Move the DLQ's messages back to the campaign queue to be processed again.

    Uses SQS StartMessageMoveTask; where that is not available (moto) the messages are moved
    by this command instead, and it says so. Recipients already sent are not sent again.
    """
    from sendonce_ops.dead_letters import redrive

    endpoints = cli.endpoints
    sqs = cli.sqs()
    result = redrive(
        cli.session,
        dead_letter_queue_url=endpoints.dead_letter_queue_url,
        queue_url=endpoints.queue_url,
        dead_letter_queue_arn=endpoints.dead_letter_queue_arn or queue_arn(sqs, endpoints.dead_letter_queue_url),
        queue_arn=endpoints.queue_arn or queue_arn(sqs, endpoints.queue_url),
        limit=limit,
        rate=rate,
    )
    if as_json:
        cli.json(result.as_dict())
        return
    if result.method == "move-task":
        click.echo(
            f"SQS is moving the DLQ's messages back to the campaign queue (task {result.task_handle}); "
            "`sendonce dlq list` shows what is left"
        )
        return
    if result.fallback_reason:
        cli.warn(f"{result.fallback_reason}; moving the messages directly instead")
    click.echo(f"moved {result.moved} message(s) from the DLQ back to the campaign queue")
