"""The command line's shared parts: its context object (`Cli`: the session and its clients,
the endpoints, the operator service), exit codes, how an error becomes a message and a code,
and the campaign's summary every command prints. Read by every `*_cli` module."""

from __future__ import annotations

import getpass
import json
import os
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NoReturn

import boto3
import click
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError, NoRegionError
from rich.console import Console

from sendonce.domain.campaigns.scheduling import iso
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.errors import (
    CampaignNotFoundError,
    CampaignScheduleError,
    IllegalTransitionError,
    InvalidCampaignError,
    JobNotFoundError,
    SettingsError,
)
from sendonce.domain.jobs.models import Job
from sendonce.domain.models import Campaign, CampaignState
from sendonce.domain.sending.sending_now import SendingNow
from sendonce.settings import ConsumerSettings
from sendonce.wiring.api import build_campaign_service
from sendonce.wiring.audit import build_auditor
from sendonce.wiring.clients import Clients
from sendonce.wiring.operator import build_sending_now, build_unknown_outcomes
from sendonce_ops.endpoints import (
    ConsumerPaces,
    ConsumerRates,
    Endpoints,
    EndpointsError,
    resolve_endpoints,
    sending_settings,
)
from sendonce_ops.specs import SpecError


class ExitCode(IntEnum):
    OK = 0
    UNEXPECTED = 1
    BAD_INPUT = 2  # usage error, invalid spec or file, campaign / stack / record not found
    PARTIAL = 3  # part done: bad rows skipped, or `watch` timed out
    CONFLICT = 4  # not allowed in the campaign's state (illegal transition, id exists)
    AUDIT_DIFFERENCES = 5  # `campaign audit` found a duplicate or an unexplained difference


EXIT_CODES_HELP = """\b
Exit codes:
  0  done
  1  unexpected error (AWS unreachable, a bug)
  2  usage error, invalid spec or recipient file, or not found
     (campaign, stack, ledger record)
  3  partly done: bad rows were skipped (publish without --strict),
     a publish stopped after some batches, or watch --timeout ran out
  4  not allowed in the campaign's state: an illegal transition
     (e.g. resume a cancelled campaign), or the id exists already;
     an audit outside the provider's retention
  5  an audit found a duplicate or an unexplained difference
"""

FINISHED_STATES = (CampaignState.COMPLETED, CampaignState.CANCELLED, CampaignState.PAUSED)


# --- context ------------------------------------------------------------------------


@dataclass
class Cli:
    stack: str
    operator_name: str | None
    out: Console
    err: Console
    _session: Any = None
    _clients: Clients | None = None
    _endpoints: Endpoints | None = None
    _services: dict[bool, CampaignService] = field(default_factory=dict)
    _sending_now: SendingNow | None = None

    @property
    def session(self) -> boto3.session.Session:
        if self._session is None:
            self._session = boto3.session.Session()
            if not self._session.region_name:
                raise NoRegionError()
        return self._session

    @property
    def clients(self) -> Clients:
        """The session's clients, each built once (what the wiring builds services on)."""
        if self._clients is None:
            self._clients = Clients(self.session)
        return self._clients

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None:
            self._endpoints = resolve_endpoints(self.session, self.stack, os.environ)
        return self._endpoints

    def service(self, *, writes: bool = False) -> CampaignService:
        """The operator service; `writes` records who changes state (an STS call, made only then)."""
        if writes not in self._services:
            operator = self.operator() if writes else "operator"
            endpoints, clients = self.endpoints, self.clients
            # A max_rate is checked against the deployed consumer's rates, not this process's defaults.
            rates = ConsumerRates(self.session, endpoints, os.environ)
            # `resume --include-unknown` (and `job run` of one) reads and reopens unknowns; an
            # audit job run here (no jobs queue) audits with the consumer's settings.
            self._services[writes] = build_campaign_service(
                endpoints.api_settings(),
                clients,
                operator=operator,
                provider_rates=rates,
                unknown_outcomes=lambda accept: build_unknown_outcomes(
                    endpoints.ledger_table, endpoints.campaigns_table, clients, accept_possible_duplicates=accept
                ),
                auditor=build_auditor(self.consumer_settings, clients),
                # A campaign's caps name the deployment's mailbox groups: the consumer's.
                group_pacing=lambda: self.consumer_settings().group_pacing,
            )
        return self._services[writes]

    def consumer_settings(self) -> ConsumerSettings:
        """The consumer's settings as `sending_settings` reads them (for what must send, render
        or audit as the consumer does); a SettingsError saying why when they cannot be read."""
        try:
            return sending_settings(self.session, self.endpoints, os.environ)
        except EndpointsError as exc:
            raise SettingsError(str(exc)) from None

    def sending_now(self) -> SendingNow:
        """Who shares the providers' rate now, read from the shared limiter's slot items."""
        if self._sending_now is None:
            endpoints = self.endpoints
            self._sending_now = build_sending_now(
                endpoints.campaigns_table,
                self.clients,
                campaigns=self.service(),
                paces=ConsumerPaces(self.session, endpoints, os.environ),
            )
        return self._sending_now

    def operator(self) -> str:
        if self.operator_name:
            return self.operator_name
        try:
            return self.session.client("sts").get_caller_identity()["Arn"]
        except (BotoCoreError, ClientError):
            return f"cli:{getpass.getuser()}"

    def sqs(self) -> Any:
        return self.session.client("sqs")

    def transition_output(self, campaign: Campaign, verb: str, as_json: bool) -> None:
        transition_output(self, campaign, verb, as_json)

    def json(self, data: Any) -> None:
        click.echo(json.dumps(data, default=str))

    def warn(self, message: str) -> None:
        click.echo(message, err=True)


