"""Batch mode: one provider request per send group (Resend's batch endpoint, up to 100
emails under one idempotency key).

A group's membership is frozen when it is recorded, so that a repeat of its request is
byte-identical and the provider answers it from its key store. The claim rules
(`protocol.py`) decide which recipients a new group may carry.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from sendonce.domain.campaigns.ports import CampaignStore
from sendonce.domain.campaigns.variants import HELD
from sendonce.domain.deliverability.warmup import DayCapReachedError
from sendonce.domain.models import DeliveryRecord, Receipt, Recipient, SendGroup, is_valid_email
from sendonce.domain.sending.batch_run import BatchRun, record_failure
from sendonce.domain.sending.delivery_tables import Verdict, classify
from sendonce.domain.sending.ports import BatchEmailProvider, DeliveryGuard, DeliveryReads, GroupGuard
from sendonce.domain.sending.provider_call import Sender

logger = logging.getLogger(__name__)


def _address(recipient: Recipient) -> str:
    return recipient.email


class GroupDelivery:
    def __init__(
        self,
        *,
        ledger: DeliveryReads,
        campaigns: CampaignStore,
        guard: DeliveryGuard,
        group_guard: GroupGuard,
        sender: Sender,
        instance_id: str,
        clock_ms: Callable[[], int],
        concurrency: int = 1,
    ):
        self._ledger = ledger
        self._campaigns = campaigns
        self._guard = guard
        self._group_guard = group_guard
        self._sender = sender
        self._instance_id = instance_id
        self._clock_ms = clock_ms
        self._concurrency = max(1, concurrency)  # send groups of one batch in flight at once

    def deliver(self, run: BatchRun) -> list[Recipient]:
        """Send the batch as groups; returns the recipients left to the one-by-one path
        (addresses or templates that fail before any request is made, suppressed
        addresses, and deliveries whose earlier attempt went out under their own key)."""
        batch = run.batch
        hashes = {
            r.recipient_id: self._guard.payload_hash(r.email, r.variables, run.variant_of(r.recipient_id))
            for r in batch.recipients
        }
        records = self._ledger.get_many(batch.campaign_id, [r.recipient_id for r in batch.recipients])
        # A recorded group matters only once it bound a member (its claim writes the member's
        # record): with no member recorded, none may be replayed or carry them, and the groups
        # are not read. Their number is then met at `_record`, which never adopts it.
        groups = self._campaigns.groups_of_batch(batch.campaign_id, batch.batch_id) if records else None
        # A recorded group whose request may have gone out is replayed exactly (same members,
        # same key), so the provider answers from its key store. One that never went out —
        # recorded, then the time ran out; or refused outright — binds nobody: its members
        # are decided afresh (suppressed since, now in another group, ...).
        # A group whose first request is older than the key window cannot be replayed: its
        # members go one by one, and the claim rules close them as unknown.
        replayed: set[str] = set()
        now_ms = self._clock_ms()
        for group in groups or ():
            if self._replayable(group, records, hashes, now_ms):
                self._run_group(run, group, hashes)
                replayed.update(r.recipient_id for r in group.recipients)
        singles, candidates = [], []
        for recipient in batch.recipients:
            if recipient.recipient_id in replayed:
                continue
            if (
                not is_valid_email(recipient.email)
                or not self._sender.renders(run, recipient)
                or self._sender.suppression(run, recipient)
            ):
                singles.append(recipient)  # the one-by-one path records why it is not sent
            else:
                candidates.append(recipient)
        if not candidates or run.halt.is_set():
            return singles
        if replayed:
            records = self._ledger.get_many(batch.campaign_id, [r.recipient_id for r in candidates])
        group_id = f"{batch.batch_id}-g{len(groups or ()) + 1}"
        key = SendGroup(campaign_id=batch.campaign_id, group_id=group_id, recipients=[]).idempotency_key
        members = []
        foreign: set[str] = set()
        for recipient in candidates:
            record = records.get(recipient.recipient_id)
            verdict = classify(
                record,
                payload_hash=hashes[recipient.recipient_id],
                provider_idempotent=True,
                now_ms=now_ms,
                group_key=key,
            )
            if verdict is Verdict.CLAIM:
                members.append(recipient)
            elif verdict is Verdict.FINAL:
                run.count("duplicates_prevented")
            elif verdict is Verdict.CONFLICT:
                run.count("conflicts", error="recipient was claimed before with different content")
            elif verdict is Verdict.STALE:
                singles.append(recipient)  # the one-by-one claim closes it as unknown
            elif verdict is Verdict.GROUPED and record is not None and record.group_key:
                foreign.add(record.group_key)
            elif verdict is Verdict.GROUPED:
                singles.append(recipient)  # an attempt went out under its own key: only that key may repeat it
            else:  # held by a live owner
                run.count("returning", recipient.recipient_id, error="delivery held by another consumer")
                run.hold_until(record.lease_until_ms if record else None)
        for group_key in sorted(foreign):
            # Another batch's group may have carried these recipients (its message was
            # acknowledged while the campaign was paused, say): only a replay of that
            # request, same members and key, may send them. Replay it here.
            other = self._campaigns.get_group(batch.campaign_id, group_key.rsplit(":group:", 1)[-1])
            if other is None:
                continue
            other_hashes = {
                r.recipient_id: self._guard.payload_hash(r.email, r.variables, run.variant_of(r.recipient_id))
                for r in other.recipients
            }
            self._run_group(run, other, other_hashes)
        # A batch holds at most 100 recipients, Resend's batch limit: one group suffices,
        # unless a mailbox group is capped: then one group per mailbox group, each at most
        # half its cap (deliverability/group_caps.py), recorded in order; a capped group's wait
        # does not hold the others back.
        reached = None
        if members:
            # Today's warm-up places for them, as many as are left: those beyond stay pending,
            # and the day's cap pauses the campaign once these went (deliverability/warmup.py).
            try:
                taken = self._sender.warm_up(run, len(members), whole=False)
            except DayCapReachedError as exc:
                run.halt_sending(exc)
                return singles
            if taken < len(members):
                members, reached = members[:taken], self._sender.day_cap_reached(run)
        parts = self._sender.pacing.send_groups(members, _address, run.campaign.pacing)
        recorded: list[tuple[SendGroup, list[Recipient]]] = []
        number = len(groups or ()) + 1
        for those in parts:
            if run.halt.is_set():
                break
            group, number = self._record(run, those, number, groups_read=groups is not None)
            recorded.append((group, those))
            number += 1
        # One worker per mailbox group: its send groups one after another (its cap's places
        # come a second at a time; more requests waiting on them would only spend them on
        # seconds they then miss), the mailbox groups side by side.
        lanes: dict[str, list[SendGroup]] = {}
        for group, _ in recorded:
            lanes.setdefault(self._sender.pacing.group_of(group.recipients[0].email), []).append(group)

        def run_lane(lane: list[SendGroup]) -> None:
            for group in lane:
                self._run_group(run, group, hashes, warmed=True)

        workers = min(self._concurrency, len(lanes))
        if workers <= 1:
            for lane in lanes.values():
                run_lane(lane)
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="group") as pool:
                list(pool.map(run_lane, lanes.values()))
        if reached is not None:
            run.halt_sending(reached)
        for group, those in recorded:
            # A consumer racing this one recorded the id first, with other members: those left
            # out come back with the message rather than be acknowledged unsent.
            kept = {r.recipient_id for r in group.recipients}
            left_out = [r.recipient_id for r in those if r.recipient_id not in kept]
            if left_out:
                run.count_many(
                    "returning", left_out, error="send group recorded with other members by another consumer"
                )
        return singles

    def _record(
        self, run: BatchRun, those: list[Recipient], number: int, *, groups_read: bool
    ) -> tuple[SendGroup, int]:
        """Records a new send group of `those` as the batch's group `number`; returns the group
        as recorded and the number it took.

        The number may be taken. With the batch's groups read, by a consumer racing this one
        since: its group stands, decided from the same state (`deliver` returns those it left
        out). Unread, by any group of an earlier receive that bound nobody (recorded, then
        the consumer died): it is never adopted, for its members were decided then (one may
        have unsubscribed since). The groups are read and `those` take the next free number."""
        batch = run.batch
        group = self._campaigns.record_group(
            SendGroup(campaign_id=batch.campaign_id, group_id=f"{batch.batch_id}-g{number}", recipients=those)
        )
        if groups_read or [r.recipient_id for r in group.recipients] == [r.recipient_id for r in those]:
            return group, number
        taken = self._campaigns.groups_of_batch(batch.campaign_id, batch.batch_id)
        number = max([number, *(int(g.group_id.rsplit("-g", 1)[1]) for g in taken)]) + 1
        group = self._campaigns.record_group(
            SendGroup(campaign_id=batch.campaign_id, group_id=f"{batch.batch_id}-g{number}", recipients=those)
        )
        return group, number

    @staticmethod
    def _replayable(
        group: SendGroup, records: Mapping[str, DeliveryRecord], hashes: dict[str, str], now_ms: int
    ) -> bool:
        """Whether a recorded group's request may have gone out (a member carries its key and
        a maybe-sent mark) and can still be repeated (not older than the key window)."""
        marked = [
            records[r.recipient_id]
            for r in group.recipients
            if r.recipient_id in records
            and records[r.recipient_id].group_key == group.idempotency_key
            and records[r.recipient_id].maybe_sent_at_ms is not None
        ]
        return bool(marked) and not any(
            classify(
                record,
                payload_hash=hashes.get(record.recipient_id, ""),
                provider_idempotent=True,
                now_ms=now_ms,
                group_key=group.idempotency_key,
            )
            is Verdict.STALE
            for record in marked
        )

    def _run_group(self, run: BatchRun, group: SendGroup, hashes: dict[str, str], *, warmed: bool = False) -> None:
        """`warmed`: its members' warm-up places are taken (a new group's, in `deliver`); a
        replayed group takes them again (it may be a day later), all or none."""
        if run.halt.is_set():
            return
        member_ids = [r.recipient_id for r in group.recipients]
        if any(run.variant_of(rid) == HELD for rid in member_ids):
            # Recorded by a consumer that read the A/B test's winner after this one read the
            # campaign: the message comes back, and reads it then.
            run.count_many("returning", member_ids, error="send group of recipients awaiting the A/B winner")
            return
        if run.remaining_ms() < self._sender.safety_margin_ms:
            run.count_many("returning", member_ids, error="time budget exhausted before the group request")
            return
        emails = [self._sender.email(run, recipient, group.idempotency_key) for recipient in group.recipients]
        owner = f"{self._instance_id}-{uuid.uuid4().hex[:12]}"

        # Only a provider with a batch endpoint gets here (DeliveryService checks it).
        provider = cast(BatchEmailProvider, run.provider)

        places = self._sender.places(run, [r.email for r in group.recipients])

        def send() -> list[Receipt | str]:
            return self._sender.call(
                run,
                lambda: provider.send_batch(emails, idempotency_key=group.idempotency_key),
                places,
                emails=0 if warmed else len(emails),
            )

        try:
            result = self._group_guard.send_group_once(
                group,
                owner=owner,
                provider=run.provider.name,
                payload_hashes={
                    r.recipient_id: hashes.get(r.recipient_id)
                    or self._guard.payload_hash(r.email, r.variables, run.variant_of(r.recipient_id))
                    for r in group.recipients
                },
                send=send,
                last_receive=run.last_receive,
                variants={r.recipient_id: v for r in group.recipients if (v := run.variant_of(r.recipient_id))},
            )
        except Exception as exc:  # noqa: BLE001 - record_failure says what each failure means
            record_failure(run, member_ids, exc, log_extra={"group_id": group.group_id})
            return
        if result.kind == "sent":
            for outcome in result.outcomes.values():
                run.count(
                    "sent" if "id" in outcome else "failed",
                    error=outcome.get("failed"),
                    error_class=None if "id" in outcome else "permanent",
                )
        elif result.kind == "replayed":
            run.count_many("duplicates_prevented", member_ids)
        else:
            run.count_many("returning", member_ids, error=f"send group {result.kind.replace('_', ' ')}")
