"""`sendonce campaign report ID [--out FILE]`: the campaign's report as one HTML page.

Registered on the `campaign` group by sendonce_ops/cli.py; the page itself is
sendonce_ops/report_page.py, its data domain/campaigns/report.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sendonce.wiring.api import build_campaign_reports
from sendonce_ops.cli_context import ExitCode, fail


@click.command("report")
@click.argument("campaign_id")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Where to write the page (default: ./<campaign id>-report.html).",
)
@click.pass_obj
def campaign_report(obj: Any, campaign_id: str, out: Path | None) -> None:
    """Write the campaign's report: one self-contained HTML page (opens with no network)."""
    try:
        from sendonce_ops.report_page import write  # plotly: loaded for this command only
    except ImportError as error:
        fail(
            ExitCode.UNEXPECTED,
            f"error: `sendonce campaign report` needs plotly ({error}): `pip install 'sendonce[report]'`.",
        )

    report = build_campaign_reports(obj.endpoints.api_settings(), obj.clients).report(campaign_id)
    path = write(report, out or Path(f"{campaign_id}-report.html"))
    figures = report.figures()
    click.echo(
        f"{path}: {figures['total']:,} recipients, {figures['sent']:,} sent, "
        f"{figures['duplicates_prevented']:,} duplicates prevented ({len(report.timeline)} bars)"
    )
