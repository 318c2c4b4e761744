"""The claim as one conditional write: its condition, derived from
`sendonce.domain.sending.delivery_tables.CLAIM_RULES`, and the UpdateItem parameters of a claim (one
delivery, or one member of a group).
"""

from __future__ import annotations

import functools
from typing import Any

from sendonce.adapters.dynamodb.ledger import items
from sendonce.adapters.dynamodb.ledger.items import _APPEND, _NAMES, _history, _now_iso, _used, _values
from sendonce.domain.models import DeliveryState, email_fingerprint
from sendonce.domain.sending import delivery_tables
from sendonce.domain.sending.delivery_tables import IDEMPOTENCY_WINDOW_MS

# --- the claim condition, derived from delivery_tables.CLAIM_RULES ------------------
# Each fact of a rule becomes a condition fragment that is exactly as true of an item as
# `delivery_tables.facts` is of its record (a comparison with a missing attribute is
# false in DynamoDB, so each fragment states the missing case explicitly). "The first
# matching rule says claim" is then: OR over the claim rules of (it matches AND no earlier
# rule that could match does). tests/integration/test_ledger_protocol.py runs every
# combination of facts through both this condition and `classify` on moto.

_STATE_VALUES = {state: f":st_{state.value}" for state in DeliveryState}


def _wrapped(expr: str) -> bool:
    if not expr.startswith("("):
        return False
    depth = 0
    for i, char in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i == len(expr) - 1
    return False


def _group(expr: str) -> str:
    """Parenthesised only when compound (DynamoDB refuses redundant parentheses)."""
    return f"({expr})" if (" OR " in expr or " AND " in expr) and not _wrapped(expr) else expr


def _all(parts: list[str]) -> str:
    return " AND ".join(_group(p) for p in parts)


def _states_fragment(states: frozenset | None) -> str | None:
    if states is None:
        return None
    parts = []
    if delivery_tables.ABSENT in states:
        parts.append("attribute_not_exists(#state)")
    present = sorted(s.value for s in states if s is not None)
    if present:
        parts.append(f"#state IN ({', '.join(':st_' + v for v in present)})")
    return " OR ".join(parts)


def _fact_fragments(rule: delivery_tables.ClaimRule, group_key: str | None) -> list[str]:
    parts = []
    if (states := _states_fragment(rule.states)) is not None:
        parts.append(states)
    if rule.same_payload is True:
        parts.append("attribute_not_exists(payload_hash) OR payload_hash = :ph")
    elif rule.same_payload is False:
        parts.append("attribute_exists(payload_hash) AND payload_hash <> :ph")
    if rule.lease is delivery_tables.Lease.LIVE:
        parts.append("lease_until_ms >= :now")
    elif rule.lease is delivery_tables.Lease.EXPIRED:
        parts.append("attribute_not_exists(lease_until_ms) OR lease_until_ms < :now")
    if rule.maybe_sent is delivery_tables.MaybeSent.NO:
        parts.append("attribute_not_exists(maybe_sent_at_ms)")
    elif rule.maybe_sent is delivery_tables.MaybeSent.FRESH:
        parts.append("maybe_sent_at_ms > :cutoff")
    elif rule.maybe_sent is delivery_tables.MaybeSent.OLD:
        parts.append("maybe_sent_at_ms <= :cutoff")
    if rule.group is not None:
        other_key = (
            "(attribute_not_exists(group_key) OR group_key <> :g)" if group_key else "attribute_exists(group_key)"
        )
        other = f"attribute_exists(maybe_sent_at_ms) AND {other_key}"
        parts.append(other if rule.group is delivery_tables.Group.OTHER else f"NOT ({other})")
    return parts


def _may_overlap(a: delivery_tables.ClaimRule, b: delivery_tables.ClaimRule) -> bool:
    return a.states is None or b.states is None or bool(a.states & b.states)


def claim_condition(*, keyed: bool, group_key: str | None) -> str:
    """The condition under which the first matching claim rule says claim. It depends on the
    rules, the provider's kind and whether the caller is a group (the key itself is a
    placeholder), so it is built once per combination, not on every claim."""
    return _claim_condition(delivery_tables.CLAIM_RULES, keyed, bool(group_key))


@functools.lru_cache(maxsize=16)
def _claim_condition(rules_table: tuple, keyed: bool, grouped: bool) -> str:
    group_key = ":g" if grouped else None
    rules = [r for r in rules_table if r.keyed is None or r.keyed == keyed]
    alternatives = []
    for i, rule in enumerate(rules):
        if rule.verdict is not delivery_tables.Verdict.CLAIM:
            continue
        parts = _fact_fragments(rule, group_key)
        for earlier in rules[:i]:
            if _may_overlap(earlier, rule):
                inner = _all(_fact_fragments(earlier, group_key))
                parts.append(f"NOT {inner}" if _wrapped(inner) else f"NOT ({inner})")
        alternatives.append(_all(parts))
    return " OR ".join(_group(a) for a in alternatives)


def _claim_values(condition: str) -> dict[str, Any]:
    """The state placeholders a derived condition uses."""
    return {name: {"S": state.value} for state, name in _STATE_VALUES.items() if name in condition}


def claim_update(
    *,
    owner: str,
    lease_until_ms: int,
    now_ms: int,
    batch_id: str,
    provider: str,
    payload_hash: str,
    email: str,
    keyed: bool,
    group_key: str | None,
    detail: str | None = None,
    mailbox_group: str | None = None,
    variant: str | None = None,
) -> dict[str, Any]:
    """The UpdateItem parameters of a claim (one delivery, or one member of a group).
    `mailbox_group`: the recipient's mailbox-provider group, kept on the item (its first
    claim's) so that the report counts its sends and events per group (stream_records.py)."""
    condition = claim_condition(keyed=keyed, group_key=group_key)
    values = _values(
        claimed="claimed",
        now=now_ms,
        owner=owner,
        lease=lease_until_ms,
        batch=batch_id,
        provider=provider,
        ph=payload_hash,
        fp=email_fingerprint(email),
        iso=_now_iso(),
        one=1,
        cutoff=now_ms - IDEMPOTENCY_WINDOW_MS,
    )
    values.update(_claim_values(condition))
    values.update(_history("claimed", owner, detail))
    update = (
        "SET #state = :claimed, #owner = :owner, lease_until_ms = :lease,"
        " batch_id = :batch, provider = :provider, payload_hash = if_not_exists(payload_hash, :ph),"
        " email_fp = if_not_exists(email_fp, :fp), updated_at = :iso, " + _APPEND
    )
    if keyed:
        # From the claim on, the provider may accept this delivery's request.
        update += f", maybe_sent_at_ms = {items._FIRST_MARK}, maybe_sent_by = if_not_exists(maybe_sent_by, :owner)"
    if group_key:
        update += ", group_key = :g"
        values.update(_values(g=group_key))
    if mailbox_group:
        update += ", mgroup = if_not_exists(mgroup, :mg)"
        values.update(_values(mg=mailbox_group))
    if variant:
        # An A/B campaign's variant, readable (its payload hash binds it already).
        update += ", variant = if_not_exists(variant, :var)"
        values.update(_values(var=variant))
    update += " ADD attempts :one"
    return {
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeNames": _NAMES,
        "ExpressionAttributeValues": _used(values, update, condition),
    }
