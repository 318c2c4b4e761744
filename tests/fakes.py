"""In-memory fakes of the ports (domain/{sending,campaigns,deliverability,jobs}/ports.py), for
unit tests of domain logic (no sockets). tests/integration/test_port_contracts.py runs the same
contract tests against them and the DynamoDB adapters, and checks that each has every method of
its port.

Over 500 lines: one in-memory fake per port, side by side.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path

from sendonce.domain.campaigns.ports import MOVES_PER_WRITE, BatchStatus, CounterTotals, Counts, StateChange
from sendonce.domain.campaigns.variants import Decision
from sendonce.domain.deliverability import event_order
from sendonce.domain.deliverability.ports import (
    AccountState,
    Annotation,
    AnnotationStatus,
    CampaignFeedback,
    Enforcement,
    EventKind,
    FeedbackCounter,
    HealthRecord,
    ImportReport,
    ProviderEvent,
    ReopenReport,
    Suppression,
    SuppressionReason,
    UnknownDelivery,
)
from sendonce.domain.errors import CampaignNotFoundError, IllegalTransitionError, LeaseLostError
from sendonce.domain.models import (
    BatchMessage,
    Campaign,
    Content,
    DeliveryKey,
    DeliveryRecord,
    DeliveryRequest,
    DeliveryState,
    OutboundEmail,
    Receipt,
    SendGroup,
    email_fingerprint,
)
from sendonce.domain.sending import delivery_tables
from sendonce.domain.sending.delivery_tables import Event, Verdict, classify
from sendonce.domain.sending.ports import ClaimResult, ClaimStatus, GroupClaim


class FakeLedger:
    def __init__(self):
        self.items: dict[tuple[str, str], DeliveryRecord] = {}
        self.requests = Counter()
        self._lock = threading.Lock()

    def _put(self, record: DeliveryRecord, event: str, owner: str | None = None) -> None:
        history = [*record.history, {"event": event, "owner": owner}]
        self.items[(record.campaign_id, record.recipient_id)] = record.model_copy(update={"history": history})

    def claim(self, request: DeliveryRequest, *, payload_hash: str, lease_until_ms: int, now_ms: int) -> ClaimResult:
        with self._lock:
            self.requests["claim"] += 1
            record = self.items.get((request.campaign_id, request.recipient_id))
            verdict = classify(
                record, payload_hash=payload_hash, provider_idempotent=request.provider_idempotent, now_ms=now_ms
            )
            if verdict is Verdict.CLAIM:
                base = record or DeliveryRecord(
                    campaign_id=request.campaign_id, recipient_id=request.recipient_id, state=DeliveryState.PENDING
                )
                update = {
                    "state": DeliveryState.CLAIMED,
                    "owner": request.owner,
                    "lease_until_ms": lease_until_ms,
                    "attempts": base.attempts + 1,
                    "payload_hash": base.payload_hash or payload_hash,
                    "batch_id": request.batch_id,
                    "provider": request.provider,
                    "variant": base.variant or request.variant,
                }
                if request.provider_idempotent and base.maybe_sent_at_ms is None:
                    update.update(maybe_sent_at_ms=now_ms, maybe_sent_by=request.owner)
                self._put(base.model_copy(update=update), "claimed", request.owner)
                return ClaimResult(ClaimStatus.CLAIMED)
            if verdict is Verdict.STALE:
                self._put(record.model_copy(update={"state": DeliveryState.UNKNOWN, "error_class": "stale"}), "unknown")
                return ClaimResult(
                    ClaimStatus.FINAL, self.items[(record.campaign_id, record.recipient_id)], closed_as_unknown=True
                )
            if verdict in (Verdict.FINAL, Verdict.CONFLICT):
                return ClaimResult(ClaimStatus(verdict.value), record)
            return ClaimResult(ClaimStatus.HELD, record)

    def _fenced(self, key: DeliveryKey, owner: str, event: Event) -> DeliveryRecord:
        record = self.items.get((key.campaign_id, key.recipient_id))
        if record is None or record.owner != owner or record.state.value not in delivery_tables.sources(event):
            raise LeaseLostError(f"{key} not owned by {owner}")
        return record

    def mark_in_flight(self, key: DeliveryKey, *, owner: str, now_ms: int) -> None:
        with self._lock:
            self.requests["mark_in_flight"] += 1
            record = self._fenced(key, owner, Event.MARK_IN_FLIGHT)
            self._put(
                record.model_copy(
                    update={
                        "state": DeliveryState.IN_FLIGHT,
                        "maybe_sent_at_ms": record.maybe_sent_at_ms or now_ms,
                        "maybe_sent_by": record.maybe_sent_by or owner,
                    }
                ),
                "in_flight",
                owner,
            )

    def mark_sent(self, key: DeliveryKey, *, owner: str, receipt: Receipt) -> None:
        with self._lock:
            self.requests["mark_sent"] += 1
            record = self._fenced(key, owner, Event.MARK_SENT)
            self._put(
                record.model_copy(
                    update={"state": DeliveryState.SENT, "provider_message_id": receipt.provider_message_id}
                ),
                "sent",
                owner,
            )

    def settle(self, key, *, owner, state, reason, error_class, maybe_sent=False, refused=False, now_ms) -> None:
        with self._lock:
            self.requests["settle"] += 1
            record = self._fenced(key, owner, delivery_tables.settle_event(state, maybe_sent=maybe_sent))
            if (
                state is DeliveryState.SUPPRESSED
                and record.maybe_sent_at_ms is not None
                and record.maybe_sent_by != owner
            ):
                state, reason = (
                    DeliveryState.UNKNOWN,
                    f"{reason}; an earlier attempt may have been accepted by the provider",
                )
            update = {"state": state, "reason": reason, "error_class": error_class, "lease_until_ms": None}
            if maybe_sent and record.maybe_sent_at_ms is None:
                update.update(maybe_sent_at_ms=now_ms, maybe_sent_by=owner)
            elif refused and record.maybe_sent_by == owner:
                update.update(maybe_sent_at_ms=None, maybe_sent_by=None, group_key=None)
            self._put(record.model_copy(update=update), state.value, owner)

    def close_unclaimed(self, campaign_id, recipient_ids: Iterable[str], *, state, reason, batch_id) -> int:
        event = {
            DeliveryState.DEAD_LETTERED: Event.CLOSE_DEAD_LETTERED,
            DeliveryState.SUPPRESSED: Event.CLOSE_SUPPRESSED,
        }[state]
        moved = 0
        with self._lock:
            for rid in recipient_ids:
                record = self.items.get((campaign_id, rid))
                if record is None and not delivery_tables.allows_absent(event):
                    continue
                if record is None:
                    record = DeliveryRecord(
                        campaign_id=campaign_id, recipient_id=rid, state=DeliveryState.PENDING, batch_id=batch_id
                    )
                elif record.state.value not in delivery_tables.sources(event):
                    continue
                self._put(record.model_copy(update={"state": state, "reason": reason}), state.value)
                moved += 1
        return moved

    def close_as_read(self, record, event, *, reason, now_ms, key=None, batch_id=None):
        key = key or record.key
        with self._lock:
            current = self.items.get((key.campaign_id, key.recipient_id))
            if current != record:
                return None
            base = record or DeliveryRecord(
                campaign_id=key.campaign_id,
                recipient_id=key.recipient_id,
                state=DeliveryState.PENDING,
                batch_id=batch_id,
            )
            target = delivery_tables.transition(event).target
            self._put(base.model_copy(update={"state": target, "reason": reason, "lease_until_ms": None}), target.value)
            return self.items[(key.campaign_id, key.recipient_id)]

    def get_many(self, campaign_id: str, recipient_ids: list[str]) -> dict[str, DeliveryRecord]:
        return {rid: self.items[(campaign_id, rid)] for rid in recipient_ids if (campaign_id, rid) in self.items}

    def get(self, key: DeliveryKey) -> DeliveryRecord | None:
        return self.items.get((key.campaign_id, key.recipient_id))

    def records(self, campaign_id: str) -> Iterator[DeliveryRecord]:
        return iter([r for (c, _), r in sorted(self.items.items()) if c == campaign_id])

    def records_page(self, campaign_id: str, cursor: str | None, limit: int) -> tuple[list[DeliveryRecord], str | None]:
        # Keyed on the last recipient id read, as a Query's ExclusiveStartKey is.
        ordered = [
            r for (c, rid), r in sorted(self.items.items()) if c == campaign_id and (cursor is None or rid > cursor)
        ]
        page = ordered[:limit]
        return page, page[-1].recipient_id if len(ordered) > limit else None

    def state_of(self, campaign_id: str, recipient_id: str) -> DeliveryState | None:
        record = self.items.get((campaign_id, recipient_id))
        return record.state if record else None

    # --- send groups (SendGroupClaims): all members or none, as the adapter's transactions ---

    def claim_group(
        self,
        group: SendGroup,
        payload_hashes: dict[str, str],
        *,
        owner: str,
        provider: str,
        lease_until_ms: int,
        now_ms: int,
        variants: Mapping[str, str] | None = None,
    ) -> GroupClaim:
        with self._lock:
            self.requests["claim_group"] += 1
            records = {r.recipient_id: self.items.get((group.campaign_id, r.recipient_id)) for r in group.recipients}
            refused = {
                rid: record
                for rid, record in records.items()
                if classify(
                    record,
                    payload_hash=payload_hashes[rid],
                    provider_idempotent=True,
                    now_ms=now_ms,
                    group_key=group.idempotency_key,
                )
                is not Verdict.CLAIM
            }
            if refused:
                final = {rid: r for rid, r in refused.items() if r is not None and r.state in delivery_tables.FINAL}
                leases = [
                    r.lease_until_ms
                    for r in refused.values()
                    if r is not None and r.state not in delivery_tables.FINAL and (r.lease_until_ms or 0) >= now_ms
                ]
                return GroupClaim(claimed=False, final=final, held_until_ms=max(leases, default=None))
            for rid, record in records.items():
                base = record or DeliveryRecord(
                    campaign_id=group.campaign_id, recipient_id=rid, state=DeliveryState.PENDING
                )
                update = {
                    "state": DeliveryState.CLAIMED,
                    "owner": owner,
                    "lease_until_ms": lease_until_ms,
                    "attempts": base.attempts + 1,
                    "payload_hash": base.payload_hash or payload_hashes[rid],
                    "variant": base.variant or (variants or {}).get(rid),
                    "batch_id": group.group_id,
                    "provider": provider,
                    "maybe_sent_at_ms": base.maybe_sent_at_ms or now_ms,
                    "maybe_sent_by": base.maybe_sent_by or owner,
                    "group_key": group.idempotency_key,
                }
                self._put(base.model_copy(update=update), "claimed", owner)
            return GroupClaim(claimed=True)

    def _group_members(self, group: SendGroup, owner: str, events: dict[str, Event]) -> dict[str, DeliveryRecord]:
        members = {}
        for recipient in group.recipients:
            rid = recipient.recipient_id
            record = self.items.get((group.campaign_id, rid))
            if (
                record is None
                or record.owner != owner
                or record.state.value not in delivery_tables.sources(events[rid])
            ):
                raise LeaseLostError(f"group {group.group_id} is no longer owned by {owner}")
            members[rid] = record
        return members

    def complete_group(self, group: SendGroup, *, owner: str, outcomes: dict[str, Receipt | str]) -> None:
        with self._lock:
            self.requests["complete_group"] += 1
            events = {
                r.recipient_id: Event.MARK_SENT
                if isinstance(outcomes[r.recipient_id], Receipt)
                else Event.SETTLE_FAILED
                for r in group.recipients
            }
            for rid, record in self._group_members(group, owner, events).items():
                outcome = outcomes[rid]
                if isinstance(outcome, Receipt):
                    update = {
                        "state": DeliveryState.SENT,
                        "provider_message_id": outcome.provider_message_id,
                        "lease_until_ms": None,
                        "reason": None,
                        "error_class": None,
                    }
                else:
                    update = {
                        "state": DeliveryState.FAILED,
                        "reason": outcome[:500],
                        "error_class": "permanent",
                        "lease_until_ms": None,
                    }
                self._put(record.model_copy(update=update), update["state"].value, owner)

    def release_group(
        self,
        group: SendGroup,
        *,
        owner: str,
        state: DeliveryState,
        reason: str,
        error_class: str,
        refused: bool = False,
    ) -> None:
        with self._lock:
            self.requests["release_group"] += 1
            event = delivery_tables.settle_event(state, maybe_sent=not refused)
            members = self._group_members(group, owner, {r.recipient_id: event for r in group.recipients})
            for record in members.values():
                update = {"state": state, "reason": reason, "error_class": error_class, "lease_until_ms": None}
                if refused and record.maybe_sent_by == owner:  # only the mark this owner set is lifted
                    update.update(maybe_sent_at_ms=None, maybe_sent_by=None, group_key=None)
                self._put(record.model_copy(update=update), state.value, owner)


class FakeProvider:
    """Records accepted emails per address. `script` maps an address to a list of
    exceptions (or callables) to raise on successive sends before accepting."""

    def __init__(self, name: str = "resend", idempotent: bool = True, honours_keys: bool | None = None):
        self.name = name
        self.idempotent = idempotent
        self.honours_keys = idempotent if honours_keys is None else honours_keys
        self.accepted: list[OutboundEmail] = []
        self.calls = 0
        self.script: dict[str, list] = {}
        self.accept_then_raise: dict[str, Exception] = {}
        self._ids = itertools.count(1)
        self._by_key: dict[str, str] = {}
        self._lock = threading.Lock()

    def send(self, email: OutboundEmail) -> Receipt:
        with self._lock:
            self.calls += 1
            queue = self.script.get(email.to)
            if queue:
                item = queue.pop(0)
                raise item
            if self.honours_keys and email.idempotency_key in self._by_key:
                return Receipt(provider_message_id=self._by_key[email.idempotency_key])
            message_id = f"msg-{next(self._ids)}"
            self.accepted.append(email)
            if self.honours_keys:
                self._by_key[email.idempotency_key] = message_id
            if email.to in self.accept_then_raise:
                raise self.accept_then_raise.pop(email.to)
            return Receipt(provider_message_id=message_id)

    def deliveries(self) -> Counter:
        return Counter(e.to for e in self.accepted)


class FakeCampaignStore:
    def __init__(self):
        self.marks: list[tuple[str, str, str]] = []  # (campaign, event, by) of each mark left
        self.campaigns: dict[str, Campaign] = {}
        self.batch_records: dict[str, dict[str, tuple[BatchMessage, bool]]] = {}
        self.holders: dict[str, dict[str, int]] = {}  # campaign -> publish lease holder -> until
        self.groups: dict[tuple[str, str], SendGroup] = {}  # (campaign, group id) -> the frozen group

    def create(self, campaign: Campaign) -> Campaign:
        if campaign.campaign_id in self.campaigns:
            raise IllegalTransitionError("exists")
        self.campaigns[campaign.campaign_id] = campaign
        return campaign

    def get(self, campaign_id: str) -> Campaign:
        try:
            return self.campaigns[campaign_id]
        except KeyError:
            raise CampaignNotFoundError(campaign_id) from None

    def content(self, campaign_id: str) -> Content:
        content = self.get(campaign_id).content
        if content is None:
            raise CampaignNotFoundError(campaign_id)
        return content

    def transition(self, campaign_id: str, change: StateChange) -> Campaign:
        to, allowed_from, by, reason, stays = change.to, change.allowed_from, change.by, change.reason, change.stays
        publishing_until_ms, holder, open_batches = change.publishing_until_ms, change.holder, change.open_batches
        unless_publishing_at_ms, send_at_ms, clear_send_at = (
            change.unless_publishing_at_ms,
            change.send_at_ms,
            change.clear_send_at,
        )
        if_send_at_ms, if_reason, mark = change.if_send_at_ms, change.if_reason, change.mark
        campaign = self.get(campaign_id)
        if campaign.state not in set(allowed_from):
            raise IllegalTransitionError(f"{campaign.state} -> {to}")
        if unless_publishing_at_ms is not None and (campaign.publishing_until_ms or 0) >= unless_publishing_at_ms:
            raise IllegalTransitionError(f"{campaign_id} is being published")
        if if_send_at_ms is not None and campaign.send_at_ms != if_send_at_ms:
            raise IllegalTransitionError(f"{campaign_id} is scheduled for another time")
        if if_reason is not None and campaign.state_reason != if_reason:
            raise IllegalTransitionError(f"{campaign_id} is {campaign.state} for another reason")
        update = {} if stays else {"state": to, "state_changed_by": by, "state_reason": reason}
        if send_at_ms is not None:
            update["send_at_ms"] = send_at_ms
        if clear_send_at:
            update["send_at_ms"] = None
        if publishing_until_ms is not None:
            update["publishing_until_ms"] = publishing_until_ms
            if holder is not None:
                self.holders.setdefault(campaign_id, {})[holder] = publishing_until_ms
        if open_batches is not None:
            update["open_batches"] = open_batches
        campaign = campaign.model_copy(update=update)
        self.campaigns[campaign_id] = campaign
        if mark is not None:
            self.marks.append((campaign_id, mark, by))
        return campaign

    def end_publish(self, campaign_id: str, holder: str, *, now_ms: int) -> None:
        # As the DynamoDB adapter: the shared lease goes with the last live holder's.
        holders = self.holders.setdefault(campaign_id, {})
        holders.pop(holder, None)
        if any(until > now_ms for until in holders.values()):
            return
        holders.clear()
        self.campaigns[campaign_id] = self.get(campaign_id).model_copy(update={"publishing_until_ms": None})

    def batch_settled(self, campaign_id: str) -> int:
        campaign = self.get(campaign_id)
        self.campaigns[campaign_id] = campaign.model_copy(update={"open_batches": campaign.open_batches - 1})
        return campaign.open_batches - 1

    def reset_open_batches(self, campaign_id: str, count: int) -> None:
        self.campaigns[campaign_id] = self.get(campaign_id).model_copy(update={"open_batches": count})

    def record_decision(self, campaign_id: str, decision: Decision) -> Campaign:
        campaign = self.get(campaign_id)
        if campaign.decision is None:
            self.campaigns[campaign_id] = campaign = campaign.model_copy(update={"decision": decision})
        return campaign

    def add_batch(self, batch: BatchMessage) -> BatchStatus:
        batches = self.batch_records.setdefault(batch.campaign_id, {})
        if batch.batch_id in batches:
            return BatchStatus.ENQUEUED if batches[batch.batch_id][1] else BatchStatus.RECORDED
        self.get(batch.campaign_id)
        batches[batch.batch_id] = (batch, False)
        campaign = self.campaigns[batch.campaign_id]
        self.campaigns[batch.campaign_id] = campaign.model_copy(update={"open_batches": campaign.open_batches + 1})
        return BatchStatus.NEW

    def mark_batch_enqueued(self, campaign_id: str, batch_id: str) -> None:
        batch, _ = self.batch_records[campaign_id][batch_id]
        self.batch_records[campaign_id][batch_id] = (batch, True)

    def batches(self, campaign_id: str):
        return iter(list(self.batch_records.get(campaign_id, {}).values()))

    def batches_page(self, campaign_id: str, cursor: str | None, limit: int):
        # By batch id, as DynamoDB orders the sort key; the cursor is the last id returned.
        ids = sorted(i for i in self.batch_records.get(campaign_id, {}) if cursor is None or i > cursor)
        page = ids[:limit]
        return [self.batch_records[campaign_id][i][0] for i in page], (page[-1] if len(ids) > limit else None)

    def batches_page_marked(self, campaign_id: str, cursor: str | None, limit: int):
        batches, cursor = self.batches_page(campaign_id, cursor, limit)
        records = self.batch_records[campaign_id] if batches else {}
        return [(b, records[b.batch_id][1]) for b in batches], cursor

    def list(self, state=None):
        return iter(
            sorted(
                (c for c in self.campaigns.values() if state is None or c.state == state), key=lambda c: c.campaign_id
            )
        )

    def record_group(self, group: SendGroup) -> SendGroup:
        return self.groups.setdefault((group.campaign_id, group.group_id), group)

    def get_group(self, campaign_id: str, group_id: str) -> SendGroup | None:
        return self.groups.get((campaign_id, group_id))

    def groups_of_batch(self, campaign_id: str, batch_id: str) -> list[SendGroup]:
        # A group id is `<batch id>-g<n>`: oldest (lowest n) first, as the adapter sorts them.
        mine = [g for (c, gid), g in self.groups.items() if c == campaign_id and gid.rsplit("-g", 1)[0] == batch_id]
        return sorted(mine, key=lambda g: int(g.group_id.rsplit("-g", 1)[1]))


class FakeScheduler:
    """EventBridge Scheduler's one-time schedules, by campaign: the instant each is set for."""

    def __init__(self):
        self.schedules: dict[str, int] = {}
        self.openings: dict[str, set[int]] = {}  # a send window's openings, by campaign
        self.picks: dict[str, int] = {}  # an A/B test's end, by campaign

    def set(self, campaign_id: str, send_at_ms: int) -> None:
        self.schedules[campaign_id] = send_at_ms

    def delete(self, campaign_id: str) -> None:
        self.schedules.pop(campaign_id, None)

    def set_opening(self, campaign_id: str, opens_at_ms: int) -> None:
        self.openings.setdefault(campaign_id, set()).add(opens_at_ms)

    def set_pick(self, campaign_id: str, pick_at_ms: int) -> None:
        self.picks[campaign_id] = pick_at_ms


