"""A forwarding proxy in front of a provider endpoint, with faults at the provider's edge.

The demo points a consumer's provider endpoint (RESEND_API_URL, or AWS_ENDPOINT_URL_SESV2
for SES) at it. Every request is passed to the real endpoint (the local Resend server,
moto's SES) unchanged; after the provider has answered a send with 2xx — it has
accepted the email — the proxy can:

- `kill_after(pid, accepted)`: SIGKILL the consumer process `pid` once `accepted` of its
  sends were accepted, before the answer reaches it: the consumer dies between the
  provider's acceptance and its own acknowledgement, whatever its code;
- `stall_next(n, seconds)`: hold the next `n` accepted answers back for `seconds`.

Standard library only; loopback only.
"""

from __future__ import annotations

import http.client
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SES_SEND_PATHS = ("/v2/email/outbound-emails",)
RESEND_SEND_PATHS = ("/emails", "/emails/batch")
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host", "te", "trailer"}


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # A killed consumer, or one that gave up on a stalled answer, leaves a dead socket
        # behind: that is the fault working, not an error worth a traceback.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class FaultProxy:
    def __init__(self, upstream: str, *, send_paths: tuple[str, ...]) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._send_paths = send_paths
        self._lock = threading.Lock()
        self._kill: tuple[int, int] | None = None  # (pid, accepted sends before the kill)
        self._accepted = 0
        self._stalls: list[float] = []
        self.killed = threading.Event()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                proxy._forward(self)

            def do_POST(self) -> None:
                proxy._forward(self)

            def do_PUT(self) -> None:
                proxy._forward(self)

            def do_DELETE(self) -> None:
                proxy._forward(self)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes stalled answers
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def kill_after(self, pid: int, accepted: int) -> None:
        with self._lock:
            self._kill = (pid, accepted)
            self._accepted = 0
            self.killed.clear()

    def stall_next(self, count: int, seconds: float) -> None:
        with self._lock:
            self._stalls.extend([seconds] * count)

    def armed_stalls(self) -> int:
        with self._lock:
            return len(self._stalls)

    def clear(self) -> None:
        with self._lock:
            self._kill = None
            self._stalls.clear()

    def _forward(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("content-length") or 0)
        body = request.rfile.read(length) if length else b""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        upstream = http.client.HTTPConnection(*self._upstream, timeout=120)
        try:
            upstream.request(request.command, request.path, body=body, headers=headers)
            response = upstream.getresponse()
            answer = response.read()
            status, answer_headers = response.status, response.getheaders()
        finally:
            upstream.close()
        path = urlsplit(request.path).path.rstrip("/")
        if request.command == "POST" and path in self._send_paths and 200 <= status < 300:
            if self._after_accept():
                request.close_connection = True
                return  # the consumer is dead; nobody reads the answer
        request.send_response(status)
        for name, value in answer_headers:
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                request.send_header(name, value)
        request.send_header("Content-Length", str(len(answer)))
        request.end_headers()
        request.wfile.write(answer)

    def _after_accept(self) -> bool:
        """True when the consumer was killed; otherwise maybe stall, then answer."""
        with self._lock:
            self._accepted += 1
            kill = self._kill
            if kill is not None and self._accepted >= kill[1]:
                self._kill = None
            else:
                kill = None
            stall = self._stalls.pop(0) if self._stalls and kill is None else 0.0
        if kill is not None:
            try:
                os.kill(kill[0], signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.killed.set()
            return True
        if stall:
            self._stopping.wait(stall)
        return False
