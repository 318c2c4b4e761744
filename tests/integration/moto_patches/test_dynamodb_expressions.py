"""dynamodb_expressions.py (speed patches): expressions parsed, checked, copied and validated
once; the one difference in answers they document."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.integration.moto_patches.helpers import (
    PROFILES,
    _calls,
    _claim,
    _filled_ledger,
    _key,
    _ledger_tables,
    _n,
    _outcome,
    _s,
    _scan,
    moto_as,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("profile", "parsed"), [("stock", True), ("defects", True), ("speed", False)])
def test_the_speed_patches_parse_an_expression_once(profile: str, parsed: bool) -> None:
    with moto_as(profile) as ddb:
        # Given a ledger where one claim has run
        _filled_ledger(ddb, 3)
        _claim(ddb, "r000")

        # When the same claim runs for another delivery
        calls = _calls(lambda: _claim(ddb, "r001"))

        # Then stock moto parses its update expression twice and its condition twice more;
        # with the speed patches both come from the cache
        assert calls["moto/dynamodb/parsing/expressions.py:make"] == (2 if parsed else 0)
        assert calls["moto/dynamodb/comparisons.py:parse"] == (2 if parsed else 0)


@pytest.mark.parametrize(("profile", "walks"), [("stock", 24), ("defects", 24), ("speed", 1)])
def test_the_speed_patches_check_an_update_s_paths_and_clauses_at_its_root(profile: str, walks: int) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 2)
        _claim(ddb, "r000")  # parsed (and, with the speed patches, cached) before counting

        calls = _calls(lambda: _claim(ddb, "r001"))

        # Stock moto checks every nested UpdateExpression node of the claim (24) for
        # overlapping paths and clause counts; the root holds them all
        assert calls["moto/dynamodb/parsing/validators.py:check_for_overlapping_paths"] == walks
        assert calls["moto/dynamodb/parsing/validators.py:verify_action_counts"] == walks
        # ...and rebuilds each traverser's node types for every node instead of once per traverser
        assert (calls["moto/dynamodb/parsing/ast_nodes.py:nodes_to_be_processed"] < 10) is (profile == "speed")


@pytest.mark.parametrize("profile", PROFILES)
def test_the_speed_patches_copy_expression_trees_by_pickle(profile: str) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 2)
        _claim(ddb, "r000")

        calls = _calls(lambda: _claim(ddb, "r001"))

        # The validator's copy of the claim's tree, and list_append's copy of the history
        pickled = calls["~:<built-in method _pickle.dumps>"]
        assert pickled == (2 if profile == "speed" else 0)
        assert (calls["copy:deepcopy"] > 100) is (profile != "speed")


@pytest.mark.parametrize(("profile", "validations"), [("stock", 2), ("defects", 2), ("speed", 1)])
def test_the_speed_patches_validate_an_update_that_creates_its_item_once(profile: str, validations: int) -> None:
    with moto_as(profile) as ddb:
        _filled_ledger(ddb, 1)
        _claim(ddb, "r000")

        calls = _calls(lambda: _claim(ddb, "new"))

        assert calls["moto/dynamodb/parsing/validators.py:validate"] == validations


@pytest.mark.parametrize(("profile", "leaves_key_only_item"), [("stock", False), ("defects", False), ("speed", True)])
def test_an_invalid_update_of_a_missing_item_leaves_a_key_only_item_with_the_speed_patches_only(
    profile: str, leaves_key_only_item: bool
) -> None:
    # The one documented difference in answers (updates_validated_once)
    with moto_as(profile) as ddb:
        _ledger_tables(ddb)

        # When an update with overlapping paths names a missing item
        refusal = _outcome(
            ddb.update_item,
            TableName="ledger",
            Key=_key("c1", "missing"),
            UpdateExpression="SET a = :v, a = :v",
            ExpressionAttributeValues={":v": _n(1)},
        )

        # Then it is refused the same way, but the speed patches leave the item's key behind
        assert refusal["error"] == "ValidationException"
        assert re.search(r"Two document paths overlap with each other", refusal["message"])
        left = _scan(ddb, "ledger")
        assert left == ([_key("c1", "missing")] if leaves_key_only_item else [])


def _settle(ddb: Any, sk: str, *, owner: str, message_id: str) -> dict[str, Any]:
    """A group member's completion: its condition names the owner; its update, a value of its own."""
    return _outcome(
        ddb.update_item,
        TableName="ledger",
        Key=_key("c1", sk),
        UpdateExpression="SET #state = :sent, provider_message_id = :mid",
        ConditionExpression="#owner = :me",
        ExpressionAttributeNames={"#state": "state", "#owner": "owner"},
        ExpressionAttributeValues={":sent": _s("sent"), ":mid": _s(message_id), ":me": _s(owner)},
    )


@pytest.mark.parametrize(("profile", "parsed"), [("stock", True), ("defects", True), ("speed", False)])
def test_a_condition_is_parsed_once_whatever_values_only_the_update_uses(profile: str, parsed: bool) -> None:
    with moto_as(profile) as ddb:
        _ledger_tables(ddb)
        for sk in ("r000", "r001"):
            ddb.put_item(TableName="ledger", Item={**_key("c1", sk), "owner": _s("worker-1")})
        assert "error" not in _settle(ddb, "r000", owner="worker-1", message_id="m-0")

        # Another member: the same condition and owner, its own message id
        calls = _calls(lambda: _settle(ddb, "r001", owner="worker-1", message_id="m-1"))

        assert (calls["moto/dynamodb/comparisons.py:parse"] > 0) is parsed
        assert _scan(ddb, "ledger")[1]["provider_message_id"] == _s("m-1")


@pytest.mark.parametrize("profile", PROFILES)
def test_a_condition_whose_own_value_differs_is_not_answered_from_the_cache(profile: str) -> None:
    with moto_as(profile) as ddb:
        _ledger_tables(ddb)
        for sk in ("r000", "r001"):
            ddb.put_item(TableName="ledger", Item={**_key("c1", sk), "owner": _s("worker-1")})
        assert "error" not in _settle(ddb, "r000", owner="worker-1", message_id="m-0")

        # The same condition text, another owner: refused, as stock moto refuses it
        refusal: dict[str, Any] = {}
        calls = _calls(lambda: refusal.update(_settle(ddb, "r001", owner="worker-2", message_id="m-1")))

        assert refusal["error"] == "ConditionalCheckFailedException"
        assert "provider_message_id" not in _scan(ddb, "ledger")[1]
        # parsed again (its own value differs), but with the speed patches not lexed again
        assert calls["moto/dynamodb/comparisons.py:parse"] > 0
        assert (calls["moto/dynamodb/comparisons.py:_lex_one_node"] > 0) is (profile != "speed")
