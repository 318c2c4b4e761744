"""Deploy the repository's CDK app (`infra`) into moto's server, for the demo and the tests.

`deploy_to_moto` synthesizes in this process (`sendonce_infra.app.build_app`, the app the CDK CLI
runs, with the same feature flags and the same context rules as `cdk synth -c key=value`),
publishes the file assets the way `cdk deploy` would (zips into the bootstrap bucket),
and creates the stack with CloudFormation's `CreateStack`. No CDK CLI and no
node_modules: only `node` on PATH (or JSII_NODE) for jsii, so it runs from an installed
wheel as well as from a checkout. It skips `cdk bootstrap` (~12 s) and the CLI's deploy
(~12 s): moto needs only the assets bucket and the bootstrap version parameter.

The real `cdk bootstrap` + `cdk deploy` path (`run_cdk`, `cdk_env`, `context_args`) runs
the npm CLI of a checkout; tests/infra/test_deploy_moto.py exercises both.

As a process (how `sendonce demo` runs it, so jsii's Node runtime does not stay in the
demo's process)::

    python -m sendonce_local.deploy ENDPOINT [CONTEXT_JSON]
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions

from sendonce.contract import Output
from sendonce_local.resources import ensure_schedule_group

DEFAULT_REGION = "us-east-1"
FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "aws_session_token": "testing"}
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
# What `cdk bootstrap` (v30+) writes; the template's CheckBootstrapVersion rule reads it.
BOOTSTRAP_VERSION = "30"
_FINAL_FAILURE = ("FAILED", "ROLLBACK")
# jsii names the Node major versions whose end-of-life banner it keeps quiet, comma-separated.
_SILENCE_END_OF_LIFE = "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"


class LocalDeployError(RuntimeError):
    """The CDK CLI, the app's synthesis or moto's CloudFormation refused the app."""


def cdk_env(endpoint: str, *, region: str = DEFAULT_REGION, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for the npm CDK CLI talking to moto only.

    `localhost`, not 127.0.0.1, in the endpoint: moto would read a bucket named "127" out
    of template URLs.
    """
    env = dict(os.environ if base is None else base)
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_CA_BUNDLE"):
        env.pop(name, None)
    env.update(
        {
            "AWS_ACCESS_KEY_ID": FAKE_CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": FAKE_CREDENTIALS["aws_secret_access_key"],
            "AWS_SESSION_TOKEN": FAKE_CREDENTIALS["aws_session_token"],
            "AWS_DEFAULT_REGION": region,
            "AWS_REGION": region,
            "AWS_ENDPOINT_URL": endpoint,
            "CDK_DISABLE_CLI_TELEMETRY": "true",
        }
    )
    return env


def cli_context(context: Mapping[str, Any] | None) -> dict[str, str]:
    """Context as `cdk -c key=value` hands it to the app: strings, lists joined with commas."""
    found: dict[str, str] = {}
    for key, value in (context or {}).items():
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        found[str(key)] = str(value)
    return found


def context_args(context: Mapping[str, Any] | None) -> list[str]:
    args: list[str] = []
    for key, value in cli_context(context).items():
        args += ["--context", f"{key}={value}"]
    return args


