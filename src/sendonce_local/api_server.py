"""The operator API's Lambda handler served on loopback, as API Gateway's HTTP API would call it.

Each HTTP request becomes an API Gateway HTTP API (payload format 2.0) event, with the
IAM caller in ``requestContext.authorizer.iam`` set to the identity the server runs as
(so "who paused" is recorded as it would be behind IAM auth); the handler's response
dict becomes the HTTP response. Standard library only.
"""

from __future__ import annotations

import base64
import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sendonce_local.poller import LocalLambdaContext

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]

_TEXT_TYPES = ("application/json", "text/", "application/x-www-form-urlencoded", "application/xml")


def http_api_event(
    *,
    method: str,
    target: str,
    headers: dict[str, str],
    body: bytes,
    caller_arn: str,
    source_ip: str = "127.0.0.1",
    account_id: str = "123456789012",
) -> dict[str, Any]:
    """An API Gateway HTTP API v2 event for one request (``target`` is path?query)."""
    parts = urlsplit(target)
    lowered = {k.lower(): v for k, v in headers.items()}
    query: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        query[name] = f"{query[name]},{value}" if name in query else value
    content_type = lowered.get("content-type", "")
    is_text = not body or any(content_type.startswith(t) for t in _TEXT_TYPES)
    try:
        text = body.decode("utf-8") if is_text else None
    except UnicodeDecodeError:
        text = None
    now = time.time()
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": {k: v for k, v in lowered.items() if k != "cookie"},
        "requestContext": {
            "accountId": account_id,
            "apiId": "local",
            "authorizer": {
                "iam": {
                    "accessKey": "local",
                    "accountId": account_id,
                    "callerId": caller_arn.rsplit("/", 1)[-1],
                    "cognitoIdentity": None,
                    "principalOrgId": None,
                    "userArn": caller_arn,
                    "userId": caller_arn.rsplit("/", 1)[-1],
                }
            },
            "domainName": lowered.get("host", "localhost"),
            "domainPrefix": "local",
            "http": {
                "method": method,
                "path": parts.path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": "$default",
            "stage": "$default",
            "time": dt.datetime.fromtimestamp(now, dt.UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": text is None,
    }
    if query:
        event["queryStringParameters"] = query
    if "cookie" in lowered:
        event["cookies"] = [c.strip() for c in lowered["cookie"].split(";") if c.strip()]
    if body:
        event["body"] = text if text is not None else base64.b64encode(body).decode("ascii")
    return event


class LocalApiServer:
    """Serve ``handler(event, context)`` on ``http://host:port`` (port 0: a free one)."""

    def __init__(self, handler: Handler, *, caller_arn: str, host: str = "127.0.0.1", port: int = 0,
                 function_timeout_s: float = 29.0):
        self._handler = handler
        self._caller_arn = caller_arn
        self._timeout_s = function_timeout_s
        self._server = ThreadingHTTPServer((host, port), _RequestHandler)
        self._server.daemon_threads = True
        self._server.api = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None
        # One request at a time, as in one Lambda execution environment: the Powertools
        # resolver keeps the current event on a module-level app.
        self._invoke_lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.2)

    def start(self) -> LocalApiServer:
        self._thread = threading.Thread(target=self.serve_forever, name="local-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop a server started with `start()`."""
        self._server.shutdown()
        self.close()
        if self._thread:
            self._thread.join(timeout=5)

    def close(self) -> None:
        self._server.server_close()

    def __enter__(self) -> LocalApiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        with self._invoke_lock:
            context = LocalLambdaContext(
                function_name="sendonce-api",
                invoked_function_arn="arn:aws:lambda:local:123456789012:function:sendonce-api",
                timeout_s=self._timeout_s,
            )
            return self._handler(event, context)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sendonce-local-api"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def __getattr__(self, name: str) -> Any:
        # Any other method (HEAD, OPTIONS, TRACE, ...) goes to the function too, which answers
        # it as API Gateway would pass it on, instead of http.server's HTML 501 page.
        if name.startswith("do_") and name[3:].isalpha() and name[3:].isupper():
            return lambda: self._dispatch(name[3:])
        raise AttributeError(name)

    def _dispatch(self, method: str) -> None:
        api: LocalApiServer = self.server.api  # type: ignore[attr-defined]
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        event = http_api_event(
            method=method, target=self.path, headers=dict(self.headers.items()), body=body,
            caller_arn=api._caller_arn, source_ip=self.client_address[0],
        )
        try:
            response = api.invoke(event)
            status = int(response.get("statusCode", 200))
            raw = response.get("body") or ""
            payload = base64.b64decode(raw) if response.get("isBase64Encoded") else raw.encode("utf-8")
            headers = dict(response.get("headers") or {})
            cookies = list(response.get("cookies") or [])
        except Exception as exc:  # noqa: BLE001 - API Gateway answers 500 when the function fails
            status, payload, cookies = 500, f'{{"message": "Internal Server Error: {type(exc).__name__}"}}'.encode(), []
            headers = {"Content-Type": "application/json"}
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "connection"):
                self.send_header(name, str(value))
        for cookie in cookies:
            self.send_header("Set-Cookie", cookie)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass
