"""API Gateway's HTTP API (payload format 2.0) on loopback, in front of a Lambda handler.

`http_api_event` is the event API Gateway sends the function for one request;
`LocalHttpApi` serves a handler with it over real HTTP and turns the handler's answer
into the HTTP response, the way API Gateway reads a 2.0 response. `sendonce local api`
serves the operator API with it (the IAM caller set to the operator, so "who paused" is
recorded as behind IAM auth); the integration tests put the events and unsubscribe
handlers behind it, so the local Resend server's webhooks and a test's "mail client"
reach them over HTTP. Standard library only.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import datetime as dt
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sendonce_local.poller import LocalLambdaContext

Handler = Callable[[dict[str, Any], Any], Any]
Headers = Mapping[str, str] | Iterable[tuple[str, str]]

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
DEFAULT_STAGE = "$default"
# The media types API Gateway hands the function as text; every other body, a missing
# content-type included, arrives base64-encoded. Form posts are NOT text: the one-click
# unsubscribe POST (application/x-www-form-urlencoded) and multipart bodies reach a
# function behind an HTTP API base64-encoded, so they do here too.
TEXT_MEDIA_TYPES = frozenset({"application/json", "application/xml", "application/javascript", "application/graphql"})
RECORDED_EVENTS = 1000
_HOP_BY_HOP = frozenset({"content-length", "connection", "transfer-encoding", "keep-alive"})

log = logging.getLogger(__name__)


class _Turnstile:
    """One invocation at a time, in the order the requests reached it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._issued = 0
        self._serving = 0

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        with self._changed:
            ticket, self._issued = self._issued, self._issued + 1
            self._changed.wait_for(lambda: self._serving == ticket)
        try:
            yield
        finally:
            with self._changed:
                self._serving += 1
                self._changed.notify_all()


# Powertools' resolvers keep the current event on a class attribute (BaseRouter.current_event)
# that every resolver in the process shares: two handlers running at once in one process
# would read each other's request. So every local API of the process takes turns, first
# come first served, as one execution environment would (sent/delivered webhooks of one
# email then reach the function in the order they were posted).
_INVOCATIONS = _Turnstile()


def is_text(content_type: str | None) -> bool:
    """Whether API Gateway passes a body of this content-type as text (else base64)."""
    media_type, _, parameters = (content_type or "").partition(";")
    media_type = media_type.strip().lower()
    if not (media_type.startswith("text/") or media_type in TEXT_MEDIA_TYPES):
        return False
    charsets = [
        value.strip().strip('"').lower()
        for name, _, value in (p.partition("=") for p in parameters.split(";"))
        if name.strip().lower() == "charset"
    ]
    return all(charset in ("utf-8", "utf8") for charset in charsets)


def http_api_event(
    *,
    method: str,
    target: str,
    headers: Headers,
    body: bytes,
    caller_arn: str | None = None,
    stage: str = DEFAULT_STAGE,
    source_ip: str = "127.0.0.1",
    account_id: str = ACCOUNT_ID,
) -> dict[str, Any]:
    """The payload 2.0 event for one request.

    `target` is the path and query as the client sent them (behind a named stage,
    `/{stage}/...`, as API Gateway's rawPath keeps it). Header names are lower-cased and
    repeated headers joined with commas; cookies move to `cookies`; repeated query names
    are joined with commas. `caller_arn` is the IAM identity that signed the request
    (`requestContext.authorizer.iam`), for routes with IAM auth; without it the event has
    no authorizer, as on a public route.
    """
    parts = urlsplit(target)
    lowered: dict[str, str] = {}
    for name, value in headers.items() if isinstance(headers, Mapping) else headers:
        name = name.lower()
        lowered[name] = f"{lowered[name]},{value}" if name in lowered else value
    query: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        query[name] = f"{query[name]},{value}" if name in query else value
    text: str | None = None
    if is_text(lowered.get("content-type")):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:  # a str cannot hold these bytes: base64 keeps them as sent
            text = None
    now = time.time()
    context: dict[str, Any] = {
        "accountId": account_id,
        "apiId": "local",
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
        "stage": stage,
        "time": dt.datetime.fromtimestamp(now, dt.UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
        "timeEpoch": int(now * 1000),
    }
    if caller_arn is not None:
        caller = caller_arn.rsplit("/", 1)[-1]
        context["authorizer"] = {
            "iam": {
                "accessKey": "local",
                "accountId": account_id,
                "callerId": caller,
                "cognitoIdentity": None,
                "principalOrgId": None,
                "userArn": caller_arn,
                "userId": caller,
            }
        }
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": {k: v for k, v in lowered.items() if k != "cookie"},
        "requestContext": context,
        "isBase64Encoded": bool(body) and text is None,
    }
    if query:
        event["queryStringParameters"] = query
    if "cookie" in lowered:
        event["cookies"] = [c.strip() for c in lowered["cookie"].replace(",", ";").split(";") if c.strip()]
    if body:
        event["body"] = text if text is not None else base64.b64encode(body).decode("ascii")
    return event


