"""`sendonce campaign audit ID`: parsing and presentation only (domain/audit does the work).

Registered by `campaign.add_command(campaign_audit)` (sendonce_ops/cli.py); reads the
group's context object (`Cli`) for the session, the endpoints and the operator service.
Exit 0 when every recipient is explained, 5 when a duplicate or an unexplained difference
is found, 4 when the provider no longer lists the campaign's first emails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from sendonce.domain.audit.service import UNEXPLAINED, AuditOutsideRetentionError, AuditResult, Verdict
from sendonce.wiring.audit import build_campaign_audit
from sendonce_ops.endpoints import sending_settings

AUDIT_DIFFERENCES = 5
CONFLICT = 4

WHAT = {
    Verdict.SENT_ONCE: "sent exactly once",
    Verdict.DUPLICATE: "DUPLICATES: the provider sent more than one email",
    Verdict.MISSING: "ledger says sent, the provider has no email",
    Verdict.LEDGER_DISAGREES: "the provider has an email, the ledger says not sent",
    Verdict.PROVIDER_ONLY: "the campaign's tags at the provider, no ledger record",
    Verdict.UNKNOWN_SENT: "unknown, the provider has it (sent)",
    Verdict.UNKNOWN_NOT_SENT: "unknown, proven not sent (resume --include-unknown sends it)",
    Verdict.UNKNOWN_UNRESOLVED: "unknown, nothing proves either way",
    Verdict.SENT_UNWITNESSED: "ledger says sent, no provider event (cannot be proven either way)",
    Verdict.NOT_SENT: "not sent on either side",
    Verdict.AFTER_LISTING: "changed after the listing was read: audit again",
}


def _text(result: AuditResult, artefact: dict[str, Any]) -> None:
    run = artefact["run"]
    click.echo(f"campaign {result.campaign_id}: audited against {result.provider}'s own records")
    if run["must_run_before"]:
        click.echo(
            f"  {result.provider} lists sent emails for {run['retention_days']:g} day(s): "
            f"an audit of this campaign must run before {run['must_run_before']}"
        )
    complete = "complete" if result.complete else "INCOMPLETE (did not reach the campaign's start)"
    click.echo(
        f"  listing since {artefact['findings']['window_from']}: {complete}; {result.listed_emails} emails read,"
    )
    click.echo(f"  {result.retrieves} retrieved for their tags, {result.provider_requests} provider requests")
    if not result.proves_absence:
        click.echo(
            f"  {result.provider} proves nothing absent: an accepted email whose events never arrived"
            " looks like one never sent"
        )
    for verdict in Verdict:
        count = result.counts[verdict.value]
        if count:
            click.echo(f"  {count:>8}  {WHAT[verdict]}")
    for verdict in sorted(UNEXPLAINED | {Verdict.UNKNOWN_SENT, Verdict.UNKNOWN_NOT_SENT}):
        ids = sorted(result.recipients.get(verdict.value, []))
        if ids:
            shown = ", ".join(ids[:20]) + (f" ... ({len(ids)})" if len(ids) > 20 else "")
            click.echo(f"  {verdict.value}: {shown}")
    for rid, emails in sorted(result.duplicates.items())[:20]:
        click.echo(f"  duplicate {rid}: {', '.join(sorted(emails))}")
    unsettled = result.counts[Verdict.UNKNOWN_SENT.value] + result.counts[Verdict.UNKNOWN_NOT_SENT.value]
    if unsettled and not result.settled:
        click.echo(f"  {unsettled} unknown outcome(s) can be settled by this evidence: run again with --settle")
    click.echo(f"  digest {artefact['digest']}")
    click.echo("  clean: every recipient explained" if result.clean else "  NOT CLEAN: see above")


@click.command("audit")
@click.argument("campaign_id")
@click.option(
    "--settle",
    is_flag=True,
    help="Write what the evidence settles: an unknown the provider has becomes sent; one absent from a "
    "complete listing becomes proven not sent (then `resume --include-unknown` sends it).",
)
@click.option(
    "--retention-days",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="How long the Resend plan keeps sent emails listable (default 3).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the JSON artefact (sorted, with its SHA-256 digest) to this file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON artefact instead of text.")
@click.pass_obj
def campaign_audit(
    obj: Any, campaign_id: str, settle: bool, retention_days: float | None, out: Path | None, as_json: bool
) -> None:
    """Set the provider's own record of the campaign against the ledger, recipient by recipient.

    Run it after the campaign completes and after any incident, within the provider's
    retention (Resend: a few days). Exit 5 on a duplicate or an unexplained difference."""
    campaign = obj.service().get(campaign_id)
    settings = sending_settings(obj.session, obj.endpoints, os.environ)
    audit = build_campaign_audit(settings, campaign.provider, obj.clients, retention_days=retention_days)
    try:
        result = audit.run(campaign_id, settle=settle)
    except AuditOutsideRetentionError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(CONFLICT) from None
    artefact = result.artefact()
    if out is not None:
        out.write_text(json.dumps(artefact, sort_keys=True, indent=1) + "\n")
    if as_json:
        click.echo(json.dumps(artefact, sort_keys=True))
    else:
        _text(result, artefact)
    if not result.clean:
        raise click.exceptions.Exit(AUDIT_DIFFERENCES)
