"""Synthesizing the app for tests, and reading what came out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

FULL_CONTEXT: dict[str, Any] = {
    "stack_name": "SendonceFull",
    "provider": "ses,resend",
    "sender_domain": "mail.example.org",
    "ses_configuration_set": "sendonce-events",
    "resend_api_key_secret_name": "sendonce/test-resend-key",
    "resend_webhook_secret_name": "sendonce/test-webhook-secret",
    "unsubscribe_key_secret_name": "sendonce/test-unsubscribe-key",
    "unsubscribe_base_url": "https://unsubscribe.example.org",
    "feedback_id_sender_id": "acmemail",
    "feedback_id_stream": "newsletter",
    "feedback_id_customer": "acme-eu",
    # Caps per mailbox-provider group, a group of the deployment's own among them (JSON, as -c gives it).
    "mailbox_groups": '{"comcast": ["comcast.net"]}',
    "pacing": '{"google": 40, "comcast": 5}',
    "warmup": '{"mail.example.org": {"start": "2026-12-07", "ramp": "double-from-500"}}',
    "recipients_bucket": "acme-recipient-lists",
    "oncall_email": "oncall@example.org",
    "oncall_https_url": "https://pager.example.org/hooks/sendonce",
    "send_rate": "200",
    "removal_policy": "destroy",
    # Flood protection from context, as `-c key=value` strings.
    "unsubscribe_rate_limit": "20",
    "unsubscribe_burst_limit": "40",
    "webhook_rate_limit": "300",
    "webhook_burst_limit": "600",
    "unsubscribe_reserved_concurrency": "5",
    "api_reserved_concurrency": "4",
    "account_concurrency": "2000",
}


@dataclass(frozen=True)
class Synthesized:
    context: dict[str, Any]
    outdir: Path
    template: dict[str, Any]
    config: Any  # sendonce_cdk.config.SendonceConfig

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.template["Resources"]

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == resource_type}

    def only(self, resource_type: str) -> tuple[str, dict[str, Any]]:
        found = self.of_type(resource_type)
        assert len(found) == 1, f"expected one {resource_type}, found {list(found)}"
        return next(iter(found.items()))

    @cached_property
    def assertions(self) -> Any:
        """`aws_cdk.assertions.Template` over the synthesized template."""
        from aws_cdk.assertions import Template

        return Template.from_json(self.template)

    @property
    def validation_report(self) -> dict[str, Any]:
        return json.loads((self.outdir / "validation-report.json").read_text())


def feature_flags() -> dict[str, Any]:
    """The app's CDK feature flags, for an app of the tests' own."""
    from sendonce_infra.feature_flags import FEATURE_FLAGS

    return dict(FEATURE_FLAGS)


def synthesize(tmp_path_factory: pytest.TempPathFactory, name: str, overrides: dict[str, Any]) -> Synthesized:
    from sendonce_infra.app import build_app

    context = {**feature_flags(), **overrides}
    outdir = tmp_path_factory.mktemp(name)
    app, stack = build_app(context=overrides, outdir=str(outdir))
    assembly = app.synth()
    template = assembly.get_stack_by_name(stack.stack_name).template
    return Synthesized(context=context, outdir=outdir, template=template, config=stack.config)
