"""The demo's local AWS: the real stack deployed into moto, its consumer's configuration
read back from what was deployed, scaled in time, and consumer processes that run it.

Nothing here is a hand-made copy of the stack: queue URLs and table names come from the
stack outputs, the handler, timeout and environment from the deployed function, the
batch size and MaximumConcurrency from its event source mapping, maxReceiveCount from
the queue's redrive policy. How far durations are scaled down is `timing.py`'s concern.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import site
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from sendonce_local.moto_server import aws_env
from sendonce_local.poller import disable_moto_event_source_mappings

RESEND_DEMO_KEY = "re_sendonce_demo_key"
# What the deploy and the consumer processes import: the Lambda code, the local tooling,
# the construct and the repository's app.
CODE_PACKAGES = ("sendonce", "sendonce_local", "sendonce_cdk", "sendonce_infra")


def deploy_stack(endpoint: str, *, context: Mapping[str, Any]) -> dict[str, str]:
    """The repository's CDK app (`sendonce_infra`, installed with sendonce) deployed into moto; its outputs.

    Synthesis runs in a process of its own (`python -m sendonce_local.deploy`): jsii's
    Node runtime and the CDK's memory go away with it instead of staying in the demo's
    process beside the consumers it starts.
    """
    result = subprocess.run(
        [sys.executable, "-m", "sendonce_local.deploy", endpoint, json.dumps(dict(context))],
        env=_python_env(os.environ),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"deploying the stack into moto failed:\n{result.stderr[-6000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _python_env(base: Mapping[str, str]) -> dict[str, str]:
    """`base` with PYTHONPATH leading to where this interpreter finds the Lambda code, the
    local tooling, the construct and the app (a checkout's lambdas/, src/ and root; nothing
    more for an installed wheel), so a child process runs the same code."""
    installed = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    roots: list[str] = []
    for package in CODE_PACKAGES:
        spec = importlib.util.find_spec(package)  # found, not imported: importing the CDK starts jsii
        if spec is None or spec.origin is None:
            raise RuntimeError(f"the {package!r} package is not installed: reinstall sendonce")
        root = Path(spec.origin).resolve().parents[1]
        if root not in installed:
            roots.append(str(root))
    env = dict(base)
    path = list(dict.fromkeys([*roots, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]))
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    return env


@dataclass(frozen=True)
class DeployedConsumer:
    """The consumer as the stack deployed it."""

    function_name: str
    handler: str  # Lambda's form: package.module.function
    timeout_s: int
    environment: dict[str, str]
    batch_size: int
    max_concurrency: int
    queue_url: str
    queue_arn: str
    dead_letter_queue_url: str
    ledger_table: str
    campaigns_table: str
    visibility_timeout_s: int
    max_receive_count: int

    @classmethod
    def read(cls, session: boto3.session.Session, outputs: Mapping[str, str]) -> DeployedConsumer:
        lambda_client = session.client("lambda")
        function_name = outputs["ConsumerFunctionName"]
        function = lambda_client.get_function_configuration(FunctionName=function_name)
        mappings = disable_moto_event_source_mappings(lambda_client, function_name)
        if len(mappings) != 1:
            raise RuntimeError(f"expected one event source mapping on {function_name}, found {len(mappings)}")
        mapping = mappings[0]
        attributes = session.client("sqs").get_queue_attributes(
            QueueUrl=outputs["QueueUrl"], AttributeNames=["VisibilityTimeout", "RedrivePolicy"]
        )["Attributes"]
        return cls(
            function_name=function_name,
            handler=function["Handler"],
            timeout_s=int(function["Timeout"]),
            environment=dict(function.get("Environment", {}).get("Variables", {})),
            batch_size=int(mapping["batch_size"] or 10),
            # Without MaximumConcurrency Lambda scales out on its own; locally, two.
            max_concurrency=int(mapping["max_concurrency"] or 2),
            queue_url=outputs["QueueUrl"],
            queue_arn=outputs["QueueArn"],
            dead_letter_queue_url=outputs["DeadLetterQueueUrl"],
            ledger_table=outputs["LedgerTableName"],
            campaigns_table=outputs["CampaignsTableName"],
            visibility_timeout_s=int(attributes["VisibilityTimeout"]),
            max_receive_count=int(json.loads(attributes["RedrivePolicy"])["maxReceiveCount"]),
        )

    @property
    def poller_handler(self) -> str:
        """The handler in the poller's module:function form."""
        module, _, function = self.handler.rpartition(".")
        return f"{module}:{function}"


