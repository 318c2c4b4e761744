from __future__ import annotations

import json

import pytest

from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.errors import IllegalTransitionError, InvalidCampaignError, UnknownProviderError
from sendonce.domain.models import BatchMessage, Campaign, CampaignState, Content, DeliveryState
from tests.unit.helpers import World, recipients


@pytest.fixture
def world() -> World:
    return World()


def service(world: World) -> CampaignService:
    return CampaignService(
        campaigns=world.campaigns, ledger=world.ledger, queue=world.queue, provider_names=["ses", "resend"]
    )


def draft(provider: str = "resend", **content) -> Campaign:
    return Campaign(
        campaign_id="c1",
        name="Launch",
        provider=provider,
        sender="news@example.com",
        content=Content(subject=content.get("subject", "Hi {{ name }}"), text="Hello {{ name }}"),
    )


def test_an_unknown_provider_is_refused_at_creation(world):
    with pytest.raises(UnknownProviderError, match="provider: 'mailgun' is not registered"):
        service(world).create(draft(provider="mailgun"))


def test_a_template_that_does_not_compile_is_refused_at_creation(world):
    with pytest.raises(InvalidCampaignError, match="content: template does not compile"):
        service(world).create(draft(subject="Hi {{ name "))


def test_publish_splits_into_batches_of_at_most_100_and_reports_repeated_ids(world):
    svc = service(world)
    svc.create(draft())
    people = recipients(250) + recipients(3)  # three ids repeated

    report = svc.publish("c1", people)

    sizes = [len(BatchMessage.model_validate_json(b).recipients) for b in world.queue.published]
    assert sizes == [100, 100, 50]
    assert report.accepted == 250 and report.duplicates_in_input == ["r0", "r1", "r2"]
    assert world.campaigns.get("c1").state is CampaignState.SENDING


def test_publishing_the_same_recipients_again_enqueues_nothing_new(world):
    svc = service(world)
    svc.create(draft())
    svc.publish("c1", recipients(150))

    again = svc.publish("c1", recipients(150))

    assert len(world.queue.published) == 2
    assert again.batches_already_enqueued == 2 and again.messages_sent == 0


def test_illegal_transitions_are_clear_errors(world):
    svc = service(world)
    svc.create(draft())
    with pytest.raises(IllegalTransitionError):
        svc.pause("c1")  # a draft is not sending
    svc.cancel("c1")
    with pytest.raises(IllegalTransitionError, match="is cancelled; nothing can be published"):
        svc.publish("c1", recipients(1))


def test_resume_publishes_only_recipients_that_have_not_ended(world):
    svc = service(world)
    svc.create(draft())
    svc.publish("c1", recipients(5))
    svc.pause("c1")
    world.ledger.close_unclaimed("c1", ["r0", "r1"], state=DeliveryState.SUPPRESSED, reason="x", batch_id="b")  # ended
    world.ledger.close_unclaimed("c1", ["r2"], state=DeliveryState.DEAD_LETTERED, reason="dlq", batch_id="b")
    world.queue.published.clear()

    campaign, job = svc.resume("c1")
    count = job.progress["republished"]

    ids = [r["recipient_id"] for body in world.queue.published for r in json.loads(body)["recipients"]]
    assert campaign.state is CampaignState.SENDING
    assert count == 3 and sorted(ids) == ["r2", "r3", "r4"]


def test_status_counts_add_up_and_reading_it_never_completes_the_campaign(world):
    svc = service(world)
    svc.create(draft())
    svc.publish("c1", recipients(4))
    world.ledger.close_unclaimed("c1", ["r0"], state=DeliveryState.DEAD_LETTERED, reason="x", batch_id="b")

    status = svc.status("c1")
    assert (status.total, status.pending, status.dead_lettered, status.remaining) == (4, 3, 1, 4)
    assert status.state is CampaignState.SENDING

    world.ledger.close_unclaimed(
        "c1", ["r0", "r1", "r2", "r3"], state=DeliveryState.SUPPRESSED, reason="x", batch_id="b"
    )
    done = svc.status("c1")
    assert done.remaining == 0 and done.suppressed == 4 and done.done
    assert done.state is CampaignState.SENDING  # a read changes nothing
    assert svc.complete_if_done("c1").state is CampaignState.COMPLETED
