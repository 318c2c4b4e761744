"""The HTTP plumbing around LocalResendServer.handle."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sendonce_local.resend_server.wire import (
    _ApiError,
)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops SYNs under concurrent clients: 1 s retransmit stalls
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], resend: Any):
        self.resend = resend
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sendonce-local-resend/1"
    server: _HttpServer

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        headers = {name: value for name, value in self.headers.items()}
        try:
            status, reply_headers, payload = self.server.resend.handle(method, self.path, headers, body)
        except Exception as error:  # noqa: BLE001 - a bug here must still reach the client as Resend's JSON 500
            failure = _ApiError(500, "application_error", f"local server error: {error!r}").reply()
            status, reply_headers, payload = 500, {"content-type": "application/json"}, failure.encoded()
        try:
            self.send_response(status)
            for name, value in reply_headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (a timeout during a stall); the server state is already final.
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.resend.verbose:
            super().log_message(format, *args)