class FakeQueue:
    def __init__(self):
        self.published: list[str] = []
        self.groups: list[tuple[str, str]] = []  # (the campaign it was published as, body), in order
        self.dead_letters: list[tuple[str, str]] = []
        self.returned_later: list[tuple[str, int]] = []

    def publish(self, campaign_id: str, bodies: list[str]) -> None:
        self.published.extend(bodies)
        self.groups.extend((campaign_id, body) for body in bodies)

    def dead_letter(self, body: str, *, reason: str) -> None:
        self.dead_letters.append((body, reason))

    def return_later(self, source_arn: str, receipt_handle: str, *, seconds: int) -> None:
        self.returned_later.append((receipt_handle, seconds))


class FakeClock:
    def __init__(self, start_ms: int | None = None):
        self.now_ms = start_ms if start_ms is not None else int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def remaining(ms: int) -> Callable[[], int]:
    return lambda: ms


# --- deliverability ---------------------------------------------------------------------


class FakeSuppressions:
    def __init__(self):
        self.items: dict[str, Suppression] = {}
        self.fail_next_add: list[Exception] = []
        self.reads = 0
        self.batch_reads = 0

    def is_suppressed(self, email: str) -> Suppression | None:
        return self.get(email_fingerprint(email))

    def suppressed_among(self, emails: Iterable[str]) -> dict[str, Suppression]:
        self.batch_reads += 1
        fingerprints = {email_fingerprint(e) for e in emails}
        return {fp: s for fp, s in self.items.items() if fp in fingerprints}

    def get(self, fingerprint: str) -> Suppression | None:
        self.reads += 1
        return self.items.get(fingerprint)

    def add(self, email: str, reason: SuppressionReason, source: str, campaign_id: str | None = None) -> bool:
        return self.add_fingerprint(email_fingerprint(email), reason, source, campaign_id)

    def add_fingerprint(self, fingerprint, reason, source, campaign_id=None) -> bool:
        if self.fail_next_add:
            raise self.fail_next_add.pop(0)
        if fingerprint in self.items:
            return False
        self.items[fingerprint] = Suppression(
            fingerprint=fingerprint,
            reason=SuppressionReason(reason),
            source=source,
            campaign_id=campaign_id,
            created_at=dt.datetime.now(dt.UTC).isoformat(),
        )
        return True

    def remove(self, email: str) -> bool:
        return self.items.pop(email_fingerprint(email), None) is not None

    def list(self) -> Iterator[Suppression]:
        return iter(list(self.items.values()))

    def import_(self, emails: Iterable[str], *, reason: SuppressionReason, source: str) -> ImportReport:
        added = already = 0
        for email in emails:
            if self.add(email, reason, source):
                added += 1
            else:
                already += 1
        return ImportReport(added=added, already_suppressed=already)

    def reasons(self) -> dict[str, str]:
        return {fp: s.reason.value for fp, s in self.items.items()}


