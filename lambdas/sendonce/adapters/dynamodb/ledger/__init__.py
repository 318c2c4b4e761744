"""The delivery ledger on DynamoDB: one item per (campaign_id, recipient_id), its partition-key
value spread over the campaign's shards (ledger_keys.py).

The claim condition is derived from `sendonce.domain.sending.delivery_tables.CLAIM_RULES`, so a claim
is one atomic conditional write; a failed claim returns the old item
(ReturnValuesOnConditionCheckFailure=ALL_OLD), which the same rules classify without
another read. Every later write is conditional on the owner that claimed and on the
source states `protocol.TRANSITIONS` allows for it.

One module per role of the `Ledger` port: reads.py (the table and `DeliveryReads`), claims.py
(`DeliveryClaims`), groups.py (`SendGroupClaims`); conditions.py derives the claim's condition
and items.py holds what they share. tests/integration/test_ledger_protocol.py compares every
conditional write with the transition table, row by row. Its keys (ledger_keys.py) and its
reads for events (ledger_events.py) are modules of their own.
"""

from __future__ import annotations

from sendonce.adapters.dynamodb.ledger.claims import LedgerClaims
from sendonce.adapters.dynamodb.ledger.conditions import claim_condition
from sendonce.adapters.dynamodb.ledger.groups import LedgerGroups
from sendonce.adapters.dynamodb.ledger.items import _record

__all__ = ["DynamoDBLedger", "_record", "claim_condition"]


class DynamoDBLedger(LedgerClaims, LedgerGroups):
    """The `Ledger` port: its claims, its group claims and (through both) its reads."""
