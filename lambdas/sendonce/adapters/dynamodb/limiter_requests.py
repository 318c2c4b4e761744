"""The shared limiter's slot requests (rate_limiter.py): the key of a slot item, the names of
a campaign's attributes in it, and the conditional `ADD` that reserves places.

    pk = limiter#<provider>, sk = slot#<epoch second>   used: reserved sends in that second;
                                                        per campaign: n#<id> places taken,
                                                        w#<id> how it shares, d#<id> the
                                                        dwell of its latest message (ms)
"""

from __future__ import annotations

from typing import Any

from sendonce.domain.sending.shares import Claimant

SLOT_RETENTION_S = 3600
COUNT_PREFIX, CLAIMANT_PREFIX, DWELL_PREFIX = "n#", "w#", "d#"


def slot_key(provider: str, slot: int) -> dict[str, Any]:
    return {"pk": {"S": f"limiter#{provider}"}, "sk": {"S": f"slot#{slot}"}}


def claimant_names(claimant: Claimant) -> dict[str, str]:
    cid = claimant.campaign_id
    return {"#mine": COUNT_PREFIX + cid, "#who": CLAIMANT_PREFIX + cid, "#dwell": DWELL_PREFIX + cid}


def reservation(
    table: str,
    provider: str,
    slot: int,
    n: int,
    capacity: int,
    claimant: Claimant | None,
    mine: int | None,
    dwell_ms: int | None,
) -> dict[str, Any]:
    """The conditional `ADD` of `n` places (within `mine` for a claimant, who says it sends)."""
    update = "ADD used :n SET expires_at = :exp"
    condition = "(attribute_not_exists(used) OR used <= :room)"
    names: dict[str, str] = {}
    values = {
        ":n": {"N": str(n)},
        ":room": {"N": str(capacity - n)},
        ":exp": {"N": str(slot + SLOT_RETENTION_S)},
    }
    if claimant is not None:
        update = "ADD used :n, #mine :n SET expires_at = :exp, #who = :who"
        names = claimant_names(claimant)
        values[":who"] = {"S": claimant.encode()}
        if mine is not None:
            condition += " AND (attribute_not_exists(#mine) OR #mine <= :myroom)"
            values[":myroom"] = {"N": str(mine - n)}
        if dwell_ms is not None:
            update += ", #dwell = :dwell"
            values[":dwell"] = {"N": str(max(0, int(dwell_ms)))}
        else:
            names.pop("#dwell")
    request: dict[str, Any] = {
        "TableName": table,
        "Key": slot_key(provider, slot),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeValues": values,
        "ReturnValues": "ALL_NEW" if claimant is not None else "UPDATED_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if names:
        request["ExpressionAttributeNames"] = names
    return request