class FakeLedgerEvents:
    """Annotations beside a FakeLedger's records (which have no field for them), with the
    same dedup, counting and conditional moves as the DynamoDB adapter."""

    def __init__(self, ledger: FakeLedger):
        self.ledger = ledger
        self.annotations: dict[tuple[str, str], list[ProviderEvent]] = {}
        self.applied_ids: dict[tuple[str, str], set[str]] = {}
        self.sent_evidence: dict[tuple[str, str], str] = {}
        self.last_events: dict[tuple[str, str], ProviderEvent] = {}  # moved only forward (event_order)
        self.counters: dict[str, Counter] = {}
        self.unknown_since_ms: dict[tuple[str, str], int] = {}
        self.proven_not_sent: dict[tuple[str, str], str] = {}  # slot -> the audit that proved it
        self._lock = threading.Lock()

    def annotate(self, event: ProviderEvent, *, counter: FeedbackCounter | None = None) -> Annotation:
        key = event.key
        with self._lock:
            record = self.ledger.items.get((key.campaign_id, key.recipient_id)) if key else None
            if record is None:
                return Annotation(AnnotationStatus.NO_DELIVERY)
            slot = (key.campaign_id, key.recipient_id)
            ids = self.applied_ids.setdefault(slot, set())
            if event.event_id in ids:
                return Annotation(AnnotationStatus.DUPLICATE, state=record.state, provider=record.provider)
            ids.add(event.event_id)
            self.annotations.setdefault(slot, []).append(event)
            last = self.last_events.get(slot)
            if last is None or event_order.order_key(event) > event_order.order_key(last):
                self.last_events[slot] = event
            if event.kind is EventKind.SENT and event.message_id:
                self.sent_evidence.setdefault(slot, event.message_id)
            if counter is not None:
                self.counters.setdefault(key.campaign_id, Counter())[FeedbackCounter(counter).value] += 1
                return Annotation(AnnotationStatus.APPLIED)
            return Annotation(AnnotationStatus.APPLIED, state=record.state, provider=record.provider)

    def count_sent(self, campaign_id: str, recipient_id: str) -> None:
        with self._lock:
            self.counters.setdefault(campaign_id, Counter())["sent"] += 1

    def feedback(self, campaign_id: str) -> CampaignFeedback:
        counts = self.counters.get(campaign_id, Counter())
        return CampaignFeedback(
            sent=counts["sent"], complaints=counts["complaints"], hard_bounces=counts["hard_bounces"]
        )

    def resolve_unknown(self, key: DeliveryKey, *, provider_message_id: str, detail: str) -> bool:
        with self._lock:
            record = self.ledger.items.get((key.campaign_id, key.recipient_id))
            if record is None or record.state is not DeliveryState.UNKNOWN:
                return False
            self.ledger._put(
                record.model_copy(
                    update={
                        "state": DeliveryState.SENT,
                        "provider_message_id": provider_message_id,
                        "reason": None,
                        "error_class": None,
                    }
                ),
                "sent",
            )
            return True

    def unknowns(self, campaign_id: str) -> Iterator[UnknownDelivery]:
        for record in list(self.ledger.records(campaign_id)):
            if record.state is DeliveryState.UNKNOWN:
                slot = (campaign_id, record.recipient_id)
                yield UnknownDelivery(
                    recipient_id=record.recipient_id,
                    provider=record.provider,
                    since_ms=self.unknown_since_ms.get(slot, 0),
                    reason=record.reason,
                    email_fingerprint=record.email_fingerprint,
                    confirmed_message_id=self.sent_evidence.get(slot),
                    proven_not_sent=slot in self.proven_not_sent,
                )

    def unknowns_page(self, campaign_id: str, cursor: str | None, limit: int):
        # Keyed on the last recipient id read, as the adapter's cursor is.
        every = [u for u in self.unknowns(campaign_id) if cursor is None or u.recipient_id > cursor]
        page = every[:limit]
        return page, page[-1].recipient_id if len(every) > limit else None

    def prove_not_sent(self, key: DeliveryKey, *, audit: str) -> bool:
        slot = (key.campaign_id, key.recipient_id)
        record = self.ledger.items.get(slot)
        if record is None or record.state is not DeliveryState.UNKNOWN or slot in self.sent_evidence:
            return False
        self.proven_not_sent[slot] = audit
        return True

    def reopen_unknown(
        self, campaign_id: str, recipient_ids: Iterable[str], *, by: str, accept_possible_duplicates: bool = False
    ) -> ReopenReport:
        report = ReopenReport()
        for rid in recipient_ids:
            slot = (campaign_id, rid)
            record = self.ledger.items.get(slot)
            if record is None or record.state is not DeliveryState.UNKNOWN:
                report.skipped.append(rid)
            elif not accept_possible_duplicates and slot not in self.proven_not_sent and slot not in self.sent_evidence:
                report.skipped.append(rid)
            elif slot in self.sent_evidence:
                self.resolve_unknown(
                    DeliveryKey(campaign_id=campaign_id, recipient_id=rid),
                    provider_message_id=self.sent_evidence[slot],
                    detail="evidence",
                )
                report.confirmed_sent.append(rid)
            else:
                self.ledger._put(
                    record.model_copy(
                        update={
                            "state": DeliveryState.PENDING,
                            "maybe_sent_at_ms": None,
                            "lease_until_ms": None,
                            "error_class": None,
                            "reason": f"reopened by {by}",
                        }
                    ),
                    "reopened",
                    by,
                )
                self.proven_not_sent.pop(slot, None)
                report.reopened.append(rid)
        return report

    def kinds(self, campaign_id: str, recipient_id: str) -> list[str]:
        return [e.kind.value for e in self.annotations.get((campaign_id, recipient_id), [])]


