"""Condition and update expressions: parsed, validated and copied once (speed patches).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_dynamodb_expressions.py.
"""

from __future__ import annotations

import functools
import json
import pickle
import re
from collections import deque
from collections.abc import Callable
from typing import Any

from sendonce_local.moto_patches.replacing import Replace


def expressions_parsed_once(replace: Replace) -> None:
    """Every item of a transaction parses the same condition three times and the same
    update expression twice.

    The patch caches parsed update expressions by their text, and parsed conditions by
    their text and the names and values it refers to (up to 4,096 of each; the cache starts
    over when full). A request's values are mostly its update's (a group's completion gives
    each item its own message id and time, its condition only the owner and states): keyed
    by all of them, such a condition was parsed again for every item. The trees are not
    changed once built: the validator copies an update expression's tree before it resolves
    it.

    A condition with values of its own per item (a claim's payload hash) misses that cache;
    its text is lexed once (the lexer's nodes are a function of the text alone).

    Trade: none expected; a condition whose names or values do not serialize as JSON, or
    whose placeholders are not plain words, is parsed as before.
    """
    import moto.dynamodb.comparisons as comparisons
    import moto.dynamodb.models as models
    import moto.dynamodb.responses as responses
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    cache_limit = 4096
    update_trees: dict[str, Any] = {}

    class CachedUpdateExpressionParser:
        @staticmethod
        def make(expression: str) -> Any:
            tree = update_trees.get(expression)
            if tree is None:
                if len(update_trees) >= cache_limit:
                    update_trees.clear()
                tree = update_trees[expression] = UpdateExpressionParser.make(expression)
            return tree

    replace(models, "UpdateExpressionParser", CachedUpdateExpressionParser)
    replace(responses, "UpdateExpressionParser", CachedUpdateExpressionParser)

    conditions: dict[tuple[Any, str, str], tuple[Any, list[str], list[str]]] = {}
    placeholder = re.compile(r"[:#][A-Za-z0-9_]+")
    stock_parse = comparisons.ConditionExpressionParser.parse

    def referred(expression: str, given: Any) -> Any:
        """The entries of `given` (names or values) whose placeholder `expression` uses."""
        if not isinstance(given, dict) or not all(placeholder.fullmatch(k) for k in given):
            raise ValueError("not plain placeholders")
        used = set(placeholder.findall(expression))
        return {k: v for k, v in given.items() if k in used}

    @functools.wraps(stock_parse)
    def parse(self: Any) -> Any:
        expression = self.condition_expression or ""
        try:
            key = (
                self.condition_expression,
                json.dumps(referred(expression, self.expression_attribute_names or {}), sort_keys=True),
                json.dumps(referred(expression, self.expression_attribute_values or {}), sort_keys=True),
            )
        except (TypeError, ValueError):
            return stock_parse(self)
        cached = conditions.get(key)
        if cached is None:
            op = stock_parse(self)
            if len(conditions) >= cache_limit:
                conditions.clear()
            cached = conditions[key] = (op, list(self.expr_attr_names_found), list(self.expr_attr_values_found))
        # Callers extend these lists: each parser gets lists of its own.
        self.expr_attr_names_found = list(cached[1])
        self.expr_attr_values_found = list(cached[2])
        return cached[0]

    replace(comparisons.ConditionExpressionParser, "parse", parse)

    # A condition the cache above cannot answer (its own values differ item by item: a
    # claim's payload hash) is still the same text: its tokens are lexed once. Each parse
    # gets nodes of its own (their `children` lists are mutable).
    lexed: dict[str, tuple[tuple[str, str], ...]] = {}
    stock_lex = comparisons.ConditionExpressionParser._lex_condition_expression

    @functools.wraps(stock_lex)
    def lex(self: Any) -> Any:
        expression = self.condition_expression
        tokens = lexed.get(expression)
        if tokens is None:
            nodes = stock_lex(self)
            if len(lexed) >= cache_limit:
                lexed.clear()
            tokens = lexed[expression] = tuple((node.nonterminal, node.text) for node in nodes)
        literal = self.Kind.LITERAL
        return deque(self.Node(nonterminal=n, kind=literal, text=t, value=t, children=[]) for n, t in tokens)

    replace(comparisons.ConditionExpressionParser, "_lex_condition_expression", lex)


