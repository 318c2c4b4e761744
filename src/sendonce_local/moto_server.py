"""moto's server as a separate process, plus readers for what it recorded.

The server runs in its own interpreter so its CPU work (SQS's per-message retention
checks, DynamoDB condition evaluation) does not compete with the code under test for
one GIL. Set ``SENDONCE_MOTO_ENDPOINT`` to reuse a server that is already running.

Sent email is read from ``GET /moto-api/data.json``, which lists every model instance
moto has created. Stock moto answers it with HTTP 500 as soon as a Lambda function
exists on a machine without Docker: reading the function's ``docker_client`` property
raises ``DockerException``, which the endpoint does not catch. ``MotoServer`` therefore
runs ``moto.server.main`` behind a small bootstrap that re-raises that error as a
``DockerException`` that is also an ``AttributeError`` (which the endpoint skips);
everything that caught ``DockerException`` before still does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from email.utils import parseaddr
from pathlib import Path
from types import TracebackType
from typing import Any

ENDPOINT_ENV = "SENDONCE_MOTO_ENDPOINT"
REGION = "us-east-1"

# Two things in moto 5.2.5's DynamoDB would make batch mode (and any concurrent consumers)
# measure or break on moto rather than on sendonce:
# - transact_write_items deep-copies a table once per item of the transaction (to roll
#   back on failure): a 100-item transaction on a 1,000-item table copies 100,000 items;
# - its server is threaded but the backend is not thread-safe: a transaction deep-copying
#   a table while another request writes to it fails with "dictionary changed size during
#   iteration" (HTTP 500).
# The server process below copies each table once per transaction (it rolls back exactly
# as before) and runs one DynamoDB call at a time, as the GIL nearly does anyway.
_DYNAMODB_PATCH = """
import copy as _copy
import functools as _functools
import threading as _threading
import types as _types

import moto.dynamodb.models as _models
from moto.dynamodb.models.table import Table as _Table

_local = _threading.local()


class _CopyEachTableOnce:
    def __getattr__(self, name):
        return getattr(_copy, name)

    def deepcopy(self, obj, *args, **kwargs):
        memo = getattr(_local, "tables", None)
        if memo is not None and isinstance(obj, _Table):
            if id(obj) not in memo:
                memo[id(obj)] = _copy.deepcopy(obj)
            return memo[id(obj)]
        return _copy.deepcopy(obj, *args, **kwargs)


_models.copy = _CopyEachTableOnce()
_transact_write_items = _models.DynamoDBBackend.transact_write_items


def transact_write_items(self, transact_items):
    _local.tables = {}
    try:
        return _transact_write_items(self, transact_items)
    finally:
        _local.tables = None


_models.DynamoDBBackend.transact_write_items = transact_write_items

_backend_lock = _threading.RLock()


def _one_at_a_time(function):
    @_functools.wraps(function)
    def wrapper(*args, **kwargs):
        with _backend_lock:
            return function(*args, **kwargs)
    return wrapper


for _name, _function in list(vars(_models.DynamoDBBackend).items()):
    if isinstance(_function, _types.FunctionType) and not _name.startswith("__"):
        setattr(_models.DynamoDBBackend, _name, _one_at_a_time(_function))
"""

_SERVER_BOOTSTRAP = _DYNAMODB_PATCH + """
import sys

import docker
import docker.errors
from moto.server import main


class DockerUnavailableError(docker.errors.DockerException, AttributeError):
    pass


_from_env = docker.from_env


def from_env(*args, **kwargs):
    try:
        return _from_env(*args, **kwargs)
    except docker.errors.DockerException as exc:
        raise DockerUnavailableError(str(exc)) from exc


docker.from_env = from_env
main(sys.argv[1:])
"""


class MotoServerError(RuntimeError):
    """moto's server did not start or did not answer."""


