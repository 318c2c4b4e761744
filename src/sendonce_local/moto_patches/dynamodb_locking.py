"""moto's DynamoDB under one lock: its backend's calls (a defect fix) and, with the speed
patches, whole requests.

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_dynamodb_locking.py.
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable
from typing import Any

from sendonce_local.moto_patches.replacing import Replace

# One lock for all of moto's DynamoDB in this process: the backend's calls (a defect fix)
# and, with the speed patches, whole requests. Re-entrant: backend calls nest.
DYNAMODB_LOCK = threading.RLock()


def dynamodb_backend_one_call_at_a_time(replace: Replace) -> None:
    """The threaded server calls moto's DynamoDB backend from several threads at once.

    ``moto_server`` serves each request on its own thread, and ``DynamoDBBackend`` has no
    locking. A transaction deep-copying a table while another request writes to it fails
    with ``RuntimeError: dictionary changed size during iteration`` (HTTP 500), and a
    cancelled transaction's whole-table rollback silently undoes writes other requests
    made meanwhile: three threads each claiming and completing 6 groups of 100 on one
    table got 13 of 18 groups refused with a 500.

    The patch wraps every method defined on ``DynamoDBBackend`` in one re-entrant lock, so
    the backend applies one call at a time (as DynamoDB applies each item's writes
    atomically). moto's DynamoDB is CPU-bound under one GIL: no throughput is lost.
    """
    import moto.dynamodb.models as models

    def one_at_a_time(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with DYNAMODB_LOCK:
                return function(*args, **kwargs)

        return locked

    for name, function in list(vars(models.DynamoDBBackend).items()):
        if isinstance(function, types.FunctionType) and not name.startswith("__"):
            replace(models.DynamoDBBackend, name, one_at_a_time(function))


def dynamodb_requests_one_at_a_time(replace: Replace) -> None:
    """Let a DynamoDB request read items without copying them.

    The defect fix locks each backend call, not the writing of the response, so stock
    moto copies what it reads (a query deep-copies its page) before it leaves the lock.
    This patch holds the same lock for the whole request (``DynamoHandler.call_action``),
    which ``queries_read_one_partition`` needs to answer from the live items.

    Trade: none measurable; moto's DynamoDB is CPU-bound under one GIL.
    """
    import moto.dynamodb.responses as responses

    stock = responses.DynamoHandler.call_action

    @functools.wraps(stock)
    def call_action(self: Any) -> Any:
        with DYNAMODB_LOCK:
            return stock(self)

    replace(responses.DynamoHandler, "call_action", call_action)
