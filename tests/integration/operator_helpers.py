"""Helpers for the operator control-plane tests: the CLI in-process and as a process,
API Gateway HTTP API events, and waiting."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from sendonce_local.http_api import http_api_event
from sendonce_local.poller import LocalLambdaContext
from sendonce_ops.cli import cli

ROOT = Path(__file__).resolve().parents[2]
SENDONCE = ROOT / ".venv" / "bin" / "sendonce"
OPERATOR_ARN = "arn:aws:iam::123456789012:user/ann"


def cli_env(system, **extra: str) -> dict[str, str]:
    """Point the CLI at the test's resources (no stack) and name the operator."""
    resources = system.resources
    return {
        "SENDONCE_QUEUE_URL": resources.queue_url,
        "SENDONCE_DEAD_LETTER_QUEUE_URL": resources.dead_letter_queue_url,
        "SENDONCE_LEDGER_TABLE": resources.ledger_table,
        "SENDONCE_CAMPAIGNS_TABLE": resources.campaigns_table,
        "SENDONCE_OPERATOR": "ann",
        **extra,
    }


def sendonce(system, *args: str, env: dict[str, str | None] | None = None) -> Result:
    """`sendonce ARGS` in-process, stdout and stderr kept apart."""
    runner = CliRunner()
    return runner.invoke(cli, list(args), env={**cli_env(system), **(env or {})}, catch_exceptions=False)


def sendonce_process(
    system, *args: str, env: dict[str, str] | None = None, **kwargs: Any
) -> subprocess.CompletedProcess:
    env = {**os.environ, **cli_env(system), **(env or {})}
    return subprocess.run([str(SENDONCE), *args], env=env, capture_output=True, text=True, timeout=60, **kwargs)


def json_lines(result: Result) -> list[Any]:
    """The command's JSON lines. Consumers polling in this process write their logs and
    metrics to the same stdout CliRunner captures; those lines are left out."""
    found = []
    for line in result.stdout.splitlines():
        data = json.loads(line)
        if not (isinstance(data, dict) and ("_aws" in data or "level" in data)):
            found.append(data)
    return found


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output + result.stderr
    [data] = json_lines(result)
    return data


def api_event(method: str, path: str, body: Any = None, caller: str = OPERATOR_ARN) -> dict[str, Any]:
    raw = b"" if body is None else json.dumps(body).encode()
    return http_api_event(
        method=method, target=path, headers={"content-type": "application/json"}, body=raw, caller_arn=caller
    )


def lambda_context() -> LocalLambdaContext:
    return LocalLambdaContext(
        function_name="sendonce-api",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:sendonce-api",
        timeout_s=29,
    )


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not reached in time")


def write_csv(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.write_text("recipient_id,email,name\n" + "".join(f"{r},{e},{n}\n" for r, e, n in rows))
    return path


def people(system, n: int, start: int = 0) -> list[tuple[str, str, str]]:
    return [(f"r{i}", f"user{i}@{system.domain}", f"User {i}") for i in range(start, start + n)]


def scheduling_operator(system, operator: str = "operator", scheduling: Any = None) -> Any:
    """The operator service over `system`'s moto resources with a schedule group (`scheduling`'s,
    or one of its own), as the deployed API function has it (a send_at is scheduled, not refused)."""
    from sendonce.settings import ApiSettings
    from sendonce.wiring.api import campaign_service
    from sendonce_local.resources import create_scheduling_resources

    scheduling = scheduling or create_scheduling_resources()
    r = system.resources
    return campaign_service(
        ApiSettings(
            ledger_table=r.ledger_table,
            campaigns_table=r.campaigns_table,
            queue_url=r.queue_url,
            dead_letter_queue_url=r.dead_letter_queue_url,
            scheduler_group=scheduling.group_name,
            scheduler_role_arn=scheduling.role_arn,
            scheduled_start_function_arn=scheduling.start_function_arn,
        ),
        operator=operator,
    )


def spec_file(path: Path, system, campaign_id: str = "c1", provider: str = "resend") -> Path:
    path.write_text(
        f"id: {campaign_id}\nname: Spring launch\nsubject: 'Hello {{{{ name }}}}'\nfrom: News <news@{system.domain}>\n"
        f"provider: {provider}\nhtml: '<p>Hi {{{{ name }}}}</p>'\ntext: 'Hi {{{{ name }}}}'\n"
    )
    return path


def local_schedule_firer(system, resources) -> tuple[Any, Any]:
    """The local stack's schedule firer over moto's scheduler group, calling the scheduled-start
    function as deployed (ApiSettings without the scheduler: it starts and resumes, never
    schedules), with a clock a test can move. Returns (clock, firer)."""
    import functools

    import boto3

    from sendonce.domain.campaigns import lifecycle
    from sendonce.handlers import scheduled_start
    from sendonce.settings import ApiSettings
    from sendonce.wiring.api import campaign_service
    from sendonce_local.scheduler_poller import LocalClock, SchedulePoller

    r = system.resources
    start_service = campaign_service(
        ApiSettings(
            ledger_table=r.ledger_table,
            campaigns_table=r.campaigns_table,
            queue_url=r.queue_url,
            dead_letter_queue_url=r.dead_letter_queue_url,
        ),
        operator=lifecycle.AUTOMATIC,
    )
    clock = LocalClock()
    firer = SchedulePoller(
        client=boto3.client("scheduler"),
        handlers={
            resources.start_function_arn: functools.partial(scheduled_start.lambda_handler, service=start_service)
        },
        group_names=[resources.group_name],
        clock=clock,
    )
    return clock, firer
