"""The AWS clients of one boto3 session, each built once, when first asked for: the only
place in the wiring that builds a client (tests/unit/test_wiring_rules.py holds it to that).

A botocore client is safe to share between threads and between the services of a process;
building one costs a few milliseconds of CPU and its own connection pool, so each function
builds each of its clients once. `clients()` is the default session's (`aws_session()`: one
per process and AWS environment); a tool with a session of its own (the CLI, a benchmark
hooking its session) builds `Clients(session)`.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

from botocore.config import Config

from sendonce.adapters.aws_session import aws_session

# Ledger writes are conditional, so a retried write that had in fact succeeded fails its
# condition and is read as "held" / "lease lost": safe. More attempts than botocore's
# default keep a throttled table from stranding deliveries (an SES send whose mark_sent
# fails ends unknown). The send path's functions (consumer, aggregator, audit) use it.
LEDGER_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 6})


class Clients:
    """The clients of `session`: `client(name, config)` builds each (name, config) once and
    hands the same client back; the properties name the ones the wiring uses."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._built: dict[tuple[str, int], Any] = {}
        self._configs: list[Config] = []  # kept alive: the key holds their id
        self._building = threading.Lock()

    def client(self, service_name: str, config: Config | None = None) -> Any:
        """The session's client of `service_name` with `config` (the same object each time:
        a botocore Config is compared by identity), built on first use."""
        key = (service_name, id(config))
        built = self._built.get(key)
        if built is None:
            with self._building:
                built = self._built.get(key)
                if built is None:
                    built = self.session.client(service_name, config=config)
                    if config is not None:
                        self._configs.append(config)
                    self._built[key] = built
        return built

    @property
    def dynamodb(self) -> Any:
        """DynamoDB with botocore's default retries: the operator's reads and writes."""
        return self.client("dynamodb")

    @property
    def patient_dynamodb(self) -> Any:
        """DynamoDB retried longer (LEDGER_CLIENT_CONFIG): the send path's."""
        return self.client("dynamodb", LEDGER_CLIENT_CONFIG)

    @property
    def sqs(self) -> Any:
        return self.client("sqs")

    @property
    def s3(self) -> Any:
        return self.client("s3")

    @property
    def scheduler(self) -> Any:
        return self.client("scheduler")

    @property
    def secretsmanager(self) -> Any:
        return self.client("secretsmanager")


def clients() -> Clients:
    """The clients of this process's default session for its AWS environment (`aws_session()`)."""
    return _clients_of(aws_session())


@cache
def _clients_of(session: Any) -> Clients:
    # Keyed by the session, as aws_session() is by the AWS environment: one each, never evicted.
    return Clients(session)
