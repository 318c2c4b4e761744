"""Publishing a campaign: creating it, then recording and enqueuing its recipients in batches
(or, scheduled, recording them for the schedule's start). CampaignService inherits it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sendonce.domain.campaigns import lifecycle
from sendonce.domain.campaigns.batches import OversizedRecipientError, batch_id_for, pack
from sendonce.domain.campaigns.lifecycle import CampaignEvent
from sendonce.domain.campaigns.ports import BatchStatus, CampaignStore
from sendonce.domain.campaigns.scheduling import MESSAGES_PER_SEND, PUBLISH_LEASE_MS, check_future, iso, new_holder
from sendonce.domain.deliverability.group_caps import GroupPacing, PacingError, parse_pacing
from sendonce.domain.errors import (
    ConflictingRequestError,
    IllegalTransitionError,
    InvalidCampaignError,
    UnknownProviderError,
)
from sendonce.domain.models import (
    MAX_RECIPIENTS_PER_BATCH,
    SCHEMA_VERSION,
    BatchMessage,
    Campaign,
    CampaignState,
    Recipient,
)
from sendonce.domain.sending.ports import Queue
from sendonce.domain.sending.rendering import RenderError, check_content

if TYPE_CHECKING:
    from sendonce.domain.campaigns.ports import CampaignScheduler
    from sendonce.domain.jobs.models import Job


@dataclass
class PublishReport:
    campaign_id: str
    accepted: int = 0
    duplicates_in_input: list[str] = field(default_factory=list)
    batches_new: int = 0
    batches_already_enqueued: int = 0  # published before: not sent again (resume does that)
    messages_sent: int = 0
    # Scheduled (publish --at, or a spec's send_at): recorded, enqueued when the send starts.
    batches_recorded: int = 0
    send_at: str | None = None


class Publishing:
    """The campaign service's create and publish."""

    _campaigns: CampaignStore
    _queue: Queue
    _clock_ms: Callable[[], int]
    _operator: str
    _provider_names: frozenset[str]
    _batch_provider_names: frozenset[str]
    _provider_rates: Mapping[str, float]
    _group_pacing: Callable[[], GroupPacing]

    if TYPE_CHECKING:  # the other halves' (declared here only, so that none shadows them)

        def _require_scheduler(self) -> CampaignScheduler: ...

        def _set_schedule(self, campaign_id: str, send_at_ms: int) -> None: ...

        def _enqueue_recorded_job(self, campaign_id: str, holder: str, job_id: str) -> Job: ...

        def _schedule_pick(self, campaign: Campaign, *, start_ms: int | None = None) -> None: ...

        def complete_if_done(self, campaign_id: str) -> Campaign | None: ...

    def create(self, campaign: Campaign) -> Campaign:
        if campaign.provider not in self._provider_names:
            raise UnknownProviderError(
                f"provider: {campaign.provider!r} is not registered (known: {', '.join(sorted(self._provider_names))})"
            )
        if campaign.delivery_mode == "batch" and campaign.provider not in self._batch_provider_names:
            raise InvalidCampaignError(
                f"delivery_mode: 'batch' needs a provider with batch sends ({', '.join(sorted(self._batch_provider_names))}),"
                f" not {campaign.provider!r}"
            )
        rate = self._provider_rates.get(campaign.provider) if campaign.max_rate is not None else None
        if campaign.max_rate is not None and rate is not None and campaign.max_rate > rate:
            # Well formed: the deployment's configured rate refuses it (409), as for an unconfigured
            # provider; the same spec is accepted once the provider is configured faster.
            raise ConflictingRequestError(
                f"max_rate: {campaign.max_rate:g} is above provider {campaign.provider!r}'s rate of {rate:g} requests/s"
            )
        if campaign.pacing:
            # Well formed (the schema's names and numbers): the deployment's groups, which no
            # schema can say (it may add its own), refuse it (409), as its rates refuse a max_rate.
            try:
                parse_pacing(campaign.pacing, self._group_pacing().groups)
            except PacingError as exc:
                raise ConflictingRequestError(str(exc)) from None
        if campaign.content is None:
            raise InvalidCampaignError("content: required")
        if campaign.send_at_ms is not None:
            self._require_scheduler()
            check_future(campaign.send_at_ms, now_ms=self._clock_ms())
        try:
            check_content(campaign.content)
        except RenderError as exc:
            raise InvalidCampaignError(f"content: {exc}") from exc
        return self._campaigns.create(campaign)

    def publish(
        self,
        campaign_id: str,
        recipients: Iterable[Recipient],
        *,
        batch_size: int = MAX_RECIPIENTS_PER_BATCH,
        on_batch: Callable[[PublishReport], None] | None = None,
        send_at_ms: int | None = None,
    ) -> PublishReport:
        """Record and enqueue recipients in batches; safe to repeat (batch ids are content-addressed
        and the ledger dedups deliveries). Streams: holds one batch and the set of ids seen.
        With `send_at_ms` (or a draft whose spec set send_at) the campaign is scheduled: the
        batches are recorded and none enqueued until its schedule starts the send."""
        if not 1 <= batch_size <= MAX_RECIPIENTS_PER_BATCH:
            raise InvalidCampaignError(f"batch_size must be 1..{MAX_RECIPIENTS_PER_BATCH}")
        before = self._campaigns.get(campaign_id)
        if send_at_ms is None and before.state is CampaignState.DRAFT:
            send_at_ms = before.send_at_ms  # the spec's send_at
        if send_at_ms is not None:
            self._require_scheduler()
            send_at_ms = check_future(send_at_ms, now_ms=self._clock_ms())
        report = PublishReport(campaign_id=campaign_id, send_at=iso(send_at_ms) if send_at_ms else None)
        holder = new_holder()
        opened = self._open_publish(campaign_id, holder=holder, send_at_ms=send_at_ms)
        if before.state is CampaignState.DRAFT and opened.state is CampaignState.SENDING:
            self._schedule_pick(opened)  # an A/B campaign's test starts now
        elif before.state is CampaignState.DRAFT and opened.state is CampaignState.SCHEDULED:
            self._schedule_pick(opened, start_ms=send_at_ms)  # ... or at its scheduled start
        try:
            if before.state is CampaignState.DRAFT and opened.state is CampaignState.SENDING and before.open_batches:
                # Batches an unschedule left recorded go out with this publish, as a job under
                # a lease of its own (taken here, so that nothing completes in between).
                job_holder = new_holder()
                self._open_publish(campaign_id, holder=job_holder)
                job = self._enqueue_recorded_job(campaign_id, job_holder, f"{campaign_id}-enqueue-{job_holder}")
                report.messages_sent += job.progress.get("enqueued", 0)
            seen: set[str] = set()

            def unique() -> Iterator[Recipient]:
                for recipient in recipients:
                    if recipient.recipient_id in seen:
                        report.duplicates_in_input.append(recipient.recipient_id)
                        continue
                    seen.add(recipient.recipient_id)
                    yield recipient

            chunks: list[list[Recipient]] = []
            try:
                for chunk in pack(campaign_id, unique(), batch_size=batch_size):
                    chunks.append(chunk)
                    if len(chunks) == MESSAGES_PER_SEND:
                        self._enqueue(chunks, campaign_id, report, holder)
                        chunks = []
                        if on_batch:
                            on_batch(report)
            except OversizedRecipientError as exc:
                # Everything before it is published (nothing recorded is left unqueued); the
                # offending recipient and everything after it are not.
                if chunks:
                    self._enqueue(chunks, campaign_id, report, holder)
                raise OversizedRecipientError(
                    f"{exc}; the {report.accepted:,} recipient(s) before it were published, none after it"
                    " (publishing again is safe)"
                ) from exc
            if chunks:
                self._enqueue(chunks, campaign_id, report, holder)
                if on_batch:
                    on_batch(report)
        finally:
            self._campaigns.end_publish(campaign_id, holder, now_ms=self._clock_ms())
        if send_at_ms is not None:
            self._set_schedule(campaign_id, send_at_ms)
            return report
        # Read after the lease is gone: a consumer that settled the last open batch while it
        # was live could not complete the campaign, so the publisher does; one that settles
        # later sees no lease and completes it. Nothing sent: no consumer will settle a batch
        # of this publish, and it may have reopened a campaign that is already done.
        if not report.messages_sent or self._campaigns.get(campaign_id).open_batches <= 0:
            self.complete_if_done(campaign_id)
        return report

    def _open_publish(self, campaign_id: str, *, holder: str, send_at_ms: int | None = None) -> Campaign:
        """Take (or renew) `holder`'s publish lease and the shared one; a draft or completed
        campaign starts sending, a draft given `send_at_ms` is scheduled."""
        scheduling = send_at_ms is not None
        try:
            return lifecycle.apply(
                self._campaigns,
                campaign_id,
                CampaignEvent.SCHEDULE if scheduling else CampaignEvent.PUBLISH,
                by=self._operator,
                reason=f"scheduled for {iso(send_at_ms)}" if send_at_ms is not None else "published",
                publishing_until_ms=self._clock_ms() + PUBLISH_LEASE_MS,
                holder=holder,
                send_at_ms=send_at_ms,
            )
        except IllegalTransitionError as exc:
            # A valid request the campaign's state refuses: a conflict (409), as for pause or resume.
            state = self._campaigns.get(campaign_id).state
            if scheduling:
                raise IllegalTransitionError(
                    f"campaign {campaign_id!r} is {state.value}; only a draft can be scheduled"
                    + (" (reschedule moves it)" if state is CampaignState.SCHEDULED else "")
                ) from exc
            raise IllegalTransitionError(
                f"campaign {campaign_id!r} is {state.value}; nothing can be published to it"
            ) from exc

    def _enqueue(self, chunks: list[list[Recipient]], campaign_id: str, report: PublishReport, holder: str) -> None:
        batches = []
        for chunk in chunks:
            batch = BatchMessage(
                schema_version=SCHEMA_VERSION,
                campaign_id=campaign_id,
                batch_id=batch_id_for(campaign_id, chunk),
                recipients=chunk,
            )
            report.accepted += len(chunk)
            status = self._campaigns.add_batch(batch)
            if status is BatchStatus.ENQUEUED:
                report.batches_already_enqueued += 1
                continue
            # A batch recorded before but never confirmed on the queue (a publisher that
            # crashed in between) is enqueued now; sending it twice is harmless.
            report.batches_new += status is BatchStatus.NEW
            batches.append(batch)
        if not batches:
            return
        # Renew the lease before each request to the queue, and read the state in the same
        # write: while scheduled, the batches stay recorded and the start enqueues them (it
        # cannot have read them yet: they were recorded before this renewal saw `scheduled`).
        if self._open_publish(campaign_id, holder=holder).state is CampaignState.SCHEDULED:
            report.batches_recorded += len(batches)
            return
        self._queue.publish(campaign_id, [b.to_body() for b in batches])
        report.messages_sent += len(batches)
        for batch in batches:
            self._campaigns.mark_batch_enqueued(campaign_id, batch.batch_id)