def run_cdk(
    args: Sequence[str], *, env: Mapping[str, str], project_dir: Path, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the npm CDK CLI of the CDK project in `project_dir` (cdk.json, node_modules); raise
    with its output on failure.

    `node_modules/.bin` goes first on PATH so the CLI (`#!/usr/bin/env node`) and jsii run
    on the project's pinned Node.
    """
    node_bin = Path(project_dir) / "node_modules" / ".bin"
    cli = node_bin / "cdk"
    if not cli.exists():
        raise LocalDeployError(f"{cli} is missing: run `npm ci` (or `make npm`) in {project_dir}")
    run_env = {**env, "PATH": f"{node_bin}{os.pathsep}{env.get('PATH', '')}"}
    _silence_node_end_of_life(run_env)
    command = [str(cli), *args, "--no-notices"]
    result = subprocess.run(
        command, cwd=project_dir, env=run_env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        raise LocalDeployError(
            f"`cdk {' '.join(args)}` exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        )
    return result


def synthesize(outdir: Path, *, context: Mapping[str, Any] | None = None) -> Path:
    """Synthesize the app into `outdir` (a cloud assembly) in this process; returns it."""
    if not _node_major(os.environ):
        raise LocalDeployError("synthesis needs Node.js for jsii: no `node` on PATH (nor JSII_NODE)")
    # Before aws_cdk is first imported: importing it starts jsii's Node runtime.
    _silence_node_end_of_life(os.environ)
    try:
        from sendonce_infra.app import build_app

        app, _ = build_app(context=cli_context(context), outdir=str(outdir))
        app.synth()
    except Exception as error:  # jsii relays the app's errors as RuntimeError, cdk-nag's as ValidationFailed
        raise LocalDeployError(f"synthesizing the app failed: {error}") from error
    return outdir


def _silence_node_end_of_life(env: MutableMapping[str, str]) -> None:
    """Keep jsii's end-of-life banner for the Node it runs off stderr (it takes major versions, not a flag)."""
    major = _node_major(env)
    silenced = [v.strip() for v in env.get(_SILENCE_END_OF_LIFE, "").split(",") if v.strip()]
    if major and major not in silenced:
        env[_SILENCE_END_OF_LIFE] = ",".join([*silenced, major])


def _node_major(env: Mapping[str, str]) -> str:
    """The major version of the Node jsii will run (JSII_NODE, else `node` on PATH), or ""."""
    node = env.get("JSII_NODE") or shutil.which("node", path=env.get("PATH"))
    if not node:
        return ""
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return version.strip().lstrip("v").split(".")[0]


def deploy_to_moto(
    endpoint: str,
    *,
    context: Mapping[str, Any] | None = None,
    assembly_dir: Path | None = None,
    region: str = DEFAULT_REGION,
    disable_event_source_mappings: bool = True,
    timeout_s: float = 120,
) -> dict[str, str]:
    """Deploy the sendonce stack into moto's server at `endpoint`; return its outputs.

    Creates the stack, or updates it when it already exists. `context` is CDK context
    (`{"provider": "ses,resend"}`); pass `assembly_dir` to deploy an existing
    cloud assembly (`cdk synth` output) instead of synthesizing.

    moto runs each event source mapping it is given (and fails to invoke the function
    without Docker, pushing messages towards the DLQ), so by default the stack's
    mappings are disabled after the deploy; their settings stay readable for a local
    poller.
    """
    owned_dir: Path | None = None
    try:
        if assembly_dir is None:
            owned_dir = Path(tempfile.mkdtemp(prefix="sendonce-cdk-out-"))
            assembly_dir = synthesize(owned_dir / "cdk.out", context=context)
        clients = _Clients(endpoint, region)
        stack = _stack_artifact(assembly_dir)
        account = clients.get("sts").get_caller_identity()["Account"]
        substitutions = {"${AWS::AccountId}": account, "${AWS::Region}": region, "${AWS::Partition}": "aws"}

        template_location = _publish_assets(
            clients, assembly_dir, stack["assets_file"], stack["template_file"], substitutions
        )
        _put_bootstrap_version(clients, assembly_dir / stack["template_file"])
        outputs = _create_or_update(clients, stack["stack_name"], template_location, region, timeout_s)
        group = outputs.get(Output.SCHEDULE_GROUP_NAME.value)
        if group:  # moto's CloudFormation skips AWS::Scheduler::ScheduleGroup
            ensure_schedule_group(clients.get("scheduler"), group)
        if disable_event_source_mappings:
            _disable_event_source_mappings(clients, stack["stack_name"])
        return outputs
    finally:
        if owned_dir is not None:
            shutil.rmtree(owned_dir, ignore_errors=True)


class _Clients:
    def __init__(self, endpoint: str, region: str) -> None:
        self._session = boto3.session.Session(region_name=region, **FAKE_CREDENTIALS)
        self._endpoint = endpoint
        self._clients: dict[str, Any] = {}

    def get(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._session.client(service, endpoint_url=self._endpoint)
        return self._clients[service]


def _stack_artifact(assembly_dir: Path) -> dict[str, str]:
    manifest = json.loads((assembly_dir / "manifest.json").read_text())
    stacks = [
        (artifact_id, artifact)
        for artifact_id, artifact in manifest["artifacts"].items()
        if artifact["type"] == "aws:cloudformation:stack"
    ]
    if len(stacks) != 1:
        raise LocalDeployError(f"expected one stack in {assembly_dir}, found {[a for a, _ in stacks]}")
    artifact_id, artifact = stacks[0]
    assets = [
        manifest["artifacts"][dep]["properties"]["file"]
        for dep in artifact.get("dependencies", [])
        if manifest["artifacts"][dep]["type"] == "cdk:asset-manifest"
    ]
    return {
        "stack_name": artifact["properties"].get("stackName", artifact_id),
        "template_file": artifact["properties"]["templateFile"],
        "assets_file": assets[0] if assets else "",
    }


def _publish_assets(
    clients: _Clients, assembly_dir: Path, assets_file: str, template_file: str, substitutions: Mapping[str, str]
) -> tuple[str, str]:
    """Upload every file asset like `cdk deploy` does; return the template's (bucket, key)."""
    s3 = clients.get("s3")
    template: tuple[str, str] | None = None
    manifest = json.loads((assembly_dir / assets_file).read_text()) if assets_file else {}
    if manifest.get("dockerImages"):
        raise LocalDeployError("the app has Docker image assets; this deploy publishes files only")
    for asset in manifest.get("files", {}).values():
        source = assembly_dir / asset["source"]["path"]
        for destination in asset["destinations"].values():
            bucket = _substitute(destination["bucketName"], substitutions)
            key = _substitute(destination["objectKey"], substitutions)
            _ensure_bucket(s3, bucket)
            if asset["source"].get("packaging") == "zip":
                body = _zip_directory(source)
            else:
                body = source.read_bytes()
            s3.put_object(Bucket=bucket, Key=key, Body=body)
            if asset["source"]["path"] == template_file:
                template = (bucket, key)
    if template is None:  # an app without a template asset: upload it ourselves
        bucket = _substitute("cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}", substitutions)
        key = f"{template_file}"
        _ensure_bucket(s3, bucket)
        s3.put_object(Bucket=bucket, Key=key, Body=(assembly_dir / template_file).read_bytes())
        template = (bucket, key)
    return template


def _substitute(value: str, substitutions: Mapping[str, str]) -> str:
    for placeholder, actual in substitutions.items():
        value = value.replace(placeholder, actual)
    return value


def _ensure_bucket(s3: Any, bucket: str) -> None:
    try:
        s3.head_bucket(Bucket=bucket)
    except s3.exceptions.ClientError:
        s3.create_bucket(Bucket=bucket)


def _zip_directory(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(directory).as_posix())
    return buffer.getvalue()


def _put_bootstrap_version(clients: _Clients, template_path: Path) -> None:
    # The template's BootstrapVersion parameter is an SSM parameter type; without
    # `cdk bootstrap`, write the parameter it names so CloudFormation can resolve it.
    parameters = json.loads(template_path.read_text()).get("Parameters", {})
    name = parameters.get("BootstrapVersion", {}).get("Default")
    if not name:
        return
    ssm = clients.get("ssm")
    try:
        ssm.get_parameter(Name=name)  # `cdk bootstrap` already ran here: keep its version
    except ssm.exceptions.ParameterNotFound:
        ssm.put_parameter(Name=name, Value=BOOTSTRAP_VERSION, Type="String")


def _create_or_update(
    clients: _Clients, stack_name: str, template: tuple[str, str], region: str, timeout_s: float
) -> dict[str, str]:
    cloudformation = clients.get("cloudformation")
    bucket, key = template
    arguments = {
        "StackName": stack_name,
        "TemplateURL": f"https://s3.{region}.amazonaws.com/{bucket}/{key}",
        "Capabilities": CAPABILITIES,
    }
    if _stack_status(cloudformation, stack_name) is None:
        cloudformation.create_stack(**arguments)
    else:
        cloudformation.update_stack(**arguments)

    deadline = time.monotonic() + timeout_s
    while True:
        status = _stack_status(cloudformation, stack_name) or "MISSING"
        if status.endswith("_COMPLETE") and not any(word in status for word in _FINAL_FAILURE):
            break
        if any(word in status for word in _FINAL_FAILURE) or status == "MISSING":
            raise LocalDeployError(f"stack {stack_name} ended in {status}")
        if time.monotonic() > deadline:
            raise LocalDeployError(f"stack {stack_name} still {status} after {timeout_s} s")
        time.sleep(0.2)
    described = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    return {output["OutputKey"]: output["OutputValue"] for output in described.get("Outputs", [])}


def _stack_status(cloudformation: Any, stack_name: str) -> str | None:
    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except cloudformation.exceptions.ClientError as error:
        if "does not exist" in str(error):
            return None
        raise
    live = [s for s in stacks if s["StackStatus"] != "DELETE_COMPLETE"]
    return live[0]["StackStatus"] if live else None


def _disable_event_source_mappings(clients: _Clients, stack_name: str) -> None:
    cloudformation = clients.get("cloudformation")
    lambda_client = clients.get("lambda")
    resources = cloudformation.describe_stack_resources(StackName=stack_name)["StackResources"]
    for resource in resources:
        # moto lists the resources it skipped (alarms, policies) without a type.
        if resource.get("ResourceType") == "AWS::Lambda::EventSourceMapping" and resource.get("PhysicalResourceId"):
            lambda_client.update_event_source_mapping(UUID=resource["PhysicalResourceId"], Enabled=False)


def main(argv: Sequence[str] | None = None) -> None:
    """Deploy the app into moto's server at ENDPOINT; print the stack outputs as one JSON line."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m sendonce_local.deploy", description=main.__doc__)
    parser.add_argument("endpoint", help="moto's server, e.g. http://localhost:5000")
    parser.add_argument(
        "context", nargs="?", default="{}", help='CDK context as a JSON object, e.g. \'{"provider": "ses"}\''
    )
    args = parser.parse_args(argv)
    try:
        context = json.loads(args.context)
    except ValueError as error:
        parser.error(f"CONTEXT_JSON is not JSON: {error}")
    if not isinstance(context, dict):
        parser.error("CONTEXT_JSON must be a JSON object")
    try:
        outputs = deploy_to_moto(args.endpoint, context=context)
    except (LocalDeployError, botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        sys.exit(f"deploy failed: {error}")
    print(json.dumps(outputs))


if __name__ == "__main__":
    main()
