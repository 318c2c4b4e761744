"""TransactWriteItems' backup of the tables it writes: one copy per table (a defect fix), or
only the items it names (a speed patch).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_dynamodb_transactions.py.
"""

from __future__ import annotations

import copy
import functools
import threading
from typing import Any

from sendonce_local.moto_patches.dynamodb_locking import DYNAMODB_LOCK
from sendonce_local.moto_patches.replacing import Replace


class _TransactionState(threading.local):
    # Deep copies of tables made by the running transact_write_items, by id of the original;
    # None outside a transaction.
    table_copies: dict[int, Any] | None = None
    # Set while transactions_restore_touched_items_only backs up the items instead.
    shares_tables: bool = False


_TRANSACTION = _TransactionState()


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
        with DYNAMODB_LOCK:  # the backup must see the same items the transaction writes
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
