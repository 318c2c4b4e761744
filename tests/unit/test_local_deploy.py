"""`sendonce_local.deploy`: the context it synthesizes with, and its command line's answers
to bad input (synthesis and moto themselves: tests/infra/test_deploy_moto.py)."""

from __future__ import annotations

import pytest

from sendonce_local.deploy import cli_context, context_args, main


def test_context_reaches_the_app_as_the_cdk_cli_passes_it():
    context = {"provider": ["ses", "resend"], "send_rate": 200, "stack_name": "Local"}

    assert cli_context(context) == {"provider": "ses,resend", "send_rate": "200", "stack_name": "Local"}
    assert context_args(context) == [
        "--context",
        "provider=ses,resend",
        "--context",
        "send_rate=200",
        "--context",
        "stack_name=Local",
    ]


@pytest.mark.parametrize("argument, message", [
    ("{not json", "CONTEXT_JSON is not JSON"),
    ('["ses"]', "CONTEXT_JSON must be a JSON object"),
])  # fmt: skip
def test_bad_context_is_a_usage_error_before_anything_is_synthesized(argument, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["http://localhost:5000", argument])

    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