SES_FIXTURES = Path(__file__).parent / "fixtures" / "ses_events"


@cache
def _fixture(name: str) -> dict:
    return json.loads((SES_FIXTURES / f"{name}.json").read_text())


def ses_event(
    name: str,
    *,
    campaign_id: str | None = "c1",
    recipient_id: str | None = "r1",
    email: str = "user1@example.com",
    message_id: str | None = None,
) -> dict:
    """A fixture from tests/fixtures/ses_events with our tags, the address and message id replaced."""
    event = copy.deepcopy(_fixture(name))
    detail = event["detail"]
    mail = detail["mail"]
    for tag, value in (("campaign_id", campaign_id), ("recipient_id", recipient_id)):
        if value is None:
            mail["tags"].pop(tag, None)
        else:
            mail["tags"][tag] = [value]
    if message_id:
        mail["messageId"] = message_id
        mail["commonHeaders"]["messageId"] = message_id
    mail["destination"] = [email]
    mail["commonHeaders"]["to"] = [email]
    for body_name, list_name in (
        ("bounce", "bouncedRecipients"),
        ("complaint", "complainedRecipients"),
        ("deliveryDelay", "delayedRecipients"),
    ):
        for entry in detail.get(body_name, {}).get(list_name, []):
            entry["emailAddress"] = email
    if "delivery" in detail:
        detail["delivery"]["recipients"] = [email]
    return event


