"""moto's server as a separate process, plus readers for what it recorded.

The server runs in its own interpreter so its CPU work (SQS's per-message retention
checks, DynamoDB condition evaluation) does not compete with the code under test for
one GIL. Set ``SENDONCE_MOTO_ENDPOINT`` to reuse a server that is already running.

The process is stock moto with ``sendonce_local.moto_patches.DEFECT_FIXES`` applied
(``DemoMotoServer``: plus its ``SPEED_PATCHES``); docs/local-aws.md says what each fixes.
Among them: sent email is read from ``GET /moto-api/data.json``, which stock moto answers
with HTTP 500 once a Lambda function exists on a machine without Docker.
"""

from __future__ import annotations

import json
import logging
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

from sendonce_local import moto_patches

ENDPOINT_ENV = "SENDONCE_MOTO_ENDPOINT"
REGION = "us-east-1"

_SPEED_FLAG = "--sendonce-speed-patches"
_PORT_ATTEMPTS = 3
_SERVER_MAIN = "import sys; from sendonce_local.moto_server import serve; serve(sys.argv[1:])"
# The directory this package was imported from: the server process imports the same code,
# installed or not.
_IMPORT_ROOT = str(Path(__file__).resolve().parents[1])


def serve(argv: list[str]) -> None:
    """Run moto's server in this process, patched: the entry point of ``MotoServer``'s process.

    ``argv`` is moto_server's, optionally preceded by ``--sendonce-speed-patches``.
    """
    speed = bool(argv) and argv[0] == _SPEED_FLAG
    names = moto_patches.apply(speed=speed)
    # Werkzeug logs a line per request at INFO: 8-11 % of a busy server's CPU in the demo
    # (py-spy). Its warnings and errors (a request that failed in moto) are still logged.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    # The first line of the server's log: which patches this moto runs with.
    print(f"moto {moto_patches.MOTO_VERSION} patched by sendonce_local.moto_patches: {', '.join(names)}", flush=True)
    from moto.server import main

    main(argv[1:] if speed else argv)


class MotoServerError(RuntimeError):
    """moto's server did not start or did not answer."""


class MotoServer:
    """Start moto's server on a free loopback port, or reuse ``SENDONCE_MOTO_ENDPOINT``.

    ``endpoint`` uses ``localhost`` rather than ``127.0.0.1``: moto parses a bucket named
    "127" out of CloudFormation template URLs that carry an IP address.

    ``speed_patches`` adds ``moto_patches.SPEED_PATCHES`` to the defect fixes; such a
    server is always a process of its own, since a running one may not carry them.
    """

    # Set by DemoMotoServer: Ctrl-C then reaches the demo only, which stops the server in order.
    _new_session = False

    def __init__(
        self, *, startup_timeout_s: float = 30.0, endpoint: str | None = None, speed_patches: bool = False
    ) -> None:
        if speed_patches and endpoint is not None:
            raise ValueError("speed_patches needs a server of its own; a given endpoint runs whatever it runs")
        self._startup_timeout_s = startup_timeout_s
        self._speed_patches = speed_patches
        if speed_patches:
            self._given_endpoint: str | None = None
        else:
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
        # Here rather than as the server's exit status at the end of its log.
        moto_patches.check_moto_version()
        # A free port can be taken by another process before moto binds it (parallel test
        # workers start servers at once): try a new one a few times.
        for attempt in range(_PORT_ATTEMPTS):
            try:
                return self._start_on(_free_port())
            except MotoServerError as error:
                if "Address already in use" not in str(error) or attempt + 1 == _PORT_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_on(self, port: int) -> MotoServer:
        log = tempfile.NamedTemporaryFile(prefix="moto-server-", suffix=".log", delete=False)
        self._log_path = Path(log.name)
        flags = [_SPEED_FLAG] if self._speed_patches else []
        python_path = os.pathsep.join(p for p in (_IMPORT_ROOT, os.environ.get("PYTHONPATH")) if p)
        # The server's log goes to a file: a pipe nobody reads would fill and block it.
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SERVER_MAIN, *flags, "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": python_path},
            start_new_session=self._new_session,
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

    def cpu_seconds(self) -> float:
        """CPU time the server process has used so far (user + system); 0 if this object did not start it."""
        if self._process is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self._process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log (its first line names the patches it runs with)."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")[-chars:]

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
                raise MotoServerError(f"moto server exited with {process.returncode}: {self.log_tail(2000)}")
            try:
                _request(self.endpoint, "/moto-api/config", timeout_s=2)
                return
            except (OSError, urllib.error.URLError) as exc:
                last_error = exc
                time.sleep(0.1)
        raise MotoServerError(f"moto server at {self.endpoint} did not answer: {last_error}; {self.log_tail(2000)}")


class DemoMotoServer(MotoServer):
    """The demo's moto: a process of its own with the speed patches too, in its own session."""

    _new_session = True

    def __init__(self, *, startup_timeout_s: float = 30.0) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s, speed_patches=True)


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
    ``destinations: {ToAddresses, CcAddresses, BccAddresses}``; from SES v2, ``headers``:
    ``[{"Name", "Value"}, ...]``, kept by ``moto_patches.ses_headers``); raw sends keep theirs
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


def set_ses_account(
    session_or_client: Any,
    *,
    sending_enabled: bool | None = None,
    enforcement_status: str | None = None,
    max_send_rate: float | None = None,
    max_24_hour_send: float | None = None,
) -> None:
    """Set what moto's SES v2 ``GetAccount`` answers, and whether its sends are refused
    (``moto_patches.ses_account``), for the account and region the client signs for.

    ``session_or_client``: a boto3 session, an SES v2 client, or a moto endpoint URL (then as
    ``aws_env`` names it: region ``REGION``, moto's default account). A ``None`` field stays as
    it is. ``enforcement_status`` (HEALTHY, PROBATION, SHUTDOWN), ``max_send_rate`` and
    ``max_24_hour_send`` are fields moto's stand-in accepts and AWS's API lacks: boto3 would
    refuse them, so they are added to the body of a real ``PutAccountSendingAttributes``
    before it is signed. moto refuses an invalid value with ``BadRequestException``
    (botocore's ``ClientError``), changing nothing.
    """
    client = _sesv2_client(session_or_client)
    local = {
        name: value
        for name, value in (
            ("EnforcementStatus", enforcement_status),
            ("MaxSendRate", max_send_rate),
            ("Max24HourSend", max_24_hour_send),
        )
        if value is not None
    }
    params = {} if sending_enabled is None else {"SendingEnabled": sending_enabled}

    def add_local_fields(request: Any, **_: Any) -> None:
        body = json.loads(request.body or b"{}")
        body.update(local)
        request.data = json.dumps(body).encode()

    event = "before-sign.sesv2.PutAccountSendingAttributes"
    client.meta.events.register(event, add_local_fields)
    try:
        client.put_account_sending_attributes(**params)
    finally:
        client.meta.events.unregister(event, add_local_fields)


def _sesv2_client(session_or_client: Any) -> Any:
    import boto3

    if isinstance(session_or_client, str):
        env = aws_env(session_or_client)
        return boto3.client(
            "sesv2",
            endpoint_url=session_or_client,
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
    if isinstance(session_or_client, boto3.session.Session):
        return session_or_client.client("sesv2")
    return session_or_client


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
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return response.read()
