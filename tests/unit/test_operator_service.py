"""CampaignService's operator additions, with in-memory fakes: who acts, one delivery's
record, and the dead-letter summary."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.campaigns.service import CampaignService, DeadLetter
from sendonce.domain.errors import CampaignNotFoundError
from sendonce.domain.models import BatchMessage, Campaign, Content, DeliveryState
from tests.fakes import FakeCampaignStore, FakeLedger, FakeQueue
from tests.unit.helpers import recipients


@pytest.fixture
def ledger() -> FakeLedger:
    return FakeLedger()


@pytest.fixture
def queue() -> FakeQueue:
    return FakeQueue()


@pytest.fixture
def service(ledger, queue) -> CampaignService:
    svc = CampaignService(
        campaigns=FakeCampaignStore(), ledger=ledger, queue=queue, provider_names=["ses", "resend"], operator="cli"
    )
    svc.create(
        Campaign(
            campaign_id="c1",
            name="n",
            provider="resend",
            sender="a@example.com",
            content=Content(subject="s", text="t"),
        )
    )
    return svc


def test_acting_as_records_the_caller_on_state_changes_and_keeps_the_ports(service):
    service.publish("c1", recipients(3))

    paused = service.acting_as("arn:aws:iam::1:user/ann").pause("c1", reason="legal")
    resumed, job = service.acting_as("arn:aws:iam::1:user/bob").resume("c1", reason="cleared")
    republished = job.progress["republished"]

    assert (paused.state_changed_by, paused.state_reason) == ("arn:aws:iam::1:user/ann", "legal")
    assert (resumed.state_changed_by, resumed.state_reason, republished) == ("arn:aws:iam::1:user/bob", "cleared", 3)
    assert service.get("c1").state_changed_by == "arn:aws:iam::1:user/bob"  # the same store


def test_delivery_returns_one_record_or_none_and_refuses_an_unknown_campaign(service, ledger):
    service.publish("c1", recipients(2))
    ledger.close_unclaimed("c1", ["r0"], state=DeliveryState.DEAD_LETTERED, reason="throttled", batch_id="b")

    assert service.delivery("c1", "r0").state is DeliveryState.DEAD_LETTERED
    assert service.delivery("c1", "r1") is None
    with pytest.raises(CampaignNotFoundError):
        service.delivery("nope", "r0")


def test_dead_letter_summary_groups_by_campaign_with_the_last_error(service, ledger, queue):
    service.publish("c1", recipients(4))
    batch = BatchMessage.model_validate_json(queue.published[0])
    ledger.close_unclaimed(
        "c1",
        ["r2", "r3"],
        state=DeliveryState.DEAD_LETTERED,
        reason="resend 429 rate_limit_exceeded",
        batch_id=batch.batch_id,
    )
    letters = [
        DeadLetter(message_id="m1", body=batch.to_body(), sent_at_ms=1),
        DeadLetter(message_id="m2", body="{not json", poison_reason="body is not JSON", sent_at_ms=2),
        DeadLetter(
            message_id="m3",
            body=json.dumps({**json.loads(batch.to_body()), "campaign_id": "gone"}),
            poison_reason="campaign 'gone' does not exist",
            sent_at_ms=3,
        ),
    ]

    summary = service.dead_letter_summary(letters)

    assert [g.as_dict() for g in summary.groups] == [
        {
            "campaign_id": "c1",
            "messages": 1,
            "recipients": 4,
            "dead_lettered": 2,
            "last_error": "resend 429 rate_limit_exceeded",
        },
        {
            "campaign_id": "gone",
            "messages": 1,
            "recipients": 4,
            "dead_lettered": 0,
            "last_error": "campaign 'gone' does not exist",
        },
        {"campaign_id": None, "messages": 1, "recipients": 0, "dead_lettered": 0, "last_error": "body is not JSON"},
    ]
    assert summary.as_dict()["messages"] == 3


def test_list_campaigns_reads_the_store_by_id_and_state_and_sends_nothing(service, queue):
    from sendonce.domain.models import CampaignState

    service.create(
        Campaign(
            campaign_id="a0", name="n", provider="ses", sender="a@example.com", content=Content(subject="s", text="t")
        )
    )
    service.publish("c1", recipients(2))
    sent_before = list(queue.published)

    assert [c.campaign_id for c in service.list_campaigns()] == ["a0", "c1"]
    assert [c.campaign_id for c in service.list_campaigns(CampaignState.SENDING)] == ["c1"]
    assert [c.campaign_id for c in service.list_campaigns(CampaignState.DRAFT)] == ["a0"]
    assert service.list_campaigns(CampaignState.CANCELLED) == []
    assert queue.published == sent_before


def test_dead_letter_summary_reads_the_letters_recipients_only_never_the_whole_campaign(
    service, ledger, queue, monkeypatch
):
    # A campaign of millions may have one message in the DLQ: `dlq list` must cost that message.
    service.publish("c1", recipients(4))
    batch = BatchMessage.model_validate_json(queue.published[0])
    ledger.close_unclaimed("c1", ["r1"], state=DeliveryState.DEAD_LETTERED, reason="timeout", batch_id=batch.batch_id)

    def whole_campaign(campaign_id):
        raise AssertionError(f"dlq list read every delivery of {campaign_id}")

    monkeypatch.setattr(ledger, "records", whole_campaign)
    summary = service.dead_letter_summary([DeadLetter(message_id="m1", body=batch.to_body(), sent_at_ms=1)])

    assert [(g.campaign_id, g.dead_lettered) for g in summary.groups] == [("c1", 1)]
