"""One boto3 session per process and AWS environment, for `wiring` and the local tooling.

Kept apart from `wiring` so that a tool needing only a session (`sendonce_local.resources`,
hence `sendonce_local.deploy`) does not import every service's modules to get one.
"""

from __future__ import annotations

import os
import threading
from functools import cache

import boto3


class _SharedSession(boto3.session.Session):
    """A boto3 session whose `client()` is serialized: a session is not safe to build
    clients from in several threads at once (its clients are safe to share)."""

    _building = threading.Lock()

    def client(self, *args, **kwargs):  # type: ignore[override]
        with self._building:
            return super().client(*args, **kwargs)


@cache
def _session_for(aws_environment: tuple[tuple[str, str], ...]) -> boto3.session.Session:
    return _SharedSession()


def aws_session() -> boto3.session.Session:
    """The process's boto3 session for its AWS environment: one, not one per service built.

    A new session loads botocore's endpoint data and each client's service model again: a
    new session and an SES client took 166 ms of CPU, a client from a session that had built
    one 6 ms (this machine, loaded). A Lambda builds its services once, but the local stack
    and the tests assemble them over and over: that was most of a test worker's CPU.

    Keyed by the `AWS_*` environment, so a process pointed elsewhere (another endpoint, other
    credentials) gets a session of its own; credentials are resolved once per environment,
    as boto3's default session does."""
    return _session_for(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
