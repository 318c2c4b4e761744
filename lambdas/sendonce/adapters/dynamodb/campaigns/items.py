"""The campaign's own items in the campaigns table: its state item (state, settings, publish
leases, the open-batch count) and its content item; the state index behind `list`."""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from sendonce.adapters.dynamodb import batch_records as bk
from sendonce.adapters.dynamodb.counters import SUM_KEYS, counter_keys_for, recorded_key
from sendonce.adapters.dynamodb.report_aggregates import mark_update
from sendonce.contract import CAMPAIGNS_BY_STATE_INDEX
from sendonce.domain.campaigns.ports import StateChange
from sendonce.domain.campaigns.variants import Decision
from sendonce.domain.errors import CampaignBusyError, CampaignNotFoundError, IllegalTransitionError
from sendonce.domain.models import Campaign, CampaignState, Content
from sendonce.domain.sending.shards import LEGACY_LEDGER_SHARDS

logger = logging.getLogger(__name__)
_ser = TypeSerializer()

_de = TypeDeserializer()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _pk(campaign_id: str) -> dict[str, Any]:
    return {"S": f"campaign#{campaign_id}"}


# One attribute per live publish lease holder (`holder_<id>`: until when), beside the shared
# `publishing_until_ms` that completion waits for: the last live holder to end removes that.
HOLDER_PREFIX = "holder_"
# How often end_publish reads the campaign again when it changed between its two writes.
END_PUBLISH_ATTEMPTS = 4


def _holder_attribute(holder: str) -> str:
    if not holder.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"a publish lease holder is letters, digits, - and _: {holder!r}")
    return HOLDER_PREFIX + holder


def _decimals(value: Any) -> Any:
    """DynamoDB takes no float: a max_rate or a cap is stored as the decimal it prints as."""
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {k: _decimals(v) for k, v in value.items()}
    return value


def _campaign(item: dict[str, Any]) -> Campaign:
    # Campaigns created before the content had its own item carry it here (read as is).
    # `batch_shards` is this adapter's layout, not the campaign's: read by _batch_shards.
    # The publish lease holders are this adapter's bookkeeping too (end_publish).
    data = {
        k: _de.deserialize(v)
        for k, v in item.items()
        if k not in ("pk", "sk", bk.BATCH_SHARDS_ATTR) and not k.startswith(HOLDER_PREFIX)
    }
    data.pop("total", None)  # stored by earlier versions; status counts recipients from the ledger
    for name in ("open_batches", "version", "publishing_until_ms", "ledger_shards", "send_at_ms", "weight"):
        if name in data:
            data[name] = int(data[name])
    # Written before shards existed: its ledger records are under the plain campaign id.
    data.setdefault("ledger_shards", LEGACY_LEDGER_SHARDS)
    if isinstance(data.get("ab_test"), dict) and "after_s" in data["ab_test"]:
        # A Decimal as read; the test's duration takes an int of seconds (or '4h').
        data["ab_test"]["after_s"] = int(data["ab_test"]["after_s"])
    return Campaign.model_validate(data)


# A plain write to the campaign item is refused with TransactionConflictException while a
# publisher's transaction (add_batch) holds the same item. Nothing was written, so it is
# retried: full jitter, 20 ms doubling to 640 ms (about 1.3 s over six attempts, far longer
# than a two-item transaction), then CampaignBusyError, which the caller must surface.
CONFLICT_ATTEMPTS = 6
CONFLICT_BASE_S = 0.02


