"""The suppression list on DynamoDB: one item per address, keyed by its fingerprint.

    fp (S, partition key)   email_fingerprint(address); the address itself is never stored
    reason, source, campaign_id, created_at

Adds are conditional puts (attribute_not_exists), so the first reason recorded for an
address stays and a repeated add is a no-op that says so.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

from sendonce.domain.deliverability.ports import ImportReport, Suppression, SuppressionReason
from sendonce.domain.errors import SuppressionsUnavailableError
from sendonce.domain.models import email_fingerprint

IMPORT_WORKERS = 8
BATCH_GET_KEYS = 100  # BatchGetItem's limit per request
# Keys DynamoDB leaves unprocessed (throttling, 16 MB) are asked again: full jitter, 50 ms
# doubling, five requests in all per chunk, then SuppressionsUnavailableError.
UNPROCESSED_ATTEMPTS = 5
UNPROCESSED_BASE_S = 0.05


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _suppression(item: dict[str, Any]) -> Suppression:
    return Suppression(
        fingerprint=item["fp"]["S"],
        reason=SuppressionReason(item["reason"]["S"]),
        source=item.get("source", {}).get("S", ""),
        campaign_id=item.get("campaign_id", {}).get("S"),
        created_at=item.get("created_at", {}).get("S"),
    )


class DynamoDBSuppressions:
    def __init__(
        self,
        *,
        client: Any,
        table_name: str,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ):
        self._client = client
        self._table = table_name
        self._sleep = sleep
        self._jitter = jitter

    def is_suppressed(self, email: str) -> Suppression | None:
        return self.get(email_fingerprint(email))

    def suppressed_among(self, emails: Iterable[str]) -> dict[str, Suppression]:
        # Consistent, as `get`: an unsubscribe recorded a moment ago must stop the next send.
        fingerprints = list(dict.fromkeys(email_fingerprint(e) for e in emails))
        found: dict[str, Suppression] = {}
        for start in range(0, len(fingerprints), BATCH_GET_KEYS):
            keys = [{"fp": {"S": fp}} for fp in fingerprints[start : start + BATCH_GET_KEYS]]
            request: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": True}}
            for attempt in range(UNPROCESSED_ATTEMPTS):
                if attempt:
                    self._sleep(self._jitter() * UNPROCESSED_BASE_S * 2 ** (attempt - 1))
                response = self._client.batch_get_item(RequestItems=request)
                for item in response.get("Responses", {}).get(self._table, []):
                    found[item["fp"]["S"]] = _suppression(item)
                request = response.get("UnprocessedKeys") or {}
                if not request:
                    break
            else:
                left = len(request.get(self._table, {}).get("Keys", []))
                raise SuppressionsUnavailableError(
                    f"{left} suppression key(s) still unprocessed after {UNPROCESSED_ATTEMPTS} requests"
                )
        return found

    def get(self, fingerprint: str) -> Suppression | None:
        # Consistent: an unsubscribe recorded a moment ago must stop the next send.
        response = self._client.get_item(TableName=self._table, Key={"fp": {"S": fingerprint}}, ConsistentRead=True)
        item = response.get("Item")
        return _suppression(item) if item else None

    def add(self, email: str, reason: SuppressionReason, source: str, campaign_id: str | None = None) -> bool:
        return self.add_fingerprint(email_fingerprint(email), reason, source, campaign_id)

    def add_fingerprint(
        self, fingerprint: str, reason: SuppressionReason, source: str, campaign_id: str | None = None
    ) -> bool:
        item = {
            "fp": {"S": fingerprint},
            "reason": {"S": SuppressionReason(reason).value},
            "source": {"S": source[:200]},
            "created_at": {"S": _now()},
        }
        if campaign_id:
            item["campaign_id"] = {"S": campaign_id}
        try:
            self._client.put_item(TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(fp)")
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise

    def remove(self, email: str) -> bool:
        response = self._client.delete_item(
            TableName=self._table, Key={"fp": {"S": email_fingerprint(email)}}, ReturnValues="ALL_OLD"
        )
        return "Attributes" in response

    def list(self) -> Iterator[Suppression]:
        paginator = self._client.get_paginator("scan")
        for page in paginator.paginate(TableName=self._table):
            for item in page["Items"]:
                yield _suppression(item)

    def import_(self, emails: Iterable[str], *, reason: SuppressionReason, source: str) -> ImportReport:
        # Conditional puts, not BatchWriteItem: a batch put would overwrite the reason of an
        # address that is already suppressed (a complaint would become 'manual').
        fingerprints = list(dict.fromkeys(email_fingerprint(e) for e in emails))
        with ThreadPoolExecutor(max_workers=IMPORT_WORKERS) as pool:
            results = list(pool.map(lambda fp: self.add_fingerprint(fp, reason, source), fingerprints))
        added = sum(results)
        return ImportReport(added=added, already_suppressed=len(results) - added)
