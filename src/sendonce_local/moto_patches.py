"""moto's server for the demo: stock moto 5.2.5 with its DynamoDB made fast enough to
measure sendonce instead of the emulator, and its transactions made correct.

Stock moto spends ~40 ms of CPU on each item of batch mode's two 100-item
TransactWriteItems per SQS message, so 12,480 recipients would take ~9 minutes of moto
time alone. Where it goes, and what the demo's moto process does instead:

1. TransactWriteItems deep-copies the whole table once per item of the transaction, to
   roll back on failure (a 100-item transaction on a 12,480-item ledger copies 1.2
   million items). Here a transaction snapshots only the items it touches and, when it
   is cancelled, puts exactly those back.
2. Requests run on threads without a lock, so a transaction interleaves with other
   writes and its whole-table rollback silently undoes them. Here DynamoDB requests are
   applied one at a time (DynamoDB applies each item's writes atomically); moto's
   DynamoDB is CPU-bound under one GIL, so this costs no throughput.
3. Every item of a transaction parses the same condition three times and the same update
   expression twice: parsed expressions are cached by their text (and, for conditions,
   their names and values; the parsed tree is immutable once built, and the validator
   copies an update expression's tree before it changes it).
4. Two validators re-walk every nested sub-expression (quadratic in the number of
   actions); a check of the root finds the same errors.
5. The validator deep-copies the expression tree for each use; a pickle round trip makes
   the same copy about 3x faster.
6. An update that creates its item validates the expression twice, once against an empty
   item. Here only the second, real validation runs. The one difference: an update with
   an invalid expression on a missing item leaves a key-only item behind (the demo sends
   none).
7. Query lists every item of the table, filters it to the partition and sorts it again for
   each 1 MB page (and deep-copies the page): reading a 12,480-item campaign's ledger took
   ~35 s. Here a query on one partition (no index, no range-key condition) sorts just that
   partition once per page and pages by bisection. Everything else goes to moto's query.
8. Every item read back goes through moto's generic, shape-driven response serializer,
   ~2 ms per ledger item (most of a 12,480-item read). The items are DynamoDB JSON
   already; here Query, Scan, GetItem and BatchGetItem answers are written with json.dumps.

Measured in-process (client and moto): 17 ms -> 4 ms per recipient in batch mode,
22 ms -> 10 ms in single mode with SES. SQS, SES, CloudFormation and Lambda are stock
moto. The server starts through MotoServer's own bootstrap, which runs after these
patches and now carries a narrower form of fixes 1 and 2 (one table copy per
transaction, a lock around the backend): with fix 1 that copy is the table itself, so
the two compose. They belong in one place, MotoServer, as an option.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from sendonce_local import moto_server

MOTO_PATCHES = r"""
def _sendonce_demo_moto_patches():
    # Everything stays local to this function: the bootstrap that runs after it (MotoServer's)
    # defines module-level names of its own.
    import copy
    import json
    import pickle
    import threading

    import moto.dynamodb.comparisons as comparisons
    import moto.dynamodb.models as models
    import moto.dynamodb.parsing.ast_nodes as ast_nodes
    import moto.dynamodb.parsing.validators as validators
    import moto.dynamodb.responses as responses
    from moto.dynamodb.models.table import Table
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    cache_limit = 4096
    state = threading.local()

    # 1. A transaction rolls back the items it touched, not a copy of every table.
    def table_deepcopy(self, memo):
        if getattr(state, "in_transaction", False):
            return self  # the transaction's whole-table "backup": restored item by item instead
        result = type(self).__new__(type(self))
        memo[id(self)] = result
        for name, value in self.__dict__.items():
            object.__setattr__(result, name, copy.deepcopy(value, memo))
        return result

    Table.__deepcopy__ = table_deepcopy
    transact_write_items = models.DynamoDBBackend.transact_write_items

    def snapshot(backend, transact_items):
        touched = []
        for entry in transact_items:
            for op_type, op in entry.items():
                table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
                if table is None:
                    continue
                key = op.get("Item", {}) if op_type == "Put" else op.get("Key", {})
                try:
                    hash_key, range_key = backend.get_keys_value(table, key)
                except Exception:
                    continue  # moto rejects this entry itself before changing anything
                touched.append((table, hash_key, range_key, copy.deepcopy(table.get_item(hash_key, range_key))))
        return touched

    def restore(touched):
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

    def transact_write_items_touched_only(self, transact_items):
        touched = snapshot(self, transact_items)
        state.in_transaction = True
        try:
            return transact_write_items(self, transact_items)
        except BaseException:
            restore(touched)
            raise
        finally:
            state.in_transaction = False

    models.DynamoDBBackend.transact_write_items = transact_write_items_touched_only

    # 2. One DynamoDB request at a time.
    lock = threading.RLock()
    call_action = responses.DynamoHandler.call_action

    def call_action_serialized(self):
        with lock:
            return call_action(self)

    responses.DynamoHandler.call_action = call_action_serialized

    # 3. Parse each expression once.
    update_trees = {}

    class CachedUpdateExpressionParser:
        @staticmethod
        def make(expression):
            tree = update_trees.get(expression)
            if tree is None:
                if len(update_trees) >= cache_limit:
                    update_trees.clear()
                tree = update_trees[expression] = UpdateExpressionParser.make(expression)
            return tree

    models.UpdateExpressionParser = CachedUpdateExpressionParser
    responses.UpdateExpressionParser = CachedUpdateExpressionParser

    conditions = {}
    parse_condition = comparisons.ConditionExpressionParser.parse

    def parse_condition_cached(self):
        try:
            key = (
                self.condition_expression,
                json.dumps(self.expression_attribute_names, sort_keys=True),
                json.dumps(self.expression_attribute_values, sort_keys=True),
            )
        except (TypeError, ValueError):
            return parse_condition(self)
        cached = conditions.get(key)
        if cached is None:
            op = parse_condition(self)
            if len(conditions) >= cache_limit:
                conditions.clear()
            cached = conditions[key] = (op, list(self.expr_attr_names_found), list(self.expr_attr_values_found))
        # Callers extend these lists: hand out copies.
        self.expr_attr_names_found = list(cached[1])
        self.expr_attr_values_found = list(cached[2])
        return cached[0]

    comparisons.ConditionExpressionParser.parse = parse_condition_cached

    # 4. Validators that look at the whole expression check its root once.
    def check_root_only(check):
        def traverse(self, node):
            getattr(self, check)(node)
            return node

        return traverse

    validators.OverlappingPathsValidator.traverse = check_root_only("check_for_overlapping_paths")
    validators.ActionCountValidator.traverse = check_root_only("verify_action_counts")
    nodes_to_be_processed = ast_nodes.DepthFirstTraverser.nodes_to_be_processed

    def nodes_to_be_processed_once(self):
        nodes = self.__dict__.get("_nodes_to_be_processed")
        if nodes is None:
            nodes = self.__dict__["_nodes_to_be_processed"] = nodes_to_be_processed(self)
        return nodes

    ast_nodes.DepthFirstTraverser.nodes_to_be_processed = nodes_to_be_processed_once

    # 5. Copy expression trees by pickling.
    def copy_tree(node, memo=None):
        return pickle.loads(pickle.dumps(node, protocol=pickle.HIGHEST_PROTOCOL))

    validators.deepcopy = copy_tree

    # 6. Validate an update once, against the item it really changes.
    class OnceUpdateExpressionValidator(validators.UpdateExpressionValidator):
        def __init__(self, expression, *, expression_attribute_names, expression_attribute_values, item, table):
            # moto's pre-check against the empty item it is about to create; the validation
            # against the created item follows and raises the same errors.
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

        def validate(self):
            return self.node_to_validate if self._precheck else super().validate()

    models.UpdateExpressionValidator = OnceUpdateExpressionValidator

    # 7. Query one partition without listing, filtering and sorting the whole table per page.
    import bisect

    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT

    query = Table.query

    def query_one_partition(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                            scan_index_forward, projection_expressions, index_name=None, consistent_read=False,
                            filter_expression=None, hash_key_conditions=None, range_key_conditions=None,
                            **filter_kwargs):
        if (index_name is not None or hash_key is None or self.range_key_attr is None or range_comparison
                or range_key_conditions or filter_kwargs or self.range_key_type not in ("S", "N")):
            return query(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                         scan_index_forward, projection_expressions, index_name, consistent_read,
                         filter_expression, hash_key_conditions=hash_key_conditions,
                         range_key_conditions=range_key_conditions, **filter_kwargs)
        partition = self.items.get(hash_key) or {}
        ordered = sorted(partition.values(), key=lambda item: item.range_key.cast_value)
        keys = [item.range_key.cast_value for item in ordered]
        if exclusive_start_key is not None:
            start = DynamoType(exclusive_start_key[self.range_key_attr]).cast_value
            ordered = ordered[bisect.bisect_right(keys, start):] if scan_index_forward else ordered[:bisect.bisect_left(keys, start)]
        if scan_index_forward is False:
            ordered.reverse()
        results, size, last_evaluated_key = [], 0, None
        for item in ordered:
            item_size = item.size()
            if len(results) == limit or size + item_size > RESULT_SIZE_LIMIT:
                last_evaluated_key = self._get_last_evaluated_key(results[-1], None)
                break
            results.append(item)
            size += item_size
        scanned = len(results)
        # No copy: requests are applied one at a time (2.), so nothing changes an item
        # while this one's response is written.
        if filter_expression is not None:
            results = [item for item in results if filter_expression.expr(item)]
        if projection_expressions:
            results = [item.project(projection_expressions) for item in copy.deepcopy(results)]
        return results, scanned, last_evaluated_key

    Table.query = query_one_partition

    # 8. Items read back are already DynamoDB JSON: write them as JSON, not through moto's
    # shape-by-shape response serializer (~2 ms per ledger item).
    serialized = responses.DynamoHandler.serialized
    item_reads = {"Query", "Scan", "GetItem", "BatchGetItem"}

    def serialized_items_as_json(self, action_result):
        result = action_result.result
        if isinstance(action_result, responses.DynamoResult) and isinstance(result, dict) and self._get_action() in item_reads:
            try:
                body = json.dumps(result, separators=(",", ":"))
            except (TypeError, ValueError):
                return serialized(self, action_result)
            headers = dict(self.response_headers)
            headers["Content-Type"] = "application/x-amz-json-1.0"
            return 200, headers, body
        return serialized(self, action_result)

    responses.DynamoHandler.serialized = serialized_items_as_json


_sendonce_demo_moto_patches()
"""


class DemoMotoServer:
    """A moto server process with MOTO_PATCHES applied; `endpoint` uses localhost."""

    def __init__(self, *, startup_timeout_s: float = 30.0) -> None:
        self._startup_timeout_s = startup_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self.endpoint = ""

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> DemoMotoServer:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        log = tempfile.NamedTemporaryFile(prefix="sendonce-demo-moto-", suffix=".log", delete=False)
        self._log_path = Path(log.name)
        self._process = subprocess.Popen(
            [sys.executable, "-c", MOTO_PATCHES + moto_server._SERVER_BOOTSTRAP, "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session: Ctrl-C reaches the demo only, which then stops this in order.
            start_new_session=True,
        )
        log.close()
        self.endpoint = f"http://localhost:{port}"
        try:
            # Given an endpoint, MotoServer only waits until that server answers.
            moto_server.MotoServer(endpoint=self.endpoint, startup_timeout_s=self._startup_timeout_s).start()
        except BaseException:
            self.stop()
            raise
        return self

    def cpu_seconds(self) -> float:
        """CPU time the server process has used so far (user + system)."""
        if self._process is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self._process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, chars: int = 3000) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def __enter__(self) -> DemoMotoServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
