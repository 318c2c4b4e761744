"""What the functions a local process runs write goes to a log file, as Lambda sends a
function's output to CloudWatch, not to the process's terminal.

The demo runs the counters' aggregator in a thread of its own process, and the operator's
service on its own calls: their Powertools log lines, metric documents and warnings would
otherwise land between the demo's progress lines. Powertools writes log lines through a
handler holding the stream it was given when built (sys.stdout, at import), metrics with
`print` and warnings through `warnings` (sys.stderr). So within `function_output(path,
handler)`:
- the handler writes to the file, whichever thread logs;
- sys.stdout and sys.stderr are `FunctionOutput`s: a thread inside `to_log()` (a function's
  invocation) writes to the file, every other thread to the stream it replaced.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


class FunctionOutput:
    """A stand-in for sys.stdout or sys.stderr, routing each thread's writes."""

    def __init__(self, terminal: IO[str], log: IO[str], in_function: threading.local) -> None:
        self.terminal = terminal
        self._log = log
        self._in_function = in_function

    def _target(self) -> IO[str]:
        return self._log if getattr(self._in_function, "on", False) else self.terminal

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding...: the terminal's
        return getattr(self.terminal, name)


class FunctionLog:
    def __init__(self, log: IO[str]) -> None:
        self.log = log
        self._in_function = threading.local()
        self.stdout = FunctionOutput(sys.stdout, log, self._in_function)
        self.stderr = FunctionOutput(sys.stderr, log, self._in_function)

    @contextlib.contextmanager
    def to_log(self) -> Iterator[None]:
        """This thread's standard output and error go to the log meanwhile."""
        self._in_function.on = True
        try:
            yield
        finally:
            self._in_function.on = False
            self.log.flush()


@contextlib.contextmanager
def function_output(path: Path, *handlers: logging.Handler) -> Iterator[FunctionLog]:
    """Those of `handlers` that write to sys.stdout write to `path` meanwhile (appended), and
    sys.stdout and sys.stderr route by thread (`FunctionLog.to_log`); all put back after."""
    with path.open("a", encoding="utf-8") as log:
        routed = FunctionLog(log)
        terminal_out, terminal_err = sys.stdout, sys.stderr
        moved = [h for h in handlers if isinstance(h, logging.StreamHandler) and h.stream is terminal_out]
        for handler in moved:
            handler.setStream(log)
        sys.stdout, sys.stderr = routed.stdout, routed.stderr  # type: ignore[assignment]
        try:
            yield routed
        finally:
            sys.stdout, sys.stderr = terminal_out, terminal_err
            for handler in moved:
                handler.setStream(terminal_out)
