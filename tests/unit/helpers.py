from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sendonce.domain.campaigns.service import CampaignService, JobsOf
from sendonce.domain.campaigns.unknowns import UnknownOutcomes
from sendonce.domain.deliverability.ports import GroupPlaces, PlacesTaken
from sendonce.domain.jobs.models import JobKind
from sendonce.domain.jobs.pages import PartedWork
from sendonce.domain.jobs.ports import JobQueue, JobStore
from sendonce.domain.jobs.service import InMemoryJobStore, JobService
from sendonce.domain.jobs.work import PageWork
from sendonce.domain.models import SCHEMA_VERSION, BatchMessage, Campaign, CampaignState, Content, Recipient
from sendonce.domain.sending.delivery import DeliveryService
from sendonce.domain.sending.guards import LedgerDeliveryGuard
from tests.fakes import FakeCampaignStore, FakeClock, FakeLedger, FakeProvider, FakeQueue


@dataclass
class Ctx:
    remaining_ms: int = 120_000
    function_name: str = "test"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class World:
    provider_name: str = "resend"
    ledger: FakeLedger = field(default_factory=FakeLedger)
    campaigns: FakeCampaignStore = field(default_factory=FakeCampaignStore)
    queue: FakeQueue = field(default_factory=FakeQueue)
    clock: FakeClock = field(default_factory=FakeClock)
    ctx: Ctx = field(default_factory=Ctx)

    def __post_init__(self):
        self.providers = {
            "resend": FakeProvider("resend", idempotent=True),
            "ses": FakeProvider("ses", idempotent=False),
        }
        self.sleeps: list[float] = []

    @property
    def provider(self) -> FakeProvider:
        return self.providers[self.provider_name]

    def service(self, **overrides) -> DeliveryService:
        guard = LedgerDeliveryGuard(self.ledger, clock_ms=self.clock)
        guard.register_lambda_context(self.ctx)
        options = dict(
            ledger=self.ledger,
            guard=guard,
            campaigns=self.campaigns,
            providers=self.providers,
            queue=self.queue,
            send_concurrency=4,
            safety_margin_ms=10_000,
            throttle_retries=2,
            max_receive_count=5,
            sleep=self.sleeps.append,
            clock_ms=self.clock,
        )
        options.update(overrides)
        return DeliveryService(**options)

    def campaign(self, campaign_id: str = "c1", state: CampaignState = CampaignState.SENDING, **content) -> Campaign:
        campaign = Campaign(
            campaign_id=campaign_id,
            name="Launch",
            provider=self.provider_name,
            sender="news@example.com",
            content=Content(
                subject=content.get("subject", "Hello {{ name }}"),
                html=content.get("html", "<p>Hi {{ name }}</p>"),
                text=content.get("text", "Hi {{ name }}"),
            ),
            state=state,
        )
        self.campaigns.campaigns[campaign_id] = campaign
        return campaign

    def process(self, body: str, *, receive_count: int = 1, remaining_ms: int | None = None, service=None):
        service = service or self.service()
        return service.process(
            body,
            receive_count=receive_count,
            remaining_ms=lambda: remaining_ms if remaining_ms is not None else self.ctx.remaining_ms,
        )


def recipients(n: int, start: int = 0) -> list[Recipient]:
    return [
        Recipient(recipient_id=f"r{i}", email=f"user{i}@example.com", variables={"name": f"User {i}"})
        for i in range(start, start + n)
    ]


def batch(campaign_id: str = "c1", n: int = 5, batch_id: str = "b1", people: list[Recipient] | None = None) -> str:
    return BatchMessage(
        schema_version=SCHEMA_VERSION, campaign_id=campaign_id, batch_id=batch_id, recipients=people or recipients(n)
    ).to_body()


JOB_CLOCK = "2026-12-02T00:00:00.000+00:00"


def jobs_of(
    campaigns,
    *,
    store: JobStore | None = None,
    queue: JobQueue | None = None,
    clock: Callable[[], str] = lambda: JOB_CLOCK,
    unknown_outcomes: Callable[[bool], UnknownOutcomes] | None = None,
    work: dict[JobKind, PageWork] | None = None,
    parted: Callable[[CampaignService], dict[JobKind, PartedWork]] | None = None,
) -> JobsOf:
    """A campaign service's jobs built as wiring builds them (the service's own work, plus
    `work` and `parted`), kept in `store` (in memory by default) and run in process unless
    given a `queue`."""

    def build(service: CampaignService) -> JobService:
        return JobService(
            jobs=store if store is not None else InMemoryJobStore(),
            queue=queue,
            campaigns=campaigns,
            clock=clock,
            work={**service.job_work(unknown_outcomes=unknown_outcomes), **(work or {})},
            parted=parted(service) if parted is not None else None,
            on_finished=service.job_finished,
        )

    return build


@dataclass
class FakeGroupCaps:
    """The GroupCaps port as a recorder (not a stand-in with the adapter's behaviour, so not
    in tests/fakes.py): records what was asked; refuses, or holds each request, when told to."""

    asked: list[GroupPlaces] = field(default_factory=list)
    deferrals: list[str] = field(default_factory=list)
    refuse: bool = False
    held_s: float = 0.0

    def take(self, places: GroupPlaces, *, deadline: float | None = None) -> PlacesTaken | None:
        self.asked.append(places)
        return None if self.refuse else PlacesTaken(held_s=self.held_s)

    def deferred(self, group: str) -> None:
        self.deferrals.append(group)
