"""Every change sendonce makes to moto, as named patches applied by ``apply()``.

moto's server runs in a process of its own (``sendonce_local.moto_server``), which calls
``apply()`` before serving; nothing here runs at import time, and in-process moto (the
model check's ``mock_aws``) stays stock unless a test applies the patches itself.

Two sets, both written against moto ``MOTO_VERSION`` only:
- ``DEFECT_FIXES`` (every ``MotoServer``): moto answers wrongly or unusably slowly
  without them. docs/local-aws.md writes each up as an upstream bug report.
- ``SPEED_PATCHES`` (the demo's ``DemoMotoServer``, on top of the fixes): moto is right
  but slow; each says what it trades.

Each patch is a function taking ``replace(owner, attribute, value)``: every change is a
wrapper, subclass or stand-in set through it, none edits moto's source, and each
replacement is recorded so ``revert()`` puts stock moto back (tests compare stock and
patched moto in one process that way).
"""

from __future__ import annotations

import bisect
import copy
import functools
import importlib.metadata
import json
import pickle
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# constraints.txt pins the same version: update the two together, after checking each
# patch below against the new moto (tests/integration/test_moto_patches.py helps).
MOTO_VERSION = "5.2.5"

Replace = Callable[[object, str, object], None]
PatchFunction = Callable[[Replace], None]


class MotoVersionError(RuntimeError):
    """The installed moto is not the version the patches were written for."""


def installed_moto_version() -> str:
    """The moto distribution this interpreter imports (read without importing moto)."""
    return importlib.metadata.version("moto")


def check_moto_version() -> None:
    """Raise ``MotoVersionError`` unless the installed moto is ``MOTO_VERSION``."""
    installed = installed_moto_version()
    if installed != MOTO_VERSION:
        raise MotoVersionError(
            f"moto {installed} is installed, but sendonce_local.moto_patches was written for moto {MOTO_VERSION}: "
            "its patches replace moto internals that change between releases, so they are not applied to another "
            f"version. Either install moto=={MOTO_VERSION} (the pin in constraints.txt; `make venv`), or move to "
            f"moto {installed}: check each patch in src/sendonce_local/moto_patches.py against moto {installed}'s "
            "source (tests/integration/test_moto_patches.py compares patched with stock moto), then update "
            "MOTO_VERSION there and the moto pin in constraints.txt together."
        )


# One lock for all of moto's DynamoDB in this process: the backend's calls (a defect fix)
# and, with the speed patches, whole requests. Re-entrant: backend calls nest.
_DYNAMODB_LOCK = threading.RLock()


class _TransactionState(threading.local):
    # Deep copies of tables made by the running transact_write_items, by id of the original;
    # None outside a transaction.
    table_copies: dict[int, Any] | None = None
    # Set while transactions_restore_touched_items_only backs up the items instead.
    shares_tables: bool = False


_TRANSACTION = _TransactionState()


# --- defect fixes ---------------------------------------------------------------------


def transactions_copy_each_table_once(replace: Replace) -> None:
    """TransactWriteItems deep-copies a table once per item of the transaction.

    moto's ``DynamoDBBackend.transact_write_items`` backs up the tables it writes so that
    it can put them back when an item fails, but it takes the backup inside its loop over
    the items: a 100-item transaction on one 1,000-item table deep-copies the table 100
    times (100,000 items; 2.2 s of CPU on a 2-core machine, 0.21 s with this patch). Every
    copy also stays referenced by moto's instance tracking.

    The patch stands in for the ``copy`` module inside ``moto.dynamodb.models``: during a
    transaction the first deep copy of a table is made as before and handed out again for
    the same table's later items. The rollback restores that same copy, as stock does.
    """
    import moto.dynamodb.models as models
    from moto.dynamodb.models.table import Table

    class CopyEachTableOncePerTransaction:
        """The ``copy`` module as moto.dynamodb.models sees it."""

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

        def deepcopy(self, obj: Any, memo: dict[int, Any] | None = None) -> Any:
            copies = _TRANSACTION.table_copies
            if copies is None or not isinstance(obj, Table):
                return copy.deepcopy(obj, memo)
            if _TRANSACTION.shares_tables:
                return obj
            if id(obj) not in copies:
                copies[id(obj)] = copy.deepcopy(obj, memo)
            return copies[id(obj)]

    stock = models.DynamoDBBackend.transact_write_items

    @functools.wraps(stock)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if _TRANSACTION.table_copies is not None:
            return stock(self, transact_items)
        _TRANSACTION.table_copies = {}
        try:
            return stock(self, transact_items)
        finally:
            _TRANSACTION.table_copies = None

    replace(models, "copy", CopyEachTableOncePerTransaction())
    replace(models.DynamoDBBackend, "transact_write_items", transact_write_items)


