"""Fuzzing fixtures: the operator API on the local API server (`sendonce local api`'s
server), over moto's tables and queue, and a tally of what the fuzzers sent."""

from __future__ import annotations

import collections
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import deliverability, resend_server, system  # noqa: F401 - fixtures reused

# Every request's read timeout: a hang guard, not a timing check. A loaded CI machine once
# took over 10 s to answer one operator call (a ReadTimeout that failed the sequences test).
REQUEST_TIMEOUT_S = 120
TALLY = collections.Counter()
TALLY_FILE = Path(__file__).with_name(".fuzz-tally.json")


@pytest.fixture(scope="session", autouse=True)
def _write_tally() -> Iterator[None]:
    """Requests sent per target, written for the record (docs/testing figures)."""
    yield
    if TALLY:
        TALLY_FILE.write_text(json.dumps(dict(sorted(TALLY.items())), indent=1) + "\n")


def counting(handler, target: str, statuses: collections.Counter, answers: collections.Counter | None = None):
    """`handler`, counting its requests (TALLY), its statuses and, in `answers`, each
    (`METHOD /path` with a campaign id shown as `{id}`, status)."""

    def handle(event, context):
        TALLY[target] += 1
        response = handler(event, context)
        status = response.get("statusCode", 200)
        statuses[status] += 1
        if answers is not None:
            method = event["requestContext"]["http"]["method"]
            answers[(f"{method} {re.sub(r'^/campaigns/[^/]+', '/campaigns/{id}', event['rawPath'])}", status)] += 1
        return response

    return handle


@pytest.fixture
def operator_api(system):  # noqa: F811
    from sendonce.handlers import api
    from sendonce_local.http_api import LocalHttpApi

    statuses: collections.Counter = collections.Counter()
    answers: collections.Counter = collections.Counter()
    handler = counting(
        functools.partial(api.lambda_handler, service=system.operator), "operator API", statuses, answers
    )
    with LocalHttpApi(
        handler, caller_arn="arn:aws:iam::123456789012:user/fuzz", function_name="sendonce-api"
    ) as server:
        server.statuses = statuses  # type: ignore[attr-defined]
        server.answers = answers  # type: ignore[attr-defined]
        yield server


@pytest.fixture
def public(system, deliverability):  # noqa: F811
    """The two public local APIs (unsubscribe, webhooks), each request counted per target."""
    for api, target in ((deliverability.unsubscribe_api, "unsubscribe"), (deliverability.events_api, "webhooks")):
        inner = api.handler

        def counted(event, context, inner=inner, target=target):
            TALLY[target] += 1
            return inner(event, context)

        api.handler = counted
    return deliverability
