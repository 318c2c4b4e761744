"""Every batch the domain enqueues goes out as its campaign's: the Queue port's `campaign_id`,
which SqsQueue sends as the message's MessageGroupId (the campaign queue is an SQS fair
queue; docs/messages.md). Publish, a scheduled start, resume and cancel, with fakes."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.campaigns.batches import campaign_named_by
from sendonce.domain.campaigns.scheduling import Firing, parse_instant
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.models import SCHEMA_VERSION, BatchMessage, Campaign, Content, DeliveryState
from tests.fakes import FakeCampaignStore, FakeLedger, FakeQueue, FakeScheduler
from tests.unit.helpers import recipients

NOW = parse_instant("2026-12-01T12:00:00Z")


@pytest.fixture
def queue() -> FakeQueue:
    return FakeQueue()


@pytest.fixture
def ledger() -> FakeLedger:
    return FakeLedger()


@pytest.fixture
def service(queue: FakeQueue, ledger: FakeLedger) -> CampaignService:
    svc = CampaignService(
        campaigns=FakeCampaignStore(),
        ledger=ledger,
        queue=queue,
        provider_names=["resend"],
        clock_ms=lambda: NOW,
        scheduler=FakeScheduler(),
    )
    for campaign_id in ("c1", "c2"):
        svc.create(
            Campaign(
                campaign_id=campaign_id,
                name="n",
                provider="resend",
                sender="a@example.com",
                content=Content(subject="s", text="t"),
            )
        )
    return svc


def published_as(queue: FakeQueue) -> list[tuple[str, str, str]]:
    """(the campaign each message was published as, the campaign its body names, batch id prefix)."""
    return [(group, json.loads(body)["campaign_id"], json.loads(body)["batch_id"][0]) for group, body in queue.groups]


def test_publish_sends_each_campaign_s_batches_as_that_campaign_s(service, queue):
    # When two campaigns publish, interleaved
    service.publish("c1", recipients(5), batch_size=2)
    service.publish("c2", recipients(3), batch_size=2)
    service.publish("c1", recipients(7)[5:], batch_size=2)

    # Then every message is published as the campaign its body names
    assert published_as(queue) == [("c1", "c1", "b")] * 3 + [("c2", "c2", "b")] * 2 + [("c1", "c1", "b")]


def test_a_scheduled_start_enqueues_the_recorded_batches_as_the_campaign_s(service, queue):
    # Given a publish for later: batches recorded, none enqueued
    service.publish("c2", recipients(3), batch_size=1, send_at_ms=NOW + 60_000)
    assert queue.groups == []

    # When the schedule fires
    service.start_scheduled(Firing("c2", NOW + 60_000))

    # Then the recorded batches go out as c2's
    assert published_as(queue) == [("c2", "c2", "b")] * 3


def test_resume_and_cancel_republish_as_the_campaign_s(service, queue, ledger):
    # Given two sending campaigns, one paused with recipients not ended
    service.publish("c1", recipients(4), batch_size=2)
    service.publish("c2", recipients(2), batch_size=2)
    service.pause("c1")
    ledger.close_unclaimed("c1", ["r0"], state=DeliveryState.SUPPRESSED, reason="x", batch_id="b")
    queue.groups.clear()

    # When c1 is resumed and c2 cancelled (both republish the recipients not ended)
    service.resume("c1")
    service.cancel("c2")

    # Then each republished message is its campaign's: resume's ("r…"), cancel's ("x…")
    assert published_as(queue) == [("c1", "c1", "r"), ("c2", "c2", "x")]


# --- reading the campaign back from a body (a redrive's group) --------------------------


def test_a_batch_body_names_its_campaign():
    body = BatchMessage(
        schema_version=SCHEMA_VERSION, campaign_id="spring-launch", batch_id="b1", recipients=recipients(1)
    ).to_body()
    assert campaign_named_by(body) == "spring-launch"
    # a batch from a newer publisher, or one the consumer refuses, still names its campaign
    assert campaign_named_by(json.dumps({"schema_version": 2, "campaign_id": "c1"})) == "c1"


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"job_id": "j1", "part": 3}),  # a jobs queue message
        "{not json",
        "",
        json.dumps(["c1"]),
        json.dumps({"campaign_id": 7}),
        json.dumps({"campaign_id": "has space"}),
        json.dumps({"campaign_id": "c1\n"}),
        json.dumps({"campaign_id": "x" * 101}),
        "[" * 100_000,
    ],
)
def test_a_body_that_is_not_a_batch_names_no_campaign(body):
    assert campaign_named_by(body) is None
