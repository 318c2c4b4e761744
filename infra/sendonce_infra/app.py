"""Build the CDK app: one stack, configured from context, checked by cdk-nag.

The one place the app is built: app.py (what cdk.json runs for the CDK CLI), the tests
and `sendonce_local.deploy` (the demo's in-process synthesis) all call `build_app`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from sendonce_cdk.config import SendonceConfig
from sendonce_infra.feature_flags import FEATURE_FLAGS
from sendonce_infra.stack import SendonceStack


def build_app(*, context: Mapping[str, Any] | None = None, outdir: str | None = None) -> tuple[cdk.App, SendonceStack]:
    """The app and its stack. Nothing is synthesized until `app.synth()`.

    `context` goes over the feature flags (infra/sendonce_infra/feature_flags.py); when the CDK CLI runs
    the app, its context (`-c key=value`, cdk.json, cdk.context.json) goes over both.
    """
    app = cdk.App(context={**FEATURE_FLAGS, **(context or {})}, outdir=outdir)
    config = SendonceConfig.from_context(app.node.try_get_context)
    stack = SendonceStack(app, config.stack_name, stack_name=config.stack_name, config=config)
    # cdk-nag 3: findings fail synthesis unless acknowledged (SendonceStack._acknowledge_findings).
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack
