"""The exhaustive small-scope check (tests/model/explore): every interleaving of the small
world's actions to the stated depth holds the invariants on the real code; a broken table
is caught; and every protocol row it visits is one the DynamoDB equivalence test covers."""

from __future__ import annotations

import json
import logging

import pytest

from tests.integration.test_ledger_protocol import COVERED_RULES, COVERED_TRANSITIONS
from tests.model.explore import Exploration, explore
from tests.model.explore.search import DEFAULT_DEPTH
from tests.model.mutants import MUTANTS

pytestmark = pytest.mark.timeout(290)


@pytest.fixture(scope="module")
def exploration() -> Exploration:
    logging.disable(logging.CRITICAL)  # the consumer logs every failure it handles
    try:
        result = explore(depth=DEFAULT_DEPTH)
    finally:
        logging.disable(logging.NOTSET)
    print(f"\nexplorer: {json.dumps(result.summary())}")
    return result


def test_every_interleaving_to_the_stated_depth_holds_the_invariants(exploration):
    assert exploration.violation is None, str(exploration.violation)
    assert exploration.depth == DEFAULT_DEPTH
    # Each world (Resend one by one, Resend batch mode, SES) explored to the full depth.
    assert {w["depth"] for w in exploration.by_world.values()} == {DEFAULT_DEPTH}, exploration.by_world


def test_every_row_it_visits_is_held_to_the_dynamodb_adapter(exploration):
    assert exploration.transitions_visited, "the explorer noted no transitions"
    assert exploration.transitions_visited <= COVERED_TRANSITIONS, sorted(
        exploration.transitions_visited - COVERED_TRANSITIONS
    )
    assert exploration.rules_visited <= COVERED_RULES, sorted(exploration.rules_visited - COVERED_RULES)


def test_a_broken_table_is_caught():
    """Mutant 3b: the table holds a group's member at any age, past the key's window."""
    name = next(n for n in MUTANTS if n.startswith("3b "))
    logging.disable(logging.CRITICAL)
    try:
        with MUTANTS[name]():
            result = explore(depth=2, worlds=(("resend", "batch"),))
    finally:
        logging.disable(logging.NOTSET)
    assert result.violation is not None, "the explorer missed mutant 3b"
    print(f"\nmutant 3b: {result.states} states until\n{result.violation}")
