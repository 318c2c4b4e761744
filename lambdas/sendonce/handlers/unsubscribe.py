"""One-click unsubscribe over the HTTP API (RFC 8058).

POST /u/{token} with `List-Unsubscribe=One-Click` suppresses the address (mailbox
providers send it; so does the confirmation page's button). GET /u/{token} only shows
that page: mail scanners prefetch links, so a GET never unsubscribes. A token that does
not verify is answered 403 and changes nothing.
"""

from __future__ import annotations

import html
import os
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.utilities.typing import LambdaContext

from sendonce.contract import Metric
from sendonce.domain.deliverability.unsubscribe import UnsubscribeService, is_one_click
from sendonce.domain.errors import InvalidTokenError
from sendonce.handlers.observability import count, logger, metrics
from sendonce.settings import UnsubscribeSettings
from sendonce.wiring.unsubscribe import unsubscribe_service

app = APIGatewayHttpResolver()

_HEADERS = {
    "Cache-Control": "no-store",
    # The token is in the URL: it must not leak to another site.
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    "X-Robots-Tag": "noindex",
    "X-Content-Type-Options": "nosniff",
}
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;line-height:1.5}}
button{{font-size:1rem;padding:.6rem 1.2rem;cursor:pointer}}</style></head>
<body><h1>{title}</h1>{body}</body></html>
"""


def _page(status: int, title: str, body: str) -> Response:
    return Response(
        status_code=status,
        content_type="text/html; charset=utf-8",
        body=_PAGE.format(title=html.escape(title), body=body),
        headers=dict(_HEADERS),
    )


def _forbidden() -> Response:
    count(Metric.UNSUBSCRIBE_TOKENS_REJECTED)
    return _page(
        403, "Link not valid", "<p>This unsubscribe link is not valid. Use the link from the email as it arrived.</p>"
    )


def _service() -> UnsubscribeService:
    return app.context["service"]


@app.get("/u/<token>")
def confirmation_page(token: str) -> Response:
    try:
        _, already = _service().check(token)
    except InvalidTokenError:
        return _forbidden()
    if already:
        return _page(200, "You are unsubscribed", "<p>This address will not receive these emails any more.</p>")
    form = (
        '<p>Stop receiving these emails?</p><form method="post">'
        '<input type="hidden" name="List-Unsubscribe" value="One-Click">'
        '<button type="submit">Unsubscribe</button></form>'
    )
    return _page(200, "Unsubscribe", form)


@app.post("/u/<token>")
def one_click(token: str) -> Response:
    event = app.current_event
    try:
        claims = _service().verify(token)
    except InvalidTokenError:
        return _forbidden()
    if not is_one_click(event.decoded_body, event.headers.get("content-type")):
        return _page(400, "Unsubscribe", "<p>The request did not ask to unsubscribe (List-Unsubscribe=One-Click).</p>")
    outcome = _service().unsubscribe(token)
    logger.info(
        "unsubscribed",
        extra={"campaign_id": claims.campaign_id, "recipient_id": claims.recipient_id, "new": outcome.newly_suppressed},
    )
    if outcome.newly_suppressed:
        count(Metric.RECIPIENTS_UNSUBSCRIBED)
    return _page(200, "You are unsubscribed", "<p>This address will not receive these emails any more.</p>")


@app.exception_handler(UnicodeDecodeError)
def _not_text(exc: UnicodeDecodeError) -> Response:
    # Only the request body is decoded here: bytes that are not UTF-8 are no one-click body.
    return _page(400, "Unsubscribe", "<p>The request did not ask to unsubscribe (List-Unsubscribe=One-Click).</p>")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext, service: UnsubscribeService | None = None) -> dict:
    service = service or unsubscribe_service(UnsubscribeSettings.from_env(os.environ))
    app.append_context(service=service)
    return app.resolve(event, context)