class ConsumerProcess:
    """One local event-source poller process: one concurrent Lambda execution environment."""

    def __init__(
        self,
        name: str,
        *,
        consumer: DeployedConsumer,
        handler: str,
        function_timeout_s: float,
        env: Mapping[str, str],
        log_dir: Path,
        init: str | None = None,
    ) -> None:
        self.name = name
        self.stdout_path = log_dir / f"{name}.out"
        self.stderr_path = log_dir / f"{name}.err"
        command = [
            sys.executable, "-m", "sendonce_local.poller",
            "--queue-url", consumer.queue_url,
            "--handler", handler,
            "--batch-size", str(consumer.batch_size),
            "--concurrency", "1",
            "--timeout", f"{function_timeout_s:g}",
            "--function-name", consumer.function_name,
            *(["--init", init] if init else []),
        ]  # fmt: skip
        with open(self.stdout_path, "wb") as stdout, open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                command,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                # Its own session: Ctrl-C reaches the demo, which stops consumers in order.
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def returncode(self) -> int | None:
        return self.process.poll()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no acknowledgement, as when Lambda's sandbox dies."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM: the poller finishes the invocation in progress and exits."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()

    def counters(self) -> dict[str, int]:
        """The poller's last stdout line: its counters, written when it stops."""
        try:
            lines = self.stdout_path.read_text(errors="replace").strip().splitlines()
        except FileNotFoundError:
            return {}
        for line in reversed(lines):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and "invocations" in data:
                return {k: int(v) for k, v in data.items()}
        return {}


class ResendServerProcess:
    """The local Resend server (`python -m sendonce_local.resend_server`) in a process of
    its own, steered over its /_local/* endpoints (docs/local-resend.md): its request
    handling gets a core of its own, and its log (a SIGKILLed client's reset connection is
    logged with a traceback) stays out of the demo's output."""

    def __init__(self, log_dir: Path) -> None:
        self._log_path = log_dir / "resend-server.err"
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> ResendServerProcess:
        with open(self._log_path, "wb") as stderr:
            self.process = subprocess.Popen(
                # No team limit: the demo replays the incident's throughput, not Resend's 5/s default.
                [sys.executable, "-m", "sendonce_local.resend_server", "--port", "0", "--rate-limit", "0"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                start_new_session=True,
            )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()  # it prints its URL once listening
        if not self.url.startswith("http"):
            self.stop()
            raise RuntimeError(f"the local Resend server did not start: {self._log_path.read_text()[-2000:]}")
        return self

    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/_local/stats")

    def deliveries(self) -> dict[str, int]:
        return self._call("GET", "/_local/deliveries")["deliveries"]

    def armed_stalls(self) -> int:
        return len(self._call("GET", "/_local/faults")["stall_next"])

    def stall_next(self, count: int, seconds: float) -> None:
        self._call("POST", "/_local/faults", {"stall_next": {"count": count, "seconds": seconds}})

    def reset(self) -> None:
        self._call("POST", "/_local/reset")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def consumer_environment(
    consumer: DeployedConsumer, *, endpoint: str, resend_url: str, overrides: Mapping[str, str]
) -> dict[str, str]:
    """The deployed function's environment, pointed at moto and the local Resend server,
    with the demo's overrides on top (each one printed by the demo)."""
    env = _python_env({k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")})
    env.update(aws_env(endpoint))
    env.update(consumer.environment)
    env.update(overrides)
    env["RESEND_API_URL"] = resend_url
    return env
