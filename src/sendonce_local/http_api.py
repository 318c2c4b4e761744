"""An API Gateway HTTP API (payload format 2.0) on loopback, in front of a Lambda handler.

Each request becomes the event API Gateway would send to the function (lower-cased
headers, rawPath, rawQueryString, body, base64 for non-text bodies) and the handler's
answer becomes the HTTP response. Integration tests put the events and unsubscribe
handlers behind it, so the local Resend server's webhooks and a test's "mail client"
reach them over real HTTP.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from sendonce_local.poller import LocalLambdaContext

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
_TEXT_TYPES = ("text/", "application/json", "application/x-www-form-urlencoded", "multipart/form-data")


def build_http_api_event(method: str, path: str, headers: dict[str, str], body: bytes, *, stage: str = "$default") -> dict[str, Any]:
    parts = urlsplit(path)
    lowered = {k.lower(): v for k, v in headers.items()}
    text = any(t in lowered.get("content-type", "") for t in _TEXT_TYPES) or not body
    if text and body:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:  # API Gateway passes bytes that are not UTF-8 as base64
            text = False
    now = time.time()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": lowered,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": lowered.get("host", "localhost"),
            "domainPrefix": "local",
            "http": {
                "method": method,
                "path": parts.path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": "$default",
            "stage": stage,
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "body": (body.decode() if text else base64.b64encode(body).decode()) if body else None,
        "isBase64Encoded": bool(body) and not text,
    }


class LocalHttpApi:
    def __init__(self, handler: Handler, *, host: str = "127.0.0.1", port: int = 0, function_name: str = "sendonce-http",
                 timeout_s: float = 30.0):
        self.handler = handler
        self.host = host
        self.requested_port = port
        self.function_name = function_name
        self.timeout_s = timeout_s
        self.requests: list[dict[str, Any]] = []  # the events the handler saw, in order
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("not started")
        return f"http://{self.host}:{self._httpd.server_address[1]}"

    def invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        context = LocalLambdaContext(
            function_name=self.function_name,
            invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}",
            timeout_s=self.timeout_s,
        )
        with self._lock:
            self.requests.append(event)
        return self.handler(event, context)

    def start(self) -> LocalHttpApi:
        api = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _dispatch(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                event = build_http_api_event(self.command, self.path, dict(self.headers.items()), body)
                try:
                    result = api.invoke(event)
                except Exception as error:  # the function failed: API Gateway answers 500
                    result = {"statusCode": 500, "body": json.dumps({"message": f"Internal Server Error: {error!r}"})}
                status = int(result.get("statusCode", 200))
                payload = result.get("body") or ""
                data = base64.b64decode(payload) if result.get("isBase64Encoded") else payload.encode()
                self.send_response(status)
                for name, value in (result.get("headers") or {}).items():
                    self.send_header(name, str(value))
                for name, values in (result.get("multiValueHeaders") or {}).items():
                    for value in values:
                        self.send_header(name, str(value))
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch

            def __getattr__(self, name: str) -> Any:
                # Every other method (HEAD, OPTIONS, QUERY, ...) reaches the function too, as
                # behind API Gateway's $default route, not http.server's HTML 501 page.
                if name.startswith("do_") and name[3:].isalpha() and name[3:].isupper():
                    return self._dispatch
                raise AttributeError(name)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer((self.host, self.requested_port), _Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> LocalHttpApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
