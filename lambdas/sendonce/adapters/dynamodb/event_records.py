"""SES's record of a campaign, for the audit (domain/audit): the `Send` events its
configuration set delivered, recorded on each delivery's ledger item by the events function
(ledger_events.py: `provider_events`, `provider_sent_id`).

What this cannot prove: SES lists nothing, so an email SES accepted whose events never
arrived (no event destination, a lost event) looks exactly like one never accepted. The
audit therefore finds duplicates (two `Send` events with different message ids for one
delivery) and sends the ledger does not know of, but proves nothing absent
(`proves_absence = False`); SES's message-insights export jobs would be a second witness
where an account has them (moto 5.2.5 implements no export job).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from sendonce.adapters.dynamodb.ledger_keys import LedgerKeys, ShardsOf
from sendonce.domain.audit.records import ListedEmail

_de = TypeDeserializer()


def _ms(iso: Any, default: int) -> int:
    try:
        parsed = dt.datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return default
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def _at_ms(entry: dict[str, Any], default: int) -> int:
    """An entry's time: `t` (epoch ms), else its event's own time, else its arrival."""
    if entry.get("t") is not None:
        return int(entry["t"])
    return _ms(entry.get("occurred_at") or entry.get("at"), default)


class LedgerEventRecords:
    proves_absence = False
    retention_ms: int | None = None

    def __init__(self, *, client: Any, ledger_table: str, shards_of: ShardsOf, provider: str):
        self.name = provider
        self._client = client
        self._table = ledger_table
        self._keys = LedgerKeys(shards_of)
        self.requests = 0

    def listed(self, campaign_id: str, *, since_ms: int) -> Iterator[ListedEmail]:
        for item in self._keys.query_campaign(
            self._client,
            self._table,
            campaign_id,
            FilterExpression="attribute_exists(provider_events)",
            ProjectionExpression="recipient_id, email_fp, provider_events",
        ):
            recipient_id = item["recipient_id"]["S"]
            fingerprint = item.get("email_fp", {}).get("S")
            seen: set[str] = set()
            for entry in _de.deserialize(item["provider_events"]):
                # ledger_events.py's short names; the long ones in entries written before them
                message_id = entry.get("m") or entry.get("message_id")
                if (entry.get("k") or entry.get("event")) != "sent" or not message_id or message_id in seen:
                    continue
                seen.add(message_id)
                yield ListedEmail(
                    email_id=str(message_id),
                    to_fingerprints=(fingerprint,) if fingerprint else (),
                    sender="",
                    subject="",
                    # Unordered: nothing is reported older than the window it was asked for.
                    created_at_ms=max(since_ms, _at_ms(entry, since_ms)),
                    campaign_id=campaign_id,
                    recipient_id=recipient_id,
                )

    def tags(self, email_id: str) -> Mapping[str, str] | None:  # pragma: no cover - every listed email has them
        return None