class CampaignItems:
    """A campaign's state and content items (the base of DynamoDBCampaignStore)."""

    def __init__(
        self,
        *,
        client: Any,
        table_name: str,
        page_size: int | None = None,
        conflict_attempts: int = CONFLICT_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        on_read: Callable[[Campaign], None] | None = None,
        counted: bool = False,
    ):
        self._client = client
        # Campaigns this store creates are counted from their creation (their status is read
        # from the counters a stream aggregator keeps): only where that aggregator runs.
        self._counted = counted
        self._table = table_name
        # Told of every campaign read (wiring passes the ledger's shard-count cache, so the
        # consumer's read of the campaign per message spares the ledger a read of its own).
        self._on_read = on_read
        # Keys read per index Query request (default: DynamoDB's 1 MB pages); tests set it small.
        self._page_size = page_size
        self._conflict_attempts = conflict_attempts
        self._sleep = sleep
        self._jitter = jitter
        # Batch shard counts of campaigns read or created here (fixed at creation: exact).
        self._known_batch_shards: dict[str, int] = {}

    def _update_campaign(self, **request: Any) -> dict[str, Any]:
        """UpdateItem on a campaign item, retried while it meets a transaction on that item."""
        for attempt in range(self._conflict_attempts):
            try:
                response: dict[str, Any] = self._client.update_item(TableName=self._table, **request)
                return response
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionConflictException":
                    raise
                if attempt + 1 == self._conflict_attempts:
                    key = request["Key"]["pk"]["S"]
                    raise CampaignBusyError(
                        f"{key}: write refused {self._conflict_attempts} times by a concurrent transaction"
                    ) from exc
                self._sleep(self._jitter() * CONFLICT_BASE_S * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _key(self, campaign_id: str, sk: str = "campaign") -> dict[str, Any]:
        return {"pk": _pk(campaign_id), "sk": {"S": sk}}

    def create(self, campaign: Campaign) -> Campaign:
        """The state item and the content item in one transaction: neither exists without the other."""
        now = _now()
        campaign = campaign.model_copy(update={"created_at": now, "updated_at": now, "state": CampaignState.DRAFT})
        if campaign.content is None:
            raise ValueError(f"campaign {campaign.campaign_id!r} has no content")
        state = campaign.model_dump(mode="json", exclude_none=True, exclude={"content"})
        if not state.get("pacing"):
            state.pop("pacing", None)  # no caps of its own: the item stays as before caps existed
        item = {k: _ser.serialize(_decimals(v)) for k, v in state.items()}
        item.update(self._key(campaign.campaign_id))
        item[bk.BATCH_SHARDS_ATTR] = {"N": str(bk.batch_shards_for(campaign.ledger_shards))}
        content = {
            **self._key(campaign.campaign_id, "content"),
            "content": _ser.serialize(campaign.content.model_dump(mode="json", exclude_none=True)),
        }
        items = [item, content]
        if self._counted:
            items.append(
                {
                    **recorded_key(campaign.campaign_id),
                    "since_creation": {"BOOL": True},
                    "batches": {"N": "0"},
                    "counter_keys": {"N": str(counter_keys_for(campaign.ledger_shards))},
                    # Its totals' item count: a status read is one BatchGetItem of them.
                    "sum_keys": {"N": str(SUM_KEYS)},
                }
            )
        puts = [
            {"Put": {"TableName": self._table, "Item": i, "ConditionExpression": "attribute_not_exists(pk)"}}
            for i in items
        ]
        try:
            self._client.transact_write_items(TransactItems=puts)
        except ClientError as exc:
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if "ConditionalCheckFailed" in reasons:
                raise IllegalTransitionError(f"campaign {campaign.campaign_id!r} already exists") from exc
            raise
        self._learn_batch_shards(campaign.campaign_id, item)
        return campaign

    def get(self, campaign_id: str) -> Campaign:
        response = self._client.get_item(TableName=self._table, Key=self._key(campaign_id), ConsistentRead=True)
        if "Item" not in response:
            raise CampaignNotFoundError(f"campaign {campaign_id!r} does not exist")
        campaign = _campaign(response["Item"])
        self._learn_batch_shards(campaign_id, response["Item"])
        if self._on_read is not None:
            self._on_read(campaign)
        return campaign

    def record_decision(self, campaign_id: str, decision: Decision) -> Campaign:
        try:
            response = self._update_campaign(
                Key=self._key(campaign_id),
                UpdateExpression="SET #d = :d, updated_at = :now",
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(#d)",
                ExpressionAttributeNames={"#d": "decision"},
                ExpressionAttributeValues={
                    ":d": _ser.serialize(_decimals(decision.model_dump(mode="json"))),
                    ":now": {"S": _now()},
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            if "Item" not in exc.response:
                raise CampaignNotFoundError(f"campaign {campaign_id!r} does not exist") from exc
            return _campaign(exc.response["Item"])  # decided before: that decision stands
        return _campaign(response["Attributes"])

    def content(self, campaign_id: str) -> Content:
        response = self._client.get_item(
            TableName=self._table, Key=self._key(campaign_id, "content"), ConsistentRead=True
        )
        if "Item" in response:
            return Content.model_validate(_de.deserialize(response["Item"]["content"]))
        legacy = self.get(campaign_id).content  # created by a version that kept it on the state item
        if legacy is None:
            raise CampaignNotFoundError(f"campaign {campaign_id!r} has no content")
        return legacy

    def transition(self, campaign_id: str, change: StateChange) -> Campaign:
        to, by, reason, stays = change.to, change.by, change.reason, change.stays
        publishing_until_ms, holder, open_batches = change.publishing_until_ms, change.holder, change.open_batches
        unless_publishing_at_ms, send_at_ms, clear_send_at = (
            change.unless_publishing_at_ms,
            change.send_at_ms,
            change.clear_send_at,
        )
        if_send_at_ms, if_reason, mark = change.if_send_at_ms, change.if_reason, change.mark
        allowed = list(change.allowed_from)
        states = {f":from{i}": {"S": s.value} for i, s in enumerate(allowed)}
        values = {":now": {"S": _now()}, ":one": {"N": "1"}, **states}
        update = "SET updated_at = :now"
        if not stays:
            update += ", #state = :to, state_changed_by = :by"
            values.update({":to": {"S": to.value}, ":by": {"S": by}})
        condition = f"attribute_exists(pk) AND #state IN ({', '.join(states)})"
        names = {"#state": "state"}
        if publishing_until_ms is not None:
            update += ", publishing_until_ms = :lease"
            values[":lease"] = {"N": str(publishing_until_ms)}
            if holder is not None:
                update += ", #holder = :lease"
                names["#holder"] = _holder_attribute(holder)
        if open_batches is not None:
            update += ", open_batches = :open"
            values[":open"] = {"N": str(open_batches)}
        if unless_publishing_at_ms is not None:
            condition += " AND (attribute_not_exists(publishing_until_ms) OR publishing_until_ms < :at)"
            values[":at"] = {"N": str(unless_publishing_at_ms)}
        if send_at_ms is not None:
            update += ", send_at_ms = :send_at"
            values[":send_at"] = {"N": str(send_at_ms)}
        if if_send_at_ms is not None:
            condition += " AND send_at_ms = :scheduled_for"
            values[":scheduled_for"] = {"N": str(if_send_at_ms)}
        if if_reason is not None:
            condition += " AND state_reason = :if_reason"
            values[":if_reason"] = {"S": if_reason[:500]}
        removed = ["send_at_ms"] if clear_send_at else []
        if stays:
            update += " ADD version :one"
        elif reason:
            update += ", state_reason = :reason"
            values[":reason"] = {"S": reason[:500]}
            update += " ADD version :one"
        else:
            removed.append("state_reason")
            update += " ADD version :one"
        if removed:
            update += f" REMOVE {', '.join(removed)}"
        try:
            response = self._update_campaign(
                Key=self._key(campaign_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
            if not old:
                raise CampaignNotFoundError(f"campaign {campaign_id!r} does not exist") from exc
            current = _de.deserialize(old["state"])
            scheduled_for = int(_de.deserialize(old["send_at_ms"])) if "send_at_ms" in old else None
            if current in {s.value for s in allowed} and if_send_at_ms not in (None, scheduled_for):
                raise IllegalTransitionError(
                    f"campaign {campaign_id!r} is scheduled for another time; it cannot move to {to.value}"
                ) from exc
            old_reason = _de.deserialize(old["state_reason"]) if "state_reason" in old else None
            if current in {s.value for s in allowed} and if_reason is not None and old_reason != if_reason[:500]:
                raise IllegalTransitionError(
                    f"campaign {campaign_id!r} is {current} for another reason ({old_reason or 'none given'});"
                    f" it cannot move to {to.value}"
                ) from exc
            if current in {s.value for s in allowed}:
                raise IllegalTransitionError(
                    f"campaign {campaign_id!r} is being published; it cannot move to {to.value} now"
                ) from exc
            raise IllegalTransitionError(
                f"campaign {campaign_id!r} is {current}; cannot move to {to.value} "
                f"(only from {', '.join(s.value for s in allowed)})"
            ) from exc
        self._learn_batch_shards(campaign_id, response["Attributes"])
        campaign = _campaign(response["Attributes"])
        if mark is not None:
            self._leave_mark(campaign, event=mark, by=by, reason=reason)
        return campaign

    def _leave_mark(self, campaign: Campaign, *, event: str, by: str, reason: str | None) -> None:
        """The report's mark of a move just made. Written after it, not with it: a failure
        here is logged and the move stands (the campaign item keeps who moved it and why);
        the mark is keyed by the version the move made, so the same move never marks twice."""
        request = mark_update(
            self._table,
            campaign.campaign_id,
            version=campaign.version,
            at_ms=int(time.time() * 1000),
            event=event,
            by=by,
            reason=reason,
        )
        try:
            self._client.update_item(**request)
        except ClientError as exc:
            logger.warning(
                "campaign moved; its report mark was not written",
                extra={"campaign_id": campaign.campaign_id, "event": event, "error": str(exc)[:300]},
            )

    def end_publish(self, campaign_id: str, holder: str, *, now_ms: int) -> None:
        """Remove `holder`'s lease; then, if no other holder's lease runs past `now_ms`, the
        shared lease and the expired holders' (a publisher that died), conditional on the
        campaign's version being the one just read: a renewal or a move in between changes
        it, and the decision is taken again on what the refused write returns."""
        response = self._update_campaign(
            Key=self._key(campaign_id),
            UpdateExpression="REMOVE #holder",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#holder": _holder_attribute(holder)},
            ReturnValues="ALL_NEW",
        )
        item = response["Attributes"]
        for _ in range(END_PUBLISH_ATTEMPTS):
            holders = {k: int(v["N"]) for k, v in item.items() if k.startswith(HOLDER_PREFIX)}
            if any(until > now_ms for until in holders.values()):
                return  # another publisher still holds a live lease: the shared one stays
            if "publishing_until_ms" not in item and not holders:
                return
            names = {f"#h{i}": name for i, name in enumerate(sorted(holders))}
            removed = ", ".join(["publishing_until_ms", *names])
            condition, values = "attribute_not_exists(version)", {}
            if "version" in item:
                condition, values = "version = :seen", {":seen": item["version"]}
            try:
                self._update_campaign(
                    Key=self._key(campaign_id),
                    UpdateExpression=f"REMOVE {removed}",
                    ConditionExpression=condition,
                    **({"ExpressionAttributeNames": names} if names else {}),
                    **({"ExpressionAttributeValues": values} if values else {}),
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                item = exc.response.get("Item") or {}
                if not item:
                    return  # the campaign is gone: nothing holds it
        logger.warning(
            "publish lease left to expire: the campaign kept changing while its last holder ended",
            extra={"campaign_id": campaign_id},
        )

    def list(self, state: CampaignState | None = None) -> Iterator[Campaign]:
        """The campaigns (in `state`), sorted by id: their keys from the index, one Query per
        state, then their state items, 100 per BatchGetItem. Reads campaigns only."""
        states = [CampaignState(state)] if state is not None else list(CampaignState)
        keys: list[dict[str, Any]] = []
        for wanted in states:
            request: dict[str, Any] = {
                "TableName": self._table,
                "IndexName": CAMPAIGNS_BY_STATE_INDEX,
                "KeyConditionExpression": "#state = :state",
                "ExpressionAttributeNames": {"#state": "state"},
                "ExpressionAttributeValues": {":state": {"S": wanted.value}},
            }
            if self._page_size:
                request["PaginationConfig"] = {"PageSize": self._page_size}
            for page in self._client.get_paginator("query").paginate(**request):
                keys.extend({"pk": item["pk"], "sk": item["sk"]} for item in page["Items"])
        campaigns: list[Campaign] = []
        for start in range(0, len(keys), 100):
            pending: dict[str, Any] = {self._table: {"Keys": keys[start : start + 100]}}
            for attempt in range(self._conflict_attempts):
                if attempt:
                    self._sleep(self._jitter() * CONFLICT_BASE_S * 2**attempt)
                response = self._client.batch_get_item(RequestItems=pending)
                campaigns.extend(_campaign(item) for item in response.get("Responses", {}).get(self._table, []))
                pending = response.get("UnprocessedKeys") or {}
                if not pending:
                    break
            else:
                raise CampaignBusyError("campaign list: some campaigns stayed unread (throttled)")
        # An item moved between states while listed may be read twice.
        unique = {c.campaign_id: c for c in campaigns if state is None or c.state is state}
        return iter(sorted(unique.values(), key=lambda c: c.campaign_id))