def dynamodb_backend_one_call_at_a_time(replace: Replace) -> None:
    """The threaded server calls moto's DynamoDB backend from several threads at once.

    ``moto_server`` serves each request on its own thread, and ``DynamoDBBackend`` has no
    locking. A transaction deep-copying a table while another request writes to it fails
    with ``RuntimeError: dictionary changed size during iteration`` (HTTP 500), and a
    cancelled transaction's whole-table rollback silently undoes writes other requests
    made meanwhile: three threads each claiming and completing 6 groups of 100 on one
    table got 13 of 18 groups refused with a 500.

    The patch wraps every method defined on ``DynamoDBBackend`` in one re-entrant lock, so
    the backend applies one call at a time (as DynamoDB applies each item's writes
    atomically). moto's DynamoDB is CPU-bound under one GIL: no throughput is lost.
    """
    import moto.dynamodb.models as models

    def one_at_a_time(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with _DYNAMODB_LOCK:
                return function(*args, **kwargs)

        return locked

    for name, function in list(vars(models.DynamoDBBackend).items()):
        if isinstance(function, types.FunctionType) and not name.startswith("__"):
            replace(models.DynamoDBBackend, name, one_at_a_time(function))


def docker_probe_fails_as_missing_attribute(replace: Replace) -> None:
    """GET /moto-api/data.json answers HTTP 500 once a Lambda function exists and Docker is absent.

    ``/moto-api/data.json`` (where moto's server shows, among everything else, the email its
    SES accepted) reads every public attribute of every model instance and skips those that
    raise ``TypeError``, ``AttributeError`` or ``ValueError``. ``DockerModel.docker_client``
    (inherited by Lambda functions and Batch jobs) calls ``docker.from_env()``, which raises
    ``docker.errors.DockerException`` when no Docker engine answers: the endpoint fails as a
    whole as soon as one Lambda function exists, as it does after deploying our stack.

    The patch re-raises that error from the property as ``DockerUnavailableError``, a
    ``DockerException`` that is also an ``AttributeError``: data.json skips the attribute,
    and every caller that catches ``DockerException`` (Lambda's invoke) still catches it.
    With Docker running, nothing changes.
    """
    import docker.errors
    from moto.utilities.docker_utilities import DockerModel

    class DockerUnavailableError(docker.errors.DockerException, AttributeError):
        """No Docker engine answered moto's ``docker.from_env()``."""

    stock = vars(DockerModel)["docker_client"]

    def docker_client(self: Any) -> Any:
        try:
            return stock.fget(self)
        except docker.errors.DockerException as exc:
            raise DockerUnavailableError(str(exc)) from exc

    replace(DockerModel, "docker_client", property(docker_client, doc=stock.__doc__))


def stack_updates_keep_dynamodb_tables(replace: Replace) -> None:
    """A CloudFormation stack update that changes a DynamoDB table drops the table from the stack.

    ``Table`` has no ``update_from_cloudformation_json``, so moto's ``parse_and_update_resource``
    returns None for a modified table and stores None as the resource: the update then fails
    on the first ``Fn::GetAtt`` of it ("references undefined resource"), and a table that
    gains an index, a stream or a TTL in a new release cannot be upgraded in moto at all.
    CloudFormation updates these properties in place (AWS::DynamoDB::Table: "Update requires:
    No interruption"); a new name or key schema means replacement, which sendonce's tables
    must never need (tests/infra/test_upgrade.py checks the template for it).

    The patch keeps the existing table, applies what is updated in place (new global
    secondary indexes, the stream specification, the TTL) and refuses a change that would
    need a replacement instead of silently keeping the old table. moto's update also creates
    the template's new resources first: one reading the `StreamArn` of a table that gains
    its stream in the same update (an event source mapping) found none; the stream is then
    enabled when its ARN is first read.
    """
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.table import Table

    def update_from_cloudformation_json(
        cls: type, original_resource: Any, new_resource_name: str, cloudformation_json: dict[str, Any],
        account_id: str, region_name: str,
    ) -> Any:  # fmt: skip
        properties = cloudformation_json["Properties"]
        table = original_resource
        # Without a TableName, moto draws a new random name for every update: only a name the
        # template gives can differ.
        named = properties.get("TableName")
        schema = properties.get("KeySchema")
        if (named is not None and named != table.name) or (schema is not None and schema != table.schema):
            raise ValueError(f"updating table {table.name} needs a replacement, which this patch does not do")
        backend = dynamodb_backends[account_id][region_name]
        existing = {index.name for index in table.global_indexes}
        wanted = properties.get("GlobalSecondaryIndexes", [])
        if wanted:
            table.attr = properties.get("AttributeDefinitions", table.attr)
            creates = [{"Create": index} for index in wanted if index["IndexName"] not in existing]
            if creates:
                backend.update_table_global_indexes(table, creates)
        stream = properties.get("StreamSpecification")
        if stream and not table.latest_stream_label:
            backend.update_table_streams(table, {"StreamEnabled": True, **stream})
        elif stream and table.stream_specification:
            # Enabled early by a new resource that read its ARN (below): the template's view.
            table.stream_specification["StreamViewType"] = stream.get("StreamViewType", "NEW_AND_OLD_IMAGES")
        ttl = properties.get("TimeToLiveSpecification")
        if ttl:
            backend.update_time_to_live(table.name, ttl)
        return table

    replace(Table, "update_from_cloudformation_json", classmethod(update_from_cloudformation_json))

    stock_attribute = Table.get_cfn_attribute

    @functools.wraps(stock_attribute)
    def get_cfn_attribute(self: Any, attribute_name: str) -> Any:
        # moto's update creates the template's new resources before it updates the changed
        # ones: a new resource that reads `StreamArn` of a table gaining its stream in the
        # same update (a stream mapping, a policy) would find none (KeyError, HTTP 500).
        # CloudFormation resolves it after the table; here the stream is enabled when first
        # read, and the table's own update then sets the template's view type.
        if attribute_name == "StreamArn" and not self.latest_stream_label:
            dynamodb_backends[self.account_id][self.region_name].update_table_streams(
                self, {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
            )
        return stock_attribute(self, attribute_name)

    replace(Table, "get_cfn_attribute", get_cfn_attribute)


def stream_mappings_invoke_enabled_only(replace: Replace) -> None:
    """A disabled event source mapping on a DynamoDB stream still invokes its function, and
    a failed invoke empties the stream.

    ``StreamShard.add`` (every write to a table with a stream) calls every mapping of the
    table whatever its ``Enabled``; without Docker the invoke answers an error, which moto
    takes as delivered: it clears the shard's records, so GetRecords never sees them, and
    the next record reuses a sequence number already handed out. A deployed stack maps the
    counters' aggregator to the ledger's and the campaigns table's streams.

    The patch hides disabled mappings from ``add`` (local runs disable them and poll the
    stream themselves, ``sendonce_local.stream_poller``); an enabled mapping behaves as stock.
    """
    from moto.dynamodb.models.table import StreamShard

    stock = StreamShard.add

    @functools.wraps(stock)
    def add(self: Any, old: Any, new: Any) -> None:
        mappings = self.table.lambda_event_source_mappings
        enabled = {arn: esm for arn, esm in mappings.items() if getattr(esm, "enabled", True)}
        if len(enabled) == len(mappings):
            return stock(self, old, new)
        self.table.lambda_event_source_mappings = enabled
        try:
            return stock(self, old, new)
        finally:
            self.table.lambda_event_source_mappings = mappings

    replace(StreamShard, "add", add)


def stream_reads_under_the_dynamodb_lock(replace: Replace) -> None:
    """GetRecords can see the stream records of a transaction that is then cancelled.

    The DynamoDB Streams backend reads a table's stream shard without the lock that
    ``dynamodb_backend_one_call_at_a_time`` holds around each DynamoDB call, so a GetRecords
    served while a transaction is half applied returns records its rollback then takes
    back: a counter built from them counts writes that never happened.

    The patch takes the same lock around every method of ``DynamoDBStreamsBackend``.
    """
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend

    for name, function in list(vars(DynamoDBStreamsBackend).items()):
        if isinstance(function, types.FunctionType) and not name.startswith("__"):

            def locked(*args: Any, __function: Callable[..., Any] = function, **kwargs: Any) -> Any:
                with _DYNAMODB_LOCK:
                    return __function(*args, **kwargs)

            replace(DynamoDBStreamsBackend, name, functools.wraps(function)(locked))


DEFECT_FIXES: tuple[PatchFunction, ...] = (
    transactions_copy_each_table_once,
    dynamodb_backend_one_call_at_a_time,
    docker_probe_fails_as_missing_attribute,
    stack_updates_keep_dynamodb_tables,
    stream_mappings_invoke_enabled_only,
    stream_reads_under_the_dynamodb_lock,
)


# --- speed patches (the demo's) ---------------------------------------------------------
#
# Stock moto spends ~40 ms of CPU on each item of batch mode's two 100-item transactions
# per SQS message: 12,480 recipients would take ~9 minutes of moto time alone. Measured
# in-process, these take batch mode from 17 ms to 4 ms per recipient and single mode with
# SES from 22 ms to 10 ms. SQS, SES, CloudFormation and Lambda stay stock.


def transactions_restore_touched_items_only(replace: Replace) -> None:
    """A transaction still copies each table it writes once (after the defect fix).

    That one copy is the whole table: ~0.4 ms per item, 5 s per transaction on a
    12,480-item ledger. With this patch a transaction backs up only the items it names
    (their state before it ran) and, when it is cancelled, puts exactly those back; the
    table copy becomes the table itself.

    Trade: a cancelled transaction restores its items, and drops the stream records its
    writes added, only. Anything else stock's whole-table rollback would also undo (an empty
    partition left where an item was put and taken back) stays. Needs
    ``transactions_copy_each_table_once`` (it shares that patch's stand-in for ``copy``).
    """
    import moto.dynamodb.models as models

    stock = models.DynamoDBBackend.transact_write_items

    def snapshot(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Any, Any, Any, Any]]:
        touched = []
        for entry in transact_items:
            for op_type, op in entry.items():
                table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
                if table is None:
                    continue
                key = op.get("Item", {}) if op_type == "Put" else op.get("Key", {})
                try:
                    hash_key, range_key = backend.get_keys_value(table, key)
                except Exception:  # noqa: BLE001 - moto refuses this entry itself
                    continue  # moto refuses this entry itself before it changes anything
                touched.append((table, hash_key, range_key, copy.deepcopy(table.get_item(hash_key, range_key))))
        return touched

    def stream_lengths(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Any, int]]:
        names = {op.get("TableName") for entry in transact_items for op in entry.values() if isinstance(op, dict)}
        tables = [backend.tables.get(name) for name in names]
        return [(t.stream_shard, len(t.stream_shard.items)) for t in tables if t is not None and t.stream_shard]

    def restore(touched: list[tuple[Any, Any, Any, Any]]) -> None:
        # Backwards: an item named twice gets its state from before the first write.
        for table, hash_key, range_key, item in reversed(touched):
            if range_key is None:
                if item is None:
                    table.items.pop(hash_key, None)
                else:
                    table.items[hash_key] = item
            elif item is None:
                table.items.get(hash_key, {}).pop(range_key, None)
            else:
                table.items[hash_key][range_key] = item

    @functools.wraps(stock)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        with _DYNAMODB_LOCK:  # the backup must see the same items the transaction writes
            touched = snapshot(self, transact_items)
            streams = stream_lengths(self, transact_items)
            _TRANSACTION.shares_tables = True
            try:
                return stock(self, transact_items)
            except BaseException:
                restore(touched)
                for shard, length in streams:
                    del shard.items[length:]
                raise
            finally:
                _TRANSACTION.shares_tables = False

    replace(models.DynamoDBBackend, "transact_write_items", transact_write_items)


