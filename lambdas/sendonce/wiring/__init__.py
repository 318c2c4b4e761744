"""Builds the real services from validated settings: the only place that builds clients,
reads secrets and registers providers. Nothing here runs at import time.

One module per function (consumer, api, jobs, events, unsubscribe, aggregator; preview for
the consumer's preview and test sends, audit for the CLI's audits and the jobs worker's,
operator for what only the CLI builds), over the shared parts (clients, stores, secrets,
providers). One rule names them all: `build_<thing>(settings, clients, ...)` builds a thing
from its settings and a `Clients` (keyword-only extras are test hooks), and
`<thing>(settings)` is the same thing built once per execution environment (`lru_cache` on
the frozen settings) on the default `clients()`.
Import from the module that builds what you need (`from sendonce.wiring.consumer import
consumer_runtime`); this package re-exports nothing.
"""
