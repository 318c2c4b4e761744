"""The mutant harness of the model check (tests/model/mutants.py) must leave the real code
exactly as it found it: a later run replays each counterexample on the real code."""

from __future__ import annotations

import contextlib
import inspect

import pytest

from tests.model import mutants


@pytest.mark.parametrize("name", list(mutants.MUTANTS))
def test_each_mutant_restores_what_it_replaced(name, monkeypatch):
    touched = []
    original = mutants.replaced

    @contextlib.contextmanager
    def recording(owner, attr, value):
        touched.append((owner, attr, inspect.getattr_static(owner, attr)))
        with original(owner, attr, value):
            assert inspect.getattr_static(owner, attr) is value
            yield

    monkeypatch.setattr(mutants, "replaced", recording)
    with mutants.MUTANTS[name]():
        pass
    assert touched, "the mutant replaced nothing"
    for owner, attr, before in touched:
        assert inspect.getattr_static(owner, attr) is before, f"{owner.__name__}.{attr} not restored"
