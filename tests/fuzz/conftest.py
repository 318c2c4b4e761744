"""Fuzzing fixtures: the operator API on the local API server (`sendonce local api`'s
server), over moto's tables and queue, and a tally of what the fuzzers sent."""

from __future__ import annotations

import collections
import functools
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import hypothesis
import pytest

from tests.integration.conftest import deliverability, resend_server, system  # noqa: F401 - fixtures reused

# Every request's read timeout: a hang guard, not a timing check. A loaded CI machine once
# took over 10 s to answer one operator call (a ReadTimeout that failed the sequences test).
REQUEST_TIMEOUT_S = 120


def fuzz_tests_per_operation(schema, run: Callable, settings: hypothesis.settings, prefix: str) -> dict[str, Callable]:
    """`run(case, <fixtures>)` as one test function per operation of `schema`, named
    `<prefix>_<method>_<path>`; put them in the test module's namespace (`globals().update`).

    Not `schema.parametrize()` on one function: it names its items by operation, but pytest
    9.2 builds a node id from the function's name alone, so all the items had one node id and
    pytest-xdist ran only the first operation. That is how the suite's fuzz passed while
    requests to seven other routes failed (issue 36)."""
    tests = {}
    for operation in (result.ok() for result in schema.get_all_operations()):
        method, path = operation.method.upper(), operation.path
        name = f"{prefix}_" + re.sub(r"[^a-z0-9]+", "_", f"{method} {path}".lower()).strip("_")

        @schema.include(method=method, path=path).parametrize()
        @settings
        @functools.wraps(run)
        def test(*args, **kwargs):
            return run(*args, **kwargs)

        test.__name__ = test.__qualname__ = name
        tests[name] = test
    return tests


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
def public(system, deliverability):  # noqa: F811
    """The two public local APIs (unsubscribe, webhooks), each request counted per target."""
    for api, target in ((deliverability.unsubscribe_api, "unsubscribe"), (deliverability.events_api, "webhooks")):
        inner = api.handler

        def counted(event, context, inner=inner, target=target):
            TALLY[target] += 1
            return inner(event, context)

        api.handler = counted
    return deliverability
