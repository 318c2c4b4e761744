"""The ledger's table and its reads (the `DeliveryReads` role): one consistent read per
delivery, a campaign's records over its shards, and a page of them. The writing roles
(claims.py, groups.py) build on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sendonce.adapters.dynamodb.ledger.items import _record
from sendonce.adapters.dynamodb.ledger_keys import LedgerKeys, ShardsOf
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups
from sendonce.domain.models import DeliveryKey, DeliveryRecord


class LedgerReads:
    def __init__(
        self, *, client: Any, table_name: str, shards_of: ShardsOf, mailbox_groups: MailboxGroups | None = None
    ):
        self._client = client
        self._table = table_name
        self._keys = LedgerKeys(shards_of)
        # The deployment's mailbox-provider groups: a claim keeps its recipient's on the item.
        self._groups = mailbox_groups or MailboxGroups()

    def _mailbox_group(self, email: str) -> str:
        return self._groups.of_address(email)

    def _key(self, key: DeliveryKey) -> dict[str, Any]:
        return self._keys.key(key)

    def get(self, key: DeliveryKey) -> DeliveryRecord | None:
        response = self._client.get_item(TableName=self._table, Key=self._key(key), ConsistentRead=True)
        item = response.get("Item")
        return _record(item) if item else None

    def records(self, campaign_id: str) -> Iterator[DeliveryRecord]:
        for item in self._keys.query_campaign(self._client, self._table, campaign_id, ConsistentRead=True):
            yield _record(item)

    def records_page(self, campaign_id: str, cursor: str | None, limit: int) -> tuple[list[DeliveryRecord], str | None]:
        items, following = self._keys.query_page(
            self._client, self._table, campaign_id, cursor, limit, ConsistentRead=True
        )
        return [_record(item) for item in items], following

    def get_many(self, campaign_id: str, recipient_ids: list[str]) -> dict[str, DeliveryRecord]:
        found: dict[str, DeliveryRecord] = {}
        for start in range(0, len(recipient_ids), 100):
            keys = [
                self._key(DeliveryKey(campaign_id=campaign_id, recipient_id=r))
                for r in recipient_ids[start : start + 100]
            ]
            request = {self._table: {"Keys": keys, "ConsistentRead": True}}
            while request:
                response = self._client.batch_get_item(RequestItems=request)
                for item in response["Responses"].get(self._table, []):
                    record = _record(item)
                    found[record.recipient_id] = record
                request = response.get("UnprocessedKeys") or None
        return found
