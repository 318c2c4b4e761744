"""The operator CLI stands on the domain only: importing it, or running one of its own
commands, loads neither the Lambda handlers nor the local tooling (moto, the CDK); the
local commands (`demo`, `local`) are attached by name and imported when asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from sendonce_ops.cli import cli

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("sendonce.handlers", "sendonce_local", "moto", "aws_cdk", "jsii", "sendonce_infra")


def loaded_after(code: str) -> dict:
    """Run `code` in a fresh interpreter; the heavy modules it loaded, and what it printed."""
    probe = (
        "import contextlib, io, json, sys\n"
        "out = io.StringIO()\n"
        f"with contextlib.redirect_stdout(out):\n    {code}\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith('sendonce.handlers'))\n"
        "print(json.dumps({'modules': heavy, 'stdout': out.getvalue()}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (ROOT / "lambdas", ROOT / "src", ROOT))}
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(result.stdout)


def test_importing_the_cli_loads_no_handler_and_no_local_tooling():
    assert loaded_after("import sendonce_ops.cli")["modules"] == []


def test_an_operator_command_loads_no_handler_and_no_local_tooling():
    found = loaded_after(
        "import sendonce_ops.cli\n    sendonce_ops.cli.cli(['campaign', 'list', '--help'], standalone_mode=False)"
    )

    assert "--state" in found["stdout"] and found["modules"] == []


def test_the_help_lists_the_local_commands_and_only_then_imports_them():
    found = loaded_after("import sendonce_ops.cli\n    sendonce_ops.cli.cli(['--help'], standalone_mode=False)")

    commands = found["stdout"].split("Commands:")[1]
    assert "\n  demo " in commands and "\n  local " in commands
    assert "sendonce_local.commands" in found["modules"]
    assert not [m for m in found["modules"] if m.startswith("sendonce.handlers")]  # `local api` imports it when run


def test_without_the_local_tooling_its_commands_say_so_instead_of_a_traceback(monkeypatch):
    # None in sys.modules: `import sendonce_local.commands` raises ImportError, as when moto is missing.
    monkeypatch.setitem(sys.modules, "sendonce_local.commands", None)
    runner = CliRunner()

    listing = runner.invoke(cli, ["--help"])
    demo = runner.invoke(cli, ["demo", "--recipients", "200", "--json"])
    api = runner.invoke(cli, ["local", "api", "--port", "8080"])

    assert listing.exit_code == 0 and "(unavailable:" in listing.stdout
    for result, name in ((demo, "demo"), (api, "local")):
        assert result.exit_code == 1, result.output
        assert (
            f"error: `sendonce {name}` is unavailable: the local tooling (sendonce_local) cannot be imported"
            in result.stderr
        )
        assert "Traceback" not in result.output