class MotoServer:
    """Start moto's server on a free loopback port, or reuse ``SENDONCE_MOTO_ENDPOINT``.

    ``endpoint`` uses ``localhost`` rather than ``127.0.0.1``: moto parses a bucket named
    "127" out of CloudFormation template URLs that carry an IP address.
    """

    def __init__(self, *, startup_timeout_s: float = 30.0, endpoint: str | None = None) -> None:
        self._startup_timeout_s = startup_timeout_s
        self._given_endpoint = endpoint if endpoint is not None else os.environ.get(ENDPOINT_ENV) or None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._endpoint: str | None = self._given_endpoint.rstrip("/") if self._given_endpoint else None

    @property
    def endpoint(self) -> str:
        if self._endpoint is None:
            raise MotoServerError("moto server is not started")
        return self._endpoint

    @property
    def owns_process(self) -> bool:
        """True when this object started the server (and so stops it)."""
        return self._given_endpoint is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> MotoServer:
        if self._given_endpoint:
            self._wait_until_answering(process=None)
            return self
        if self._process is not None:
            return self
        port = _free_port()
        log = tempfile.NamedTemporaryFile(prefix="moto-server-", suffix=".log", delete=False)
        self._log_path = Path(log.name)
        # The server logs every request; a pipe nobody reads would fill and block it.
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SERVER_BOOTSTRAP, "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self._endpoint = f"http://localhost:{port}"
        try:
            self._wait_until_answering(process=self._process)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None
        self._endpoint = None

    def reset(self) -> None:
        """Forget every resource in every service (POST /moto-api/reset)."""
        _request(self.endpoint, "/moto-api/reset", method="POST")

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_until_answering(self, *, process: subprocess.Popen[bytes] | None) -> None:
        deadline = time.monotonic() + self._startup_timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise MotoServerError(f"moto server exited with {process.returncode}: {self._log_tail()}")
            try:
                _request(self.endpoint, "/moto-api/config", timeout_s=2)
                return
            except (OSError, urllib.error.URLError) as exc:
                last_error = exc
                time.sleep(0.1)
        raise MotoServerError(f"moto server at {self.endpoint} did not answer: {last_error}; {self._log_tail()}")

    def _log_tail(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")[-2000:]


def aws_env(endpoint: str) -> dict[str, str]:
    """Environment for boto3 clients and subprocesses that should talk to moto only."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
    }


def ses_sent_messages(endpoint: str) -> list[dict[str, Any]]:
    """Every email moto's SES (v1 and v2) accepted, oldest first, across accounts and regions.

    Simple sends keep moto's shape (``id``, ``source``, ``subject``, ``body``,
    ``destinations: {ToAddresses, CcAddresses, BccAddresses}``); raw sends keep theirs
    (``id``, ``source``, ``raw_data``, ``destinations: [...]``). Each entry gains
    ``kind`` ("simple" or "raw") and ``recipients``: its distinct addresses, lower-cased.
    """
    try:
        data = _request(endpoint, "/moto-api/data.json")
    except urllib.error.HTTPError as exc:
        raise MotoServerError(
            f"{endpoint}/moto-api/data.json answered {exc.code}; a server not started by MotoServer fails "
            "this way once a Lambda function exists and Docker is absent"
        ) from exc
    ses = json.loads(data).get("ses", {})
    sent: list[dict[str, Any]] = []
    for message in ses.get("Message", []):
        addresses = [a for field in message.get("destinations", {}).values() for a in field]
        sent.append({**message, "kind": "simple", "recipients": _distinct_addresses(addresses)})
    # moto records a raw send's recipients from both Destination and the To/Cc headers,
    # so an address given in both appears twice; SES delivers one copy.
    for message in ses.get("RawMessage", []):
        sent.append({**message, "kind": "raw", "recipients": _distinct_addresses(message.get("destinations", []))})
    return sent


def ses_deliveries(endpoint: str) -> dict[str, int]:
    """How many emails each recipient address received, from moto's SES record."""
    counts: Counter[str] = Counter()
    for message in ses_sent_messages(endpoint):
        counts.update(message["recipients"])
    return dict(counts)


def _distinct_addresses(addresses: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for address in addresses:
        seen.setdefault(parseaddr(address)[1].strip().lower() or address, None)
    return list(seen)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _request(endpoint: str, path: str, *, method: str = "GET", timeout_s: float = 30.0) -> bytes:
    request = urllib.request.Request(endpoint.rstrip("/") + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - loopback moto only
        return response.read()