pass_cli = click.make_pass_decorator(Cli)


def classify(exc: Exception) -> tuple[ExitCode, str]:
    if isinstance(exc, SpecError):
        return ExitCode.BAD_INPUT, "\n".join(exc.problems) + "\nnothing was created"
    if isinstance(exc, IllegalTransitionError):
        return ExitCode.CONFLICT, f"error: {exc}"
    if isinstance(exc, CampaignScheduleError):  # scheduled and recorded; only the schedule is missing
        return ExitCode.PARTIAL, f"error: {exc}"
    if isinstance(exc, (CampaignNotFoundError, JobNotFoundError, InvalidCampaignError, EndpointsError, SettingsError)):
        return ExitCode.BAD_INPUT, f"error: {exc}"
    if isinstance(exc, NoRegionError):
        return ExitCode.BAD_INPUT, "error: no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or a profile's region)"
    if isinstance(exc, NoCredentialsError):
        return ExitCode.BAD_INPUT, "error: no AWS credentials found (set AWS_PROFILE or AWS_ACCESS_KEY_ID/...)"
    if isinstance(exc, EndpointConnectionError):
        return ExitCode.UNEXPECTED, f"error: cannot reach AWS: {exc}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return ExitCode.UNEXPECTED, f"error: AWS {exc.operation_name}: {error.get('Code')}: {error.get('Message')}"
    return ExitCode.UNEXPECTED, f"unexpected error: {type(exc).__name__}: {exc} (SENDONCE_DEBUG=1 shows the traceback)"


def fail(code: ExitCode, message: str) -> NoReturn:
    click.echo(message, err=True)
    raise click.exceptions.Exit(int(code))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")


def campaign_summary(campaign: Campaign) -> dict[str, Any]:
    return {
        "campaign_id": campaign.campaign_id,
        "name": campaign.name,
        "provider": campaign.provider,
        "from": campaign.sender,
        "subject": campaign.subject,
        "delivery_mode": campaign.delivery_mode,
        "weight": campaign.weight,
        "priority": campaign.priority,
        "max_rate": campaign.max_rate,
        "state": campaign.state.value,
        "state_reason": campaign.state_reason,
        "state_changed_by": campaign.state_changed_by,
        "updated_at": campaign.updated_at,
        "send_at": iso(campaign.send_at_ms) if campaign.send_at_ms is not None else None,
    }


def job_extra(job: Job | None) -> dict[str, Any]:
    """A resume's job: the recipients it republished once done, the job itself."""
    if job is None:
        return {"republished": 0, "job": None}
    return {"republished": job.progress.get("republished", 0) if job.done else None, "job": job.as_dict()}


def transition_output(cli: Cli, campaign: Campaign, verb: str, as_json: bool, **extra: Any) -> None:
    if as_json:
        cli.json({**campaign_summary(campaign), **extra})
        return
    reason = f" ({campaign.state_reason})" if campaign.state_reason else ""
    if campaign.state is CampaignState.SCHEDULED and campaign.send_at_ms is not None:
        reason = f" (for {iso(campaign.send_at_ms)})"
    line = f"{verb} {campaign.campaign_id}: now {campaign.state.value}{reason}, by {campaign.state_changed_by}"
    job = extra.get("job")
    if job is not None and job["state"] == "running":
        line += f"; job {job['job_id']} is republishing (`sendonce job watch {job['job_id']}`)"
    elif extra.get("republished") is not None:
        line += f"; republished {extra['republished']} recipient(s) not yet ended"
    if extra.get("reopened") or extra.get("confirmed_sent"):
        line += (
            f"; reopened {len(extra['reopened'])} unknown outcome(s), "
            f"{len(extra['confirmed_sent'])} confirmed sent by the provider"
        )
    click.echo(line)
