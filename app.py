#!/usr/bin/env python3
"""CDK entry point (`npx cdk synth`, `npx cdk deploy`); the app is infra/ (infra/sendonce_infra/app.py,
imported as `sendonce_infra`, installed with the project); see docs/deploy.md."""

import os
from pathlib import Path

# jsii runs on the Node 22 from `npm ci` (package.json) instead of the system's EOL
# Node 20. Set before aws_cdk is imported: importing it starts the jsii runtime.
_NODE_22 = Path(__file__).resolve().parent / "node_modules" / "node" / "bin" / "node"
if "JSII_NODE" not in os.environ and _NODE_22.exists():
    os.environ["JSII_NODE"] = str(_NODE_22)

from sendonce_infra.app import build_app  # noqa: E402

if __name__ == "__main__":
    app, _ = build_app()
    app.synth()