def update_validators_check_root_once(replace: Replace) -> None:
    """Two update-expression validators re-walk every nested sub-expression.

    ``OverlappingPathsValidator`` and ``ActionCountValidator`` check each nested
    ``UpdateExpression`` node, and each check collects every action below it: quadratic in
    the number of actions (a ledger update has ~10). The root holds every action, so a
    check of the root alone finds the same errors. Also, ``DepthFirstTraverser.
    nodes_to_be_processed`` (documented as cached, but not) rebuilds its tuple for every
    node; here each traverser builds it once.

    Trade: when an expression has several overlapping paths, which ones the error names
    may differ (moto's message names those it finds first).
    """
    import moto.dynamodb.parsing.ast_nodes as ast_nodes
    import moto.dynamodb.parsing.validators as validators

    def check_root_only(check: str) -> Callable[[Any, Any], Any]:
        def traverse(self: Any, node: Any) -> Any:
            getattr(self, check)(node)
            return node

        return traverse

    replace(validators.OverlappingPathsValidator, "traverse", check_root_only("check_for_overlapping_paths"))
    replace(validators.ActionCountValidator, "traverse", check_root_only("verify_action_counts"))
    stock = ast_nodes.DepthFirstTraverser.nodes_to_be_processed

    @functools.wraps(stock)
    def nodes_to_be_processed(self: Any) -> Any:
        nodes = self.__dict__.get("_nodes_to_be_processed")
        if nodes is None:
            nodes = self.__dict__["_nodes_to_be_processed"] = stock(self)
        return nodes

    replace(ast_nodes.DepthFirstTraverser, "nodes_to_be_processed", nodes_to_be_processed)


def expression_trees_copied_by_pickle(replace: Replace) -> None:
    """The update validator deep-copies the expression tree for each use.

    ``copy.deepcopy`` of a parsed tree walks it node by node in Python; a pickle round trip
    makes the same copy about 3x faster. The patch replaces ``deepcopy`` inside
    ``moto.dynamodb.parsing.validators`` only (the tree copy and ``list_append``'s copy of
    a list value).

    Trade: none expected; the trees and values pickle (a copy that could not would raise,
    not differ).
    """
    import moto.dynamodb.parsing.validators as validators

    def deepcopy(node: Any, memo: dict[int, Any] | None = None) -> Any:
        return pickle.loads(pickle.dumps(node, protocol=pickle.HIGHEST_PROTOCOL))

    replace(validators, "deepcopy", deepcopy)


def updates_validated_once(replace: Replace) -> None:
    """An UpdateItem that creates its item validates the update expression twice.

    ``DynamoDBBackend.update_item`` first validates the expression against an empty item
    (so that an invalid expression creates nothing), then creates the item and validates
    again against it, raising the same errors. The patch skips the first validation.

    Trade: UpdateItem with an invalid update expression on a missing item leaves a key-only
    item behind (stock moto and DynamoDB leave nothing). Inside a cancelled transaction
    ``transactions_restore_touched_items_only`` removes it again. sendonce sends no invalid
    update expressions; its tests do, against the un-sped server.
    """
    import moto.dynamodb.models as models
    import moto.dynamodb.parsing.validators as validators

    class UpdateExpressionValidator(validators.UpdateExpressionValidator):
        def __init__(
            self,
            expression: Any,
            *,
            expression_attribute_names: Any,
            expression_attribute_values: Any,
            item: Any,
            table: Any,
        ) -> None:
            # Only moto's pre-check validates against an item without attributes: a created
            # item has its key attributes by the time of the real validation.
            self._precheck = not item.attrs
            if self._precheck:
                self.node_to_validate = expression
                return
            super().__init__(
                expression,
                expression_attribute_names=expression_attribute_names,
                expression_attribute_values=expression_attribute_values,
                item=item,
                table=table,
            )

        def validate(self) -> Any:
            return self.node_to_validate if self._precheck else super().validate()

    replace(models, "UpdateExpressionValidator", UpdateExpressionValidator)
