"""The `sendonce` commands that run sendonce on this machine: `sendonce local api` and
`sendonce demo` (its body is sendonce_local/demo/run.py).

sendonce_ops/cli.py attaches them by name (`LOCAL_COMMANDS`) and imports this module
only when one of them is listed or run: the operator CLI itself imports neither the
Lambda handlers nor this tooling.
"""

from __future__ import annotations

import functools
import signal
import sys
from typing import Any

import click

from sendonce_local.demo.run import demo
from sendonce_ops.cli import Cli, pass_cli

__all__ = ["demo", "local"]


@click.group()
def local() -> None:
    """Run parts of sendonce on this machine (against moto or a real account)."""


@local.command("api")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@pass_cli
def local_api(cli: Cli, host: str, port: int) -> None:
    """Serve the operator HTTP API's handler on loopback, as API Gateway would call it.

    Requests carry your AWS identity as the IAM caller, so state changes record it.
    """
    from sendonce.handlers import api
    from sendonce_local.http_api import LocalHttpApi

    handler = functools.partial(api.lambda_handler, service=cli.service())
    server = LocalHttpApi(handler, caller_arn=cli.operator(), host=host, port=port, function_name="sendonce-api")
    cli.warn(
        f"sendonce API on {server.url} (OpenAPI: {server.url}/openapi.json, Swagger UI: {server.url}/swagger); "
        "Ctrl-C stops"
    )
    sys.stderr.flush()

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