def http_response(result: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers and body of the HTTP response API Gateway makes of a 2.0 answer.

    An answer without `statusCode` is the body itself: 200, JSON. Raises on an answer
    API Gateway could not read (it answers 500 then).
    """
    if not (isinstance(result, dict) and "statusCode" in result):
        return 200, [("Content-Type", "application/json")], json.dumps(result).encode()
    status = int(result["statusCode"])
    raw = result.get("body") or ""
    payload = base64.b64decode(raw) if result.get("isBase64Encoded") else str(raw).encode("utf-8")
    headers = [(str(k), str(v)) for k, v in (result.get("headers") or {}).items() if str(k).lower() not in _HOP_BY_HOP]
    headers += [("Set-Cookie", str(cookie)) for cookie in result.get("cookies") or []]
    return status, headers, payload


class LocalHttpApi:
    """Serve `handler(event, context)` on `http://host:port` (port 0: a free one) until stopped.

    One invocation at a time across every local API of the process, in arrival order
    (`_INVOCATIONS`). `handler` may be replaced while serving; `requests` holds the last
    events it was given, oldest first.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        caller_arn: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        stage: str = DEFAULT_STAGE,
        function_name: str = "sendonce-http",
        timeout_s: float = 29.0,
    ) -> None:
        self.handler = handler
        self.caller_arn = caller_arn
        self.stage = stage
        self.function_name = function_name
        self.timeout_s = timeout_s
        self.requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECORDED_EVENTS)
        self._server = _Server((host, port), _RequestHandler, self)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def invoke(self, event: dict[str, Any]) -> Any:
        with _INVOCATIONS.turn():
            self.requests.append(event)
            context = LocalLambdaContext(
                function_name=self.function_name,
                invoked_function_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{self.function_name}",
                timeout_s=self.timeout_s,
            )
            return self.handler(event, context)

    def serve_forever(self) -> None:
        """Serve in this thread until `stop()` from another, or KeyboardInterrupt."""
        self._server.serve_forever(poll_interval=0.05)

    def start(self) -> LocalHttpApi:
        """Serve in a background thread."""
        self._thread = threading.Thread(
            target=self.serve_forever, name=f"local-http-api-{self.function_name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self.close()

    def close(self) -> None:
        self._server.server_close()

    def __enter__(self) -> LocalHttpApi:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler_class: type[BaseHTTPRequestHandler], api: LocalHttpApi
    ) -> None:
        self.api = api
        super().__init__(address, handler_class)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sendonce-local-http-api"
    server: _Server

    def __getattr__(self, name: str) -> Any:
        # Every method (GET, HEAD, OPTIONS, QUERY, ...) reaches the function, as behind the
        # $default route, instead of http.server's HTML 501 page.
        if name.startswith("do_") and name[3:].isalpha() and name[3:].isupper():
            return self._dispatch
        raise AttributeError(name)

    def _dispatch(self) -> None:
        api = self.server.api
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._answer(400, [("Content-Type", "application/json")], b'{"message":"Bad Request"}')
            return
        body = self.rfile.read(length) if length else b""
        if api.stage != DEFAULT_STAGE and not (self.path == f"/{api.stage}" or self.path.startswith(f"/{api.stage}/")):
            self._answer(404, [("Content-Type", "application/json")], b'{"message":"Not Found"}')
            return
        event = http_api_event(
            method=self.command, target=self.path, headers=self.headers.items(), body=body,
            caller_arn=api.caller_arn, stage=api.stage, source_ip=self.client_address[0],
        )  # fmt: skip
        try:
            status, headers, payload = http_response(api.invoke(event))
        except Exception:  # API Gateway answers 500 when the function fails or its answer is unreadable
            log.exception("%s %s: the function failed", self.command, self.path)
            status, headers, payload = (
                500,
                [("Content-Type", "application/json")],
                b'{"message":"Internal Server Error"}',
            )
        self._answer(status, headers, payload)

    def _answer(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass
