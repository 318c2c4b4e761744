from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

import pytest

from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.errors import (
    ConflictingRequestError,
    IllegalTransitionError,
    InvalidCampaignError,
    UnknownProviderError,
)
from sendonce.domain.models import BatchMessage, Campaign, CampaignState, Content, DeliveryState
from sendonce.handlers import api
from sendonce_local.http_api import http_api_event
from sendonce_local.poller import LocalLambdaContext
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


# --- a campaign's share of the provider's rate (issue 31) -----------------------------


class ProviderRates(Mapping[str, float]):
    """The configured rates, counting how often they were read (the CLI's are read from the
    deployment, so a campaign without a max_rate must not read them)."""

    def __init__(self, rates: dict[str, float]):
        self.rates = rates
        self.reads = 0

    def __getitem__(self, provider: str) -> float:
        self.reads += 1
        return self.rates[provider]

    def __iter__(self) -> Iterator[str]:
        return iter(self.rates)

    def __len__(self) -> int:
        return len(self.rates)


def rated_service(world: World, rates: Mapping[str, float]) -> CampaignService:
    return CampaignService(
        campaigns=world.campaigns,
        ledger=world.ledger,
        queue=world.queue,
        provider_names=["ses", "resend"],
        provider_rates=rates,
    )


def test_a_max_rate_above_the_providers_rate_is_refused_naming_the_field_and_the_rate(world):
    svc = rated_service(world, {"resend": 5.0, "ses": 14.0})

    with pytest.raises(ConflictingRequestError) as refused:
        svc.create(draft().model_copy(update={"max_rate": 50.0}))

    assert str(refused.value) == "max_rate: 50 is above provider 'resend''s rate of 5 requests/s"
    assert svc.list_campaigns() == []


def test_a_max_rate_up_to_the_providers_rate_is_kept_with_weight_and_priority(world):
    svc = rated_service(world, {"resend": 5.0, "ses": 14.0})

    svc.create(draft().model_copy(update={"max_rate": 5.0, "weight": 3, "priority": "high"}))

    stored = world.campaigns.get("c1")
    assert (stored.weight, stored.priority, stored.max_rate) == (3, "high", 5.0)


def test_the_rates_are_read_only_for_a_campaign_with_a_max_rate(world):
    rates = ProviderRates({"resend": 5.0})
    svc = rated_service(world, rates)

    svc.create(draft())
    svc.acting_as("ann").create(draft().model_copy(update={"campaign_id": "c2", "max_rate": 1.0}))

    assert rates.reads == 1


def test_a_provider_without_a_configured_rate_leaves_max_rate_unchecked(world):
    # No rates given (a test's service), or none for this provider: the shared limiter caps it anyway.
    service(world).create(draft().model_copy(update={"max_rate": 500.0}))
    rated_service(world, {"ses": 14.0}).create(draft().model_copy(update={"campaign_id": "c2", "max_rate": 500.0}))

    assert [c.max_rate for c in world.campaigns.list(None)] == [500.0, 500.0]


def call_api(svc: CampaignService, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    event = http_api_event(
        method=method,
        target=path,
        headers={"content-type": "application/json"},
        body=b"" if body is None else json.dumps(body).encode(),
        caller_arn="arn:aws:iam::123456789012:user/ann",
    )
    context = LocalLambdaContext(
        function_name="sendonce-api", invoked_function_arn="arn:aws:lambda:::sendonce-api", timeout_s=29
    )
    answer = api.lambda_handler(event, context, service=svc)
    return answer["statusCode"], json.loads(answer["body"])


SPEC_BODY = {
    "id": "c1",
    "name": "Launch",
    "subject": "Hi",
    "from": "news@example.com",
    "text": "Hi",
    "provider": "resend",
}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("weight", 0, "body.weight: must be a whole number from 1 to 100"),
        ("weight", 101, "body.weight: must be a whole number from 1 to 100"),
        ("weight", 1.5, "body.weight: must be a whole number from 1 to 100"),
        ("priority", "urgent", "body.priority: must be normal or high"),
        ("max_rate", 0, "body.max_rate: must be a number from 0.001 to 100,000"),
        ("max_rate", -1, "body.max_rate: must be a number from 0.001 to 100,000"),
        ("max_rate", 1e-300, "body.max_rate: must be a number from 0.001 to 100,000"),
        ("max_rate", "5", "body.max_rate: must be a number from 0.001 to 100,000"),
    ],
)
def test_the_api_refuses_a_bad_share_naming_the_field(world, field, value, message):
    status, body = call_api(rated_service(world, {"resend": 5.0}), "POST", "/campaigns", {**SPEC_BODY, field: value})

    assert (status, body["error"]) == (422, "ValidationError")
    assert body["message"].startswith(message) and body["detail"][0]["loc"] == ["body", field]
    assert list(world.campaigns.list(None)) == []


def test_the_api_refuses_a_max_rate_above_the_providers_rate_as_what_stands_now_refuses(world):
    # Schema-valid (no schema can know a deployment's rates): a 409, as for a provider not configured.
    svc = rated_service(world, {"resend": 5.0})

    status, body = call_api(svc, "POST", "/campaigns", {**SPEC_BODY, "max_rate": 50})

    assert (status, body) == (
        409,
        {
            "statusCode": 409,
            "error": "ConflictingRequest",
            "message": "max_rate: 50 is above provider 'resend''s rate of 5 requests/s",
        },
    )


def test_the_api_creates_and_shows_a_campaigns_share_and_its_defaults(world):
    svc = rated_service(world, {"resend": 5.0})
    shares = {"weight": 2, "priority": "high", "max_rate": 2.5}

    created = call_api(svc, "POST", "/campaigns", {**SPEC_BODY, **shares})
    plain = call_api(svc, "POST", "/campaigns", {**SPEC_BODY, "id": "plain"})
    shown = call_api(svc, "GET", "/campaigns/c1")
    listed = call_api(svc, "GET", "/campaigns")

    assert (created[0], plain[0], shown[0]) == (201, 201, 200)
    assert {k: created[1][k] for k in shares} == {k: shown[1][k] for k in shares} == shares
    assert {k: plain[1][k] for k in shares} == {"weight": 1, "priority": "normal", "max_rate": None}
    assert [(c["campaign_id"], c["priority"]) for c in listed[1]["campaigns"]] == [("c1", "high"), ("plain", "normal")]