class FakeTestSendLog:
    """Test sends as the campaigns table keeps them: one entry each, newest first on reading."""

    def __init__(self):
        self.entries: list = []

    def record(self, entry) -> None:
        self.entries.append(entry)

    def recent(self, campaign_id: str, *, limit: int):
        mine = sorted((e for e in self.entries if e.campaign_id == campaign_id), key=lambda e: e.at, reverse=True)
        return mine[:limit], len(mine)


class FakeJobQueue:
    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.parts: list[tuple[str, int]] = []

    def submit(self, job_id: str) -> None:
        self.submitted.append(job_id)

    def submit_parts(self, job_id: str, parts) -> None:
        self.parts.extend((job_id, n) for n in parts)


class FakeCounters:
    """CampaignCounters in memory, with the same exactly-once rule as the DynamoDB adapter:
    `advance` writes only when the stored position is still the one read. `crash_after`
    raises (as a dying aggregator) after that many successful counter writes."""

    def __init__(self):
        self.items: dict[tuple[str, str], tuple[int, Counts]] = {}  # (campaign, stream) -> (seq, Counts)
        self.recorded: dict[str, int] = {}  # counted campaigns -> batches recorded
        self.markers: dict[tuple[str, str], str] = {}  # (campaign, recipient) -> first batch
        self.writes = 0
        self.reports: dict[str, list] = {}  # campaign -> the report increments written with its counters
        self.crash_after: int | None = None
        self.before_advance: Callable[[], None] | None = None

    def count_from_creation(self, campaign_id: str) -> None:
        self.recorded.setdefault(campaign_id, 0)

    def record_batch(self, campaign_id: str) -> None:
        self.recorded[campaign_id] = self.recorded.get(campaign_id, 0) + 1

    def applied_through(self, campaign_id: str, stream: str) -> int | None:
        item = self.items.get((campaign_id, stream))
        return item[0] if item else None

    def advance(self, campaign_id, moves, *, report=None) -> bool:
        if self.before_advance is not None:
            hook, self.before_advance = self.before_advance, None
            hook()
        if self.crash_after is not None and self.writes >= self.crash_after:
            raise RuntimeError("aggregator died")
        if len(moves) > MOVES_PER_WRITE:
            raise ValueError(f"{len(moves)} moves in one write: at most {MOVES_PER_WRITE}")
        for move in moves:  # every position still where it was read, or nothing is written
            current = self.items.get((campaign_id, move.stream))
            if (current[0] if current else None) != move.expected:
                return False
        for move in moves:
            current = self.items.get((campaign_id, move.stream))
            counts = Counts()
            if current:
                counts.add(current[1])
            counts.add(move.delta)
            self.items[(campaign_id, move.stream)] = (move.through, counts)
        if report:
            self.reports.setdefault(campaign_id, []).append(report)
        self.writes += 1
        return True

    def mark_published(self, campaign_id, batch_id, recipient_ids) -> int:
        mine = 0
        for recipient_id in dict.fromkeys(recipient_ids):
            first = self.markers.setdefault((campaign_id, recipient_id), batch_id)
            mine += first == batch_id
        return mine

    def totals(self, campaign_id):
        if campaign_id not in self.recorded:
            return None
        counts = Counts()
        for (campaign, _), (_, item) in self.items.items():
            if campaign == campaign_id:
                counts.add(item)
        return CounterTotals(recorded_batches=self.recorded[campaign_id], counts=counts)


class FakeHealthRecords:
    """The account health check's records, one per provider (DynamoDBHealthRecords' stand-in)."""

    def __init__(self) -> None:
        self.records: dict[str, HealthRecord] = {}

    def last(self, provider: str) -> HealthRecord | None:
        return self.records.get(provider)

    def record(self, record: HealthRecord) -> None:
        self.records[record.provider] = record


class FakeProviderAccount:
    """A provider account whose state a test sets; `reads` counts the checks that read it."""

    def __init__(self, provider: str = "ses") -> None:
        self.current = AccountState(provider=provider, sending_enabled=True, enforcement=Enforcement.HEALTHY)
        self.reads = 0

    def set(self, *, sending_enabled: bool = True, enforcement: str = Enforcement.HEALTHY) -> None:
        self.current = AccountState(
            provider=self.current.provider, sending_enabled=sending_enabled, enforcement=enforcement
        )

    def state(self) -> AccountState:
        self.reads += 1
        return self.current


class LimiterClock:
    """Time in epoch seconds for the shared limiter only: `sleep` moves it, nothing waits."""

    def __init__(self, now: float = 2_000_000_000.0):
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(0.0, seconds)
