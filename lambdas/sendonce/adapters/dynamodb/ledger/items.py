"""The ledger item as DynamoDB holds it, and what every ledger write shares: the record an
item reads as, the placeholder values, the history entry and the update fragments of the
maybe-sent mark.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from sendonce.adapters.dynamodb.ledger_keys import campaign_id_of
from sendonce.domain.models import DeliveryRecord, DeliveryState

_ser = TypeSerializer()
_de = TypeDeserializer()

_NAMES = {"#state": "state", "#owner": "owner"}


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _values(**values: Any) -> dict[str, Any]:
    return {f":{name}": _ser.serialize(value) for name, value in values.items()}


def _record(item: dict[str, Any]) -> DeliveryRecord:
    data = {k: _de.deserialize(v) for k, v in item.items()}
    return DeliveryRecord(
        campaign_id=campaign_id_of(item),
        recipient_id=data["recipient_id"],
        state=DeliveryState(data.get("state", "pending")),
        owner=data.get("owner"),
        lease_until_ms=_int(data.get("lease_until_ms")),
        attempts=_int(data.get("attempts")) or 0,
        batch_id=data.get("batch_id"),
        payload_hash=data.get("payload_hash"),
        provider=data.get("provider"),
        provider_message_id=data.get("provider_message_id"),
        reason=data.get("reason"),
        error_class=data.get("error_class"),
        email_fingerprint=data.get("email_fp"),
        maybe_sent_at_ms=_int(data.get("maybe_sent_at_ms")),
        maybe_sent_by=data.get("maybe_sent_by"),
        group_key=data.get("group_key"),
        variant=data.get("variant"),
        updated_at=data.get("updated_at"),
        history=[{k: (int(v) if k.endswith("_ms") else v) for k, v in h.items()} for h in data.get("history", [])],
    )


def _used(values: dict[str, Any], *expressions: str) -> dict[str, Any]:
    """Only the placeholders the expressions name (DynamoDB refuses unused ones)."""
    text = " ".join(expressions)
    return {name: value for name, value in values.items() if re.search(re.escape(name) + r"\b", text)}


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _history(event: str, owner: str | None = None, detail: str | None = None) -> dict[str, Any]:
    entry = {"at": _now_iso(), "event": event}
    if owner:
        entry["owner"] = owner
    if detail:
        entry["detail"] = detail[:500]
    return {":entry": {"L": [_ser.serialize(entry)]}, ":empty": {"L": []}}


_APPEND = "history = list_append(if_not_exists(history, :empty), :entry)"


# _LIFT_GUARD and _FIRST_MARK are read as `items._LIFT_GUARD` / `items._FIRST_MARK` where
# they are used, so that replacing them here (tests/model/mutants.py) reaches every write.
_LIFT = "maybe_sent_at_ms, maybe_sent_by, group_key"
# Only the owner whose attempt set the mark may lift it (a refusal seen by a later owner
# says nothing of an earlier owner's request).
_LIFT_GUARD = " AND maybe_sent_by = :me"
# The mark keeps the *first* possibly accepted attempt: the key's 24 h count from there.
_FIRST_MARK = "if_not_exists(maybe_sent_at_ms, :now)"