def dynamodb_requests_one_at_a_time(replace: Replace) -> None:
    """Let a DynamoDB request read items without copying them.

    The defect fix locks each backend call, not the writing of the response, so stock
    moto copies what it reads (a query deep-copies its page) before it leaves the lock.
    This patch holds the same lock for the whole request (``DynamoHandler.call_action``),
    which ``queries_read_one_partition`` needs to answer from the live items.

    Trade: none measurable; moto's DynamoDB is CPU-bound under one GIL.
    """
    import moto.dynamodb.responses as responses

    stock = responses.DynamoHandler.call_action

    @functools.wraps(stock)
    def call_action(self: Any) -> Any:
        with _DYNAMODB_LOCK:
            return stock(self)

    replace(responses.DynamoHandler, "call_action", call_action)


def expressions_parsed_once(replace: Replace) -> None:
    """Every item of a transaction parses the same condition three times and the same
    update expression twice.

    The patch caches parsed update expressions by their text, and parsed conditions by
    their text, names and values (up to 4,096 of each; the cache starts over when full).
    The trees are not changed once built: the validator copies an update expression's tree
    before it resolves it.

    Trade: none expected; a condition whose names or values do not serialize as JSON is
    parsed as before.
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
    stock_parse = comparisons.ConditionExpressionParser.parse

    @functools.wraps(stock_parse)
    def parse(self: Any) -> Any:
        try:
            key = (
                self.condition_expression,
                json.dumps(self.expression_attribute_names, sort_keys=True),
                json.dumps(self.expression_attribute_values, sort_keys=True),
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


def queries_read_one_partition(replace: Replace) -> None:
    """Query lists, filters and sorts every item of the table for each 1 MB page.

    ``Table.query`` walks ``all_items()`` to find the partition, sorts it, skips to the
    exclusive start key item by item and deep-copies the page: reading a 12,480-item
    campaign's ledger took ~35 s. For a query on one partition of the table itself (no
    index, no range-key condition, no legacy KeyConditions filter, S or N range key) the
    patch sorts just that partition once per page, finds the start by bisection and hands
    out the live items (``dynamodb_requests_one_at_a_time`` keeps writers out until the
    response is written). Every other query goes to moto's.

    Trade: none expected; projections still work on copies.
    """
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT, Table

    stock = Table.query

    @functools.wraps(stock)
    def query(
        self: Any,
        hash_key: Any,
        range_comparison: str | None,
        range_objs: list[Any],
        limit: int,
        exclusive_start_key: dict[str, Any],
        scan_index_forward: bool,
        projection_expressions: list[list[str]] | None,
        index_name: str | None = None,
        consistent_read: bool = False,
        filter_expression: Any = None,
        hash_key_conditions: list[tuple[str, Any]] | None = None,
        range_key_conditions: list[tuple[str, str, list[Any]]] | None = None,
        **filter_kwargs: Any,
    ) -> tuple[list[Any], int, dict[str, Any] | None]:
        if (
            index_name is not None
            or hash_key is None
            or self.range_key_attr is None
            or range_comparison
            or range_key_conditions
            or filter_kwargs
            or self.range_key_type not in ("S", "N")
        ):
            return stock(
                self,
                hash_key,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                index_name,
                consistent_read,
                filter_expression,
                hash_key_conditions=hash_key_conditions,
                range_key_conditions=range_key_conditions,
                **filter_kwargs,
            )
        partition = self.items.get(hash_key) or {}
        ordered = sorted(partition.values(), key=lambda item: item.range_key.cast_value)
        keys = [item.range_key.cast_value for item in ordered]
        if exclusive_start_key is not None:
            start = DynamoType(exclusive_start_key[self.range_key_attr]).cast_value
            if scan_index_forward is False:
                ordered = ordered[: bisect.bisect_left(keys, start)]
            else:
                ordered = ordered[bisect.bisect_right(keys, start) :]
        if scan_index_forward is False:
            ordered.reverse()
        results: list[Any] = []
        size, last_evaluated_key = 0, None
        for item in ordered:
            item_size = item.size()
            if len(results) == limit or size + item_size > RESULT_SIZE_LIMIT:
                last_evaluated_key = self._get_last_evaluated_key(results[-1], None)
                break
            results.append(item)
            size += item_size
        scanned = len(results)
        if filter_expression is not None:
            results = [item for item in results if filter_expression.expr(item)]
        if projection_expressions:
            results = [item.project(projection_expressions) for item in copy.deepcopy(results)]
        return results, scanned, last_evaluated_key

    replace(Table, "query", query)


def item_reads_written_as_json(replace: Replace) -> None:
    """Items read back go through moto's generic, shape-driven response serializer.

    That costs ~2 ms per ledger item, most of reading a 12,480-item ledger. The results of
    Query, Scan, GetItem and BatchGetItem are DynamoDB JSON already: the patch writes them
    with ``json.dumps``. Anything that does not serialize as JSON (binary values, which
    moto holds as bytes) and every other action go to moto's serializer.

    Trade: the answer keeps keys the serializer would drop because the operation's shape
    lacks them (GetItem's ``ConsumedCapacityUnits``); boto3 ignores them.
    """
    import moto.dynamodb.responses as responses

    stock = responses.DynamoHandler.serialized
    item_reads = {"Query", "Scan", "GetItem", "BatchGetItem"}

    @functools.wraps(stock)
    def serialized(self: Any, action_result: Any) -> Any:
        result = action_result.result
        if (
            isinstance(action_result, responses.DynamoResult)
            and isinstance(result, dict)
            and self._get_action() in item_reads
        ):
            try:
                body = json.dumps(result, separators=(",", ":"))
            except (TypeError, ValueError):
                return stock(self, action_result)
            headers = dict(self.response_headers)
            headers["Content-Type"] = "application/x-amz-json-1.0"
            return 200, headers, body
        return stock(self, action_result)

    replace(responses.DynamoHandler, "serialized", serialized)


SPEED_PATCHES: tuple[PatchFunction, ...] = (
    transactions_restore_touched_items_only,
    dynamodb_requests_one_at_a_time,
    expressions_parsed_once,
    update_validators_check_root_once,
    expression_trees_copied_by_pickle,
    updates_validated_once,
    queries_read_one_partition,
    item_reads_written_as_json,
)


# --- applying them ------------------------------------------------------------------------

_MISSING = object()
# Per applied patch, in order: (owner, attribute, what it held before; _MISSING if nothing).
_applied: dict[str, list[tuple[object, str, object]]] = {}


def apply(*, speed: bool = False) -> tuple[str, ...]:
    """Patch the moto this process imports: the defect fixes, and with ``speed`` the speed
    patches too. Returns the names of every patch now applied.

    Raises ``MotoVersionError`` before changing anything when moto is not ``MOTO_VERSION``.
    Applying again is harmless: a patch already applied is skipped, so nothing is wrapped
    twice. Patches are always applied in the order of the two tuples, whatever was applied
    before, since some build on others.
    """
    check_moto_version()
    for patch in DEFECT_FIXES + (SPEED_PATCHES if speed else ()):
        if patch.__name__ in _applied:
            continue
        replaced: list[tuple[object, str, object]] = []
        try:
            patch(_recorder(replaced))
        except BaseException:
            _undo(replaced)  # a patch is applied whole or not at all
            raise
        _applied[patch.__name__] = replaced
    return applied()


def applied() -> tuple[str, ...]:
    """The names of the patches applied in this process, in the order they were applied."""
    return tuple(_applied)


def revert() -> None:
    """Put back everything ``apply()`` replaced, last patch first."""
    _revert_to(0)


@contextmanager
def patched(*, speed: bool = False) -> Iterator[tuple[str, ...]]:
    """Apply the patches for the duration of a block (tests comparing stock and patched moto
    in one process), then revert those the block applied."""
    before = len(_applied)
    try:
        yield apply(speed=speed)
    finally:
        _revert_to(before)


def _revert_to(count: int) -> None:
    # Later patches may wrap what earlier ones installed: undo from the last one back.
    while len(_applied) > count:
        _undo(_applied.popitem()[1])


def _recorder(replaced: list[tuple[object, str, object]]) -> Replace:
    def replace(owner: object, attribute: str, value: object) -> None:
        replaced.append((owner, attribute, vars(owner).get(attribute, _MISSING)))
        setattr(owner, attribute, value)

    return replace


def _undo(replaced: list[tuple[object, str, object]]) -> None:
    for owner, attribute, previous in reversed(replaced):
        if previous is _MISSING:
            delattr(owner, attribute)
        else:
            setattr(owner, attribute, previous)
