import socket

import pytest


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """Unit tests are pure: any socket is a bug in the test."""

    def guard(*args, **kwargs):
        raise RuntimeError("unit tests must not open sockets")

    monkeypatch.setattr(socket.socket, "connect", guard)
