"""Deploy the real CDK app into moto's server, for the demo and the tests.

`deploy_to_moto` synthesizes with the npm CDK CLI (`cdk synth`, the same app, cdk.json
and context as a real deploy), publishes the file assets the way `cdk deploy` would
(zips into the bootstrap bucket), and creates the stack with CloudFormation's
`CreateStack`. That skips `cdk bootstrap` (~12 s) and the CLI's deploy (~12 s): moto
needs only the assets bucket and the bootstrap version parameter. The real
`cdk bootstrap` + `cdk deploy` path is exercised by tests/infra/test_deploy_moto.py.
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3

REPO_ROOT = Path(__file__).resolve().parent.parent
NODE_BIN = REPO_ROOT / "node_modules" / ".bin"
CDK_CLI = NODE_BIN / "cdk"
DEFAULT_REGION = "us-east-1"
FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "aws_session_token": "testing"}
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
# What `cdk bootstrap` (v30+) writes; the template's CheckBootstrapVersion rule reads it.
BOOTSTRAP_VERSION = "30"
_FINAL_FAILURE = ("FAILED", "ROLLBACK")


class LocalDeployError(RuntimeError):
    """The CDK CLI or moto's CloudFormation refused the app."""


def cdk_env(endpoint: str, *, region: str = DEFAULT_REGION, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for the npm CDK CLI talking to moto only.

    `node_modules/.bin` goes first on PATH so the CLI (`#!/usr/bin/env node`) and jsii
    run on the pinned Node 22. `localhost`, not 127.0.0.1, in the endpoint: moto would
    read a bucket named "127" out of template URLs.
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
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "1",
            "PATH": f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return env


def context_args(context: Mapping[str, Any] | None) -> list[str]:
    args: list[str] = []
    for key, value in (context or {}).items():
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args += ["--context", f"{key}={value}"]
    return args


def run_cdk(args: Sequence[str], *, env: Mapping[str, str], timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the npm CDK CLI from the repository root; raise with its output on failure."""
    if not CDK_CLI.exists():
        raise LocalDeployError(f"{CDK_CLI} is missing: run `npm ci` (or `make npm`)")
    command = [str(CDK_CLI), *args, "--no-notices"]
    result = subprocess.run(
        command, cwd=REPO_ROOT, env=dict(env), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        raise LocalDeployError(
            f"`cdk {' '.join(args)}` exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        )
    return result


def synthesize(outdir: Path, *, endpoint: str, context: Mapping[str, Any] | None = None) -> Path:
    """`cdk synth` into `outdir` (a cloud assembly); returns it."""
    run_cdk(["synth", "--quiet", "--output", str(outdir), *context_args(context)], env=cdk_env(endpoint))
    return outdir


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
    `cdk synth` output instead of synthesizing.

    moto runs each event source mapping it is given (and fails to invoke the function
    without Docker, pushing messages towards the DLQ), so by default the stack's
    mappings are disabled after the deploy; their settings stay readable for a local
    poller.
    """
    owned_dir: Path | None = None
    if assembly_dir is None:
        owned_dir = Path(tempfile.mkdtemp(prefix="sendonce-cdk-out-"))
        assembly_dir = synthesize(owned_dir / "cdk.out", endpoint=endpoint, context=context)
    try:
        clients = _Clients(endpoint, region)
        stack = _stack_artifact(assembly_dir)
        account = clients.get("sts").get_caller_identity()["Account"]
        substitutions = {"${AWS::AccountId}": account, "${AWS::Region}": region, "${AWS::Partition}": "aws"}

        template_location = _publish_assets(
            clients, assembly_dir, stack["assets_file"], stack["template_file"], substitutions
        )
        _put_bootstrap_version(clients, assembly_dir / stack["template_file"])
        outputs = _create_or_update(clients, stack["stack_name"], template_location, region, timeout_s)
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
    """`python -m infra.deploy_local ENDPOINT [CONTEXT_JSON]`: deploy, print the outputs as
    JSON (how `sendonce demo` runs it in the checkout without importing `infra`)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m infra.deploy_local", description=main.__doc__)
    parser.add_argument("endpoint")
    parser.add_argument("context", nargs="?", default="{}", help="CDK context as a JSON object")
    args = parser.parse_args(argv)
    try:
        outputs = deploy_to_moto(args.endpoint, context=json.loads(args.context))
    except LocalDeployError as error:
        sys.exit(f"deploy failed: {error}")
    print(json.dumps(outputs))


if __name__ == "__main__":
    main()
