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


@pytest.mark.parametrize("name", list(mutants.MUTANTS))
def test_each_mutant_reverts_a_fix_that_exists(name, monkeypatch):
    """A mutant whose target was renamed or removed would replace nothing the code reads
    (and be "caught" only by accident): the attribute must exist and the mutant must change it."""
    replacements = []
    original = mutants.replaced

    @contextlib.contextmanager
    def checking(owner, attr, value):
        assert hasattr(owner, attr), f"{getattr(owner, '__name__', owner)}.{attr} does not exist"
        replacements.append((owner, attr, value))
        with original(owner, attr, value):
            yield

    monkeypatch.setattr(mutants, "replaced", checking)
    with mutants.MUTANTS[name]():
        pass
    for owner, attr, value in replacements:
        assert inspect.getattr_static(owner, attr) is not value


def test_every_mutant_has_machines_to_catch_it():
    numbers = [name.split()[0] for name in mutants.MUTANTS]
    assert len(set(numbers)) == len(numbers), "two mutants share a number"
    assert set(numbers) == set(mutants.MACHINES), "MACHINES must name the machines of every mutant, and only those"


def test_the_harness_selects_mutants_by_number(capsys):
    with pytest.raises(SystemExit):
        mutants.main(["1", "--only", "no-such-mutant"])
    assert "no such mutant: no-such-mutant" in capsys.readouterr().err


def test_a_mutant_the_explorer_catches_is_checked_against_the_real_code_once(monkeypatch):
    from types import SimpleNamespace

    applied = []

    @contextlib.contextmanager
    def mutant():
        applied.append(True)
        yield
        applied.pop()

    def explore(*, depth=None):
        violation = "duplicates: r0 accepted twice" if applied else None
        return SimpleNamespace(states=42, depth=6, transitions=99, violation=violation)

    monkeypatch.setattr(mutants, "explore", explore)
    monkeypatch.setattr(mutants, "_EXPLORED", {})
    found = mutants._by_explorer("9 a mutant", mutant)
    assert found["caught_by"] == "explorer" and found["states_until_found"] == 42
    assert found["real_code_passes_that_example"] is True
    assert mutants._by_explorer("9 a mutant", contextlib.nullcontext) is None  # nothing found: the model decides
