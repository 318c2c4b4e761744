"""Build the CDK app: one stack, configured from context, checked by cdk-nag."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.stack import SendonceStack
from sendonce_cdk.config import SendonceConfig


def build_app(*, context: Mapping[str, Any] | None = None, outdir: str | None = None) -> tuple[cdk.App, SendonceStack]:
    """The app and its stack. Nothing is synthesized until `app.synth()`.

    When run by the CDK CLI, context comes from cdk.json and `-c key=value`; tests and
    scripts pass `context` (cdk.json's feature flags included, see tests/infra/conftest.py).
    """
    app = cdk.App(context=dict(context) if context is not None else None, outdir=outdir)
    config = SendonceConfig.from_context(app.node.try_get_context)
    stack = SendonceStack(app, config.stack_name, stack_name=config.stack_name, config=config)
    # cdk-nag 3: findings fail synthesis unless acknowledged (SendonceStack._acknowledge_findings).
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack
