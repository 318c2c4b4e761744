"""sendonce_local.function_output: what the functions a local process runs write goes to
their log file; the rest of the process still writes to its terminal."""

from __future__ import annotations

import io
import logging
import sys
import threading
from pathlib import Path

import pytest

from sendonce_local.function_output import function_output


def test_what_functions_write_goes_to_their_log_and_the_rest_to_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a terminal, and a logger whose handler was built on it (as Powertools' is, at import)
    terminal, errors = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(sys, "stderr", errors)
    handler = logging.StreamHandler(sys.stdout)
    log = logging.getLogger("sendonce-test-function-output")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    path = tmp_path / "functions.log"

    try:
        with function_output(path, handler) as routed:
            entered, may_end = threading.Event(), threading.Event()

            def invocation() -> None:  # the aggregator, on its poller's thread
                with routed.to_log():
                    log.info("stream records applied")  # Powertools' Logger
                    print('{"_aws": "metrics"}')  # Powertools' Metrics
                    print("UserWarning: No application metrics to publish", file=sys.stderr)  # warnings'
                    entered.set()
                    may_end.wait(10)

            thread = threading.Thread(target=invocation)
            thread.start()
            # When the process writes while the invocation runs
            assert entered.wait(10)
            print("demo progress")
            print("demo warning", file=sys.stderr)
            log.info("campaign resumed")  # the operator's service, on the demo's thread
            may_end.set()
            thread.join(10)
    finally:
        log.removeHandler(handler)

    # Then the functions' lines are in the log, the demo's on its terminal
    lines = path.read_text().splitlines()
    assert lines[:2] == ["stream records applied", '{"_aws": "metrics"}']
    assert "No application metrics to publish" in lines[2] and lines[-1] == "campaign resumed"
    assert terminal.getvalue().splitlines() == ["demo progress"]
    assert errors.getvalue().splitlines() == ["demo warning"]
    # and the terminal and the handler's stream are put back
    assert (sys.stdout, sys.stderr, handler.stream) == (terminal, errors, terminal)


def test_a_handler_writing_elsewhere_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    elsewhere = io.StringIO()
    handler = logging.StreamHandler(elsewhere)
    with function_output(tmp_path / "functions.log", handler):
        assert handler.stream is elsewhere
    assert handler.stream is elsewhere
