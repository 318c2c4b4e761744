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

The patches live by the part of moto they change: dynamodb_transactions.py,
dynamodb_locking.py, dynamodb_streams.py, dynamodb_expressions.py, dynamodb_reads.py,
cloudformation.py, moto_api.py, sqs_fairness.py, sqs_receiving.py, ses_headers.py and ses_account.py
(replacing.py: how ``replace`` records and undoes). This module is the entry point: the
version guard, the two sets in the order they are applied, and ``apply()`` / ``revert()``;
tests/integration/moto_patches/ holds a test file per part.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from contextlib import contextmanager

from sendonce_local.moto_patches.cloudformation import stack_updates_keep_dynamodb_tables
from sendonce_local.moto_patches.dynamodb_expressions import (
    expression_trees_copied_by_pickle,
    expressions_parsed_once,
    update_validators_check_root_once,
    updates_validated_once,
)
from sendonce_local.moto_patches.dynamodb_locking import (
    dynamodb_backend_one_call_at_a_time,
    dynamodb_requests_one_at_a_time,
)
from sendonce_local.moto_patches.dynamodb_reads import item_reads_written_as_json, queries_read_one_partition
from sendonce_local.moto_patches.dynamodb_streams import (
    stream_mappings_invoke_enabled_only,
    stream_reads_under_the_dynamodb_lock,
    stream_records_written_as_json,
)
from sendonce_local.moto_patches.dynamodb_transactions import (
    transactions_copy_each_table_once,
    transactions_restore_touched_items_only,
)
from sendonce_local.moto_patches.moto_api import docker_probe_fails_as_missing_attribute
from sendonce_local.moto_patches.replacing import PatchFunction, recorder, undo
from sendonce_local.moto_patches.replacing import Replace as Replace  # re-exported: a patch's signature
from sendonce_local.moto_patches.ses_account import ses_account_has_a_state
from sendonce_local.moto_patches.ses_headers import simple_sends_keep_their_headers
from sendonce_local.moto_patches.sqs_fairness import receives_serve_quiet_groups_first
from sendonce_local.moto_patches.sqs_receiving import receives_take_each_message_once

# constraints.txt and the `local` extra (pyproject.toml) pin the same version: update them
# together, after checking each patch in this package against the new moto
# (tests/integration/moto_patches/ helps).
MOTO_VERSION = "5.2.5"


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
            f"moto {installed}: check each patch in src/sendonce_local/moto_patches/ against moto {installed}'s "
            "source (tests/integration/moto_patches/ compares patched with stock moto), then update "
            "MOTO_VERSION there and the moto pin in constraints.txt together."
        )


# --- the patches, in the order they are applied -------------------------------------------

DEFECT_FIXES: tuple[PatchFunction, ...] = (
    transactions_copy_each_table_once,
    dynamodb_backend_one_call_at_a_time,
    docker_probe_fails_as_missing_attribute,
    stack_updates_keep_dynamodb_tables,
    stream_mappings_invoke_enabled_only,
    stream_reads_under_the_dynamodb_lock,
    receives_take_each_message_once,
    # A feature gap rather than a wrong answer: the campaign queue is an SQS fair queue on AWS
    # (its messages carry their campaign as MessageGroupId); stock moto receives in plain order.
    receives_serve_quiet_groups_first,
    # Another gap: SES v2 simple sends drop their headers, so what SES was asked to send
    # (List-Unsubscribe, Feedback-ID) could not be checked locally.
    simple_sends_keep_their_headers,
    # Another gap: SES v2 has no GetAccount, which the account health check and the rate cap read.
    ses_account_has_a_state,
)

# The speed patches (the demo's). Stock moto spends ~40 ms of CPU on each item of batch
# mode's two 100-item transactions per SQS message: 12,480 recipients would take ~9 minutes
# of moto time alone. Measured in-process, these take batch mode from 17 ms to 4 ms per
# recipient and single mode with SES from 22 ms to 10 ms. SES, CloudFormation, Lambda and
# SQS (but for its fair receives, a fix above) stay stock.
SPEED_PATCHES: tuple[PatchFunction, ...] = (
    transactions_restore_touched_items_only,
    dynamodb_requests_one_at_a_time,
    expressions_parsed_once,
    update_validators_check_root_once,
    expression_trees_copied_by_pickle,
    updates_validated_once,
    queries_read_one_partition,
    item_reads_written_as_json,
    stream_records_written_as_json,
)


# --- applying them ------------------------------------------------------------------------

# Per applied patch, in order: (owner, attribute, what it held before; replacing.MISSING if nothing).
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
            patch(recorder(replaced))
        except BaseException:
            undo(replaced)  # a patch is applied whole or not at all
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
        undo(_applied.popitem()[1])
