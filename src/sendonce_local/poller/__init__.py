"""A local stand-in for Lambda's SQS event source mapping, run against moto's server.

moto cannot run Lambda code (invoke needs Docker), and its own event source mapping
raises receive counts without running anything, so local runs switch moto's mappings
off (``disable_moto_event_source_mappings``) and poll with ``EventSourcePoller``:

- each of ``max_concurrency`` workers long-polls the queue for up to ``batch_size``
  messages and invokes the handler with Lambda's SQS event shape and a context whose
  remaining time counts down from the function timeout;
- on a normal return it deletes every message except the ``batchItemFailures``
  (an invalid response fails the whole batch, as Lambda does);
- if the handler raises, or runs past the function timeout, it deletes nothing and the
  batch returns after the visibility timeout. A timed-out handler cannot be killed: it
  keeps running in the background like a stale consumer, which the ledger must fence.

Redrive to the dead-letter queue after ``maxReceiveCount`` is left to the queue itself.

As a process (so chaos tests can kill a real consumer)::

    python -m sendonce_local.poller --queue-url URL --handler module:function \
        [--init module:function] [--batch-size N] [--timeout S] [--concurrency N] \
        [--function-name NAME] [--idle-seconds S] [--max-seconds S]

``--init`` is called once before polling starts, as Lambda runs a function's
initialisation outside its timeout: a runtime built there does not eat the first
invocation's time budget.

Clients come from the environment (``AWS_ENDPOINT_URL`` ...). Handler output goes to
stdout as usual; the poller's last stdout line is one JSON object of counters.

The pieces: event_source.py (``EventSourcePoller``: workers, invocations, timeouts,
deletes, idleness), lambda_event.py (Lambda's SQS event and context), moto_mappings.py
(switching moto's own mappings off) and process.py (the command line above; __main__.py
runs it). Every name is importable from ``sendonce_local.poller``.
"""

from __future__ import annotations

from sendonce_local.poller.event_source import EventSourcePoller, NotIdleError, PollerCounters
from sendonce_local.poller.lambda_event import Handler, LocalLambdaContext, build_sqs_event
from sendonce_local.poller.moto_mappings import disable_moto_event_source_mappings
from sendonce_local.poller.process import import_handler, main

__all__ = [
    "EventSourcePoller",
    "Handler",
    "LocalLambdaContext",
    "NotIdleError",
    "PollerCounters",
    "build_sqs_event",
    "disable_moto_event_source_mappings",
    "import_handler",
    "main",
]
