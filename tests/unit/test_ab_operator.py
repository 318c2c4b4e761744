"""An operator's tools on an A/B campaign (issue 33): `campaign preview --check` renders every
row with every variant and names the variant that fails; `campaign pick` and
`POST /campaigns/{id}/pick` record the winner through the campaign service and answer with
its PickResult, refusals mapped as pause's are (exit 4 / 409, exit 2 / 400 / 404)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import sendonce_ops.cli
from sendonce.domain.campaigns.preview import PreviewService
from sendonce.domain.campaigns.recipients_file import RecipientReader
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.spec import CampaignSpec
from sendonce.domain.campaigns.variants import Decision
from sendonce.domain.errors import ConflictingRequestError, InvalidCampaignError
from sendonce.domain.models import CampaignState, Recipient
from sendonce.handlers import api
from sendonce_local.http_api import http_api_event
from sendonce_local.poller import LocalLambdaContext
from sendonce_ops.cli_context import Cli
from tests.fakes import (
    FakeCampaignStore,
    FakeClock,
    FakeLedger,
    FakeProvider,
    FakeQueue,
    FakeScheduler,
    FakeTestSendLog,
)

T0 = 1_764_633_600_000  # 2025-12-02T00:00:00Z
AB_SPEC = {
    "id": "ab",
    "name": "Spring",
    "from": "News <news@example.com>",
    "provider": "resend",
    "html": "<p>Hi {{ name }}</p>",
    "variants": [
        {"id": "A", "subject": "Hello {{ name }}"},
        {"id": "B", "subject": "{{ name }}, {{ coupon }} off", "text": "Use {{ coupon }}"},
    ],
    "test": {"share": 0.5, "pick_by": "clicks", "after": "2h"},
    "tracking": {"clicks": True},
}
PLAIN_SPEC = {"id": "plain", "name": "Plain", "subject": "Hi", "from": "news@example.com", "text": "Hi", "provider": "resend"}  # fmt: skip


@pytest.fixture
def store() -> FakeCampaignStore:
    return FakeCampaignStore()


@pytest.fixture
def service(store) -> CampaignService:
    """An operator service with a scheduler and a clock; an A/B campaign sending to 10
    recipients (half its test, the rest waiting) and a plain one sending."""
    built = CampaignService(
        campaigns=store,
        ledger=FakeLedger(),
        queue=FakeQueue(),
        provider_names=["resend"],
        operator="arn:aws:iam::123456789012:user/ann",
        clock_ms=FakeClock(T0),
        scheduler=FakeScheduler(),
    )
    people = [
        Recipient(recipient_id=f"r{i}", email=f"u{i}@example.com", variables={"name": "N", "coupon": "5%"})
        for i in range(10)
    ]
    for spec in (AB_SPEC, PLAIN_SPEC):
        built.create(CampaignSpec.model_validate(spec).to_campaign())
        built.publish(spec["id"], people)
    return built


# --- preview --check ---------------------------------------------------------------------


def test_check_renders_each_row_with_every_variant_and_names_the_variant_and_the_variable(store, service):
    lines = [
        "recipient_id,email,name,coupon\n",
        "r1,ann@example.com,Ann,10%\n",
        "r2,bob@example.com,Bob,\n",  # an empty coupon renders: not a failure
    ]
    jsonl = [
        '{"recipient_id": "r1", "email": "ann@example.com", "variables": {"name": "Ann", "coupon": "5%"}}\n',
        '{"recipient_id": "r2", "email": "bob@example.com", "variables": {"name": "Bob"}}\n',
        '{"recipient_id": "r3", "email": "cy@example.com", "variables": {"coupon": "5%"}}\n',
    ]
    preview = PreviewService(campaigns=store)

    csv_report = preview.check("ab", RecipientReader(lines, "csv", name="people.csv"))
    jsonl_report = preview.check("ab", RecipientReader(jsonl, "jsonl", name="people.jsonl"))

    assert (csv_report.checked, csv_report.failed) == (2, 0)
    assert (jsonl_report.checked, jsonl_report.failed) == (3, 2)
    only_b, both = jsonl_report.problems
    assert (only_b.line, only_b.recipient_id) == (2, "r2")
    assert only_b.problem.startswith("variant B: template variable missing: 'coupon' is undefined")
    assert only_b.problem.endswith("(variables the templates use and this recipient lacks: coupon)")
    assert both.recipient_id == "r3"
    assert both.problem.startswith("variant A: template variable missing: 'name' is undefined")
    assert "; variant B: template variable missing: 'name' is undefined" in both.problem


# --- preview and test sends of one recipient ---------------------------------------------------

BODIES_PER_VARIANT = {  # the campaign's own bodies left out: each variant has its own
    **{k: v for k, v in AB_SPEC.items() if k != "html"},
    "id": "ab-own",
    "subject": "For listings",
    "variants": [
        {"id": "A", "subject": "A for {{ name }}", "html": "<p>A {{ name }}</p>"},
        {"id": "B", "subject": "B for {{ name }}", "text": "B {{ name }}"},
    ],
}


def people_of(campaign_id: str) -> dict[str | None, Recipient]:
    """A recipient of each test variant, and one of the rest (None), of the campaign."""
    from sendonce.domain.campaigns.variants import assign

    test = CampaignSpec.model_validate(BODIES_PER_VARIANT).to_campaign().ab_test
    found: dict[str | None, Recipient] = {}
    for i in range(200):
        found.setdefault(
            assign(campaign_id, f"p{i}", test),
            Recipient(recipient_id=f"p{i}", email=f"p{i}@example.com", variables={"name": "Ann"}),
        )
    assert set(found) == {"A", "B", None}
    return found


def test_a_recipients_preview_is_its_own_variant_and_one_of_the_rest_sees_the_first_until_the_pick(store, service):
    service.create(CampaignSpec.model_validate(BODIES_PER_VARIANT).to_campaign())
    people = people_of("ab-own")
    preview = PreviewService(campaigns=store)

    before = {who: preview.preview("ab-own", r) for who, r in people.items()}
    chosen_b = preview.preview("ab-own", people["A"], variant="B")
    store.record_decision("ab-own", Decision(variant="B", by="ann", at_ms=T0, reason="by hand"))
    after = preview.preview("ab-own", people[None])

    # Each test recipient sees its own variant, rendered from that variant's own bodies
    assert (before["A"].variant, before["A"].subject, before["A"].html) == ("A", "A for Ann", "<p>A Ann</p>")
    assert (before["B"].variant, before["B"].subject, before["B"].text) == ("B", "B for Ann", "B Ann")
    assert not before["A"].awaits_winner and before["A"].ok
    # One of the rest: the first variant, said to await the winner; the winner once recorded
    assert (before[None].variant, before[None].awaits_winner, before[None].subject) == ("A", True, "A for Ann")
    assert (after.variant, after.awaits_winner, after.subject) == ("B", False, "B for Ann")
    # Asked for, another variant is shown
    assert (chosen_b.variant, chosen_b.subject) == ("B", "B for Ann")


def test_a_variant_is_refused_by_name_when_the_campaign_has_no_such_variant_or_no_test(store, service):
    preview = PreviewService(campaigns=store)
    someone = Recipient(recipient_id="r1", email="u1@example.com", variables={"name": "N", "coupon": "5%"})

    with pytest.raises(InvalidCampaignError, match=r"^variant: 'Z' is not one of A, B$"):
        preview.preview("ab", someone, variant="Z")
    with pytest.raises(ConflictingRequestError, match=r"^variant: campaign 'plain' has no A/B test$"):
        preview.preview("plain", someone, variant="A")
    assert preview.preview("plain", someone).variant is None


def test_a_test_send_of_an_ab_campaign_sends_each_variant_to_every_address_or_the_one_asked_for(store, service):
    from sendonce.domain.campaigns.preview import TestSendService

    service.create(CampaignSpec.model_validate(BODIES_PER_VARIANT).to_campaign())
    provider = FakeProvider("resend")
    sends = TestSendService(campaigns=store, providers={"resend": provider}, log=FakeTestSendLog())

    every = sends.send("ab-own", ["me@example.com", "you@example.com"], variables={"name": "Ann"}, by="ann")
    only_b = sends.send("ab-own", ["me@example.com"], variables={"name": "Ann"}, by="ann", variant="B")

    assert [(o.variant, o.sent) for o in every.outcomes] == [("A", True), ("A", True), ("B", True), ("B", True)]
    subjects = [(e.to, e.subject, e.tags.get("variant")) for e in provider.accepted]
    assert subjects == [
        ("me@example.com", "[TEST] A for Ann", "A"),
        ("you@example.com", "[TEST] A for Ann", "A"),
        ("me@example.com", "[TEST] B for Ann", "B"),
        ("you@example.com", "[TEST] B for Ann", "B"),
        ("me@example.com", "[TEST] B for Ann", "B"),
    ]
    assert provider.accepted[0].html == "<p>A Ann</p>" and provider.accepted[2].text == "B Ann"
    assert every.subject == "[TEST] A for Ann" and [o.variant for o in only_b.outcomes] == ["B"]
    assert len({e.idempotency_key for e in provider.accepted}) == 5  # one key an email
    with pytest.raises(InvalidCampaignError, match="^variant: 'C' is not one of A, B$"):
        sends.send("ab-own", ["me@example.com"], variables={"name": "Ann"}, by="ann", variant="C")
    assert len(provider.accepted) == 5  # the refusal sent nothing


# --- campaign pick (CLI) ----------------------------------------------------------------------


@pytest.fixture
def sendonce(monkeypatch, service):
    """`sendonce ...` as an operator runs it, its Cli holding `service` (no AWS call)."""

    def cli_with_service(**options) -> Cli:
        return Cli(**options, _services={False: service, True: service})

    monkeypatch.setattr(sendonce_ops.cli, "Cli", cli_with_service)

    def run(*args: str):
        return CliRunner().invoke(sendonce_ops.cli.cli, list(args))

    return run


def test_campaign_pick_records_the_winner_and_sends_it_to_the_rest(sendonce, service):
    picked = sendonce("campaign", "pick", "ab", "B", "--reason", "B reads better")
    again = sendonce("campaign", "pick", "ab", "A", "--json")

    assert picked.exit_code == 0, picked.output
    assert picked.stdout == (
        "picked B for ab, by arn:aws:iam::123456789012:user/ann: B reads better; "
        "republished the 10 recipient(s) still waiting\n"
    )
    assert service.get("ab").decision.variant == "B"
    # The first decision stands: a second pick changes nothing and says so.
    assert again.exit_code == 0, again.output
    answer = json.loads(again.stdout)
    assert (answer["variant"], answer["decided_now"], answer["job_id"]) == ("B", False, "ab-pick")
    assert answer["decision"]["reason"] == "B reads better"


def test_campaign_pick_without_a_variant_picks_by_the_figures(sendonce, service):
    # No figures are kept by this service: too few clicks to decide, so the control.
    picked = sendonce("campaign", "pick", "ab", "--json")

    assert picked.exit_code == 0, picked.output
    answer = json.loads(picked.stdout)
    assert (answer["variant"], answer["decided_now"]) == ("A", True)
    assert answer["decision"]["reason"].startswith("too few unique clicks to decide (0 < 10)")


def test_campaign_pick_refusals_exit_as_pauses_do(sendonce, service):
    plain = sendonce("campaign", "pick", "plain", "A")
    unknown_variant = sendonce("campaign", "pick", "ab", "C")
    unknown_campaign = sendonce("campaign", "pick", "nope")

    assert plain.exit_code == 4 and "has no A/B test; there is nothing to pick" in plain.stderr
    assert unknown_variant.exit_code == 2 and "variant: 'C' is not one of A, B" in unknown_variant.stderr
    assert unknown_campaign.exit_code == 2 and "nope" in unknown_campaign.stderr
    assert service.get("ab").decision is None


# --- POST /campaigns/{id}/pick ------------------------------------------------------------


def call(service: CampaignService, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    event = http_api_event(
        method=method,
        target=path,
        headers={"content-type": "application/json"},
        body=b"" if body is None else json.dumps(body).encode(),
        caller_arn="arn:aws:iam::123456789012:user/bob",
    )
    context = LocalLambdaContext(
        function_name="sendonce-api", invoked_function_arn="arn:aws:lambda:::sendonce-api", timeout_s=29
    )
    answer = api.lambda_handler(event, context, service=service)
    return answer["statusCode"], json.loads(answer["body"])


def test_the_api_picks_the_winner_and_answers_with_the_pick_result(service):
    status, answer = call(service, "POST", "/campaigns/ab/pick", {"variant": "B", "reason": "B reads better"})

    assert status == 200
    assert answer == {
        "campaign_id": "ab",
        "variant": "B",
        "decided_now": True,
        "decision": {
            "variant": "B",
            "by": "arn:aws:iam::123456789012:user/bob",
            "at_ms": T0,
            "reason": "B reads better",
            "figures": {v: {"sent": 0, "opened": 0, "clicked": 0} for v in ("A", "B")},
        },
        "job_id": "ab-pick",
    }
    assert service.get("ab").decision.variant == "B"
    assert service.jobs.get("ab-pick").progress["republished"] == 10


def test_the_api_picks_by_the_figures_without_a_body_and_a_later_pick_finds_the_first_standing(service):
    first = call(service, "POST", "/campaigns/ab/pick")
    later = call(service, "POST", "/campaigns/ab/pick", {"variant": "B"})

    assert (first[0], first[1]["variant"], first[1]["decided_now"]) == (200, "A", True)
    assert (later[0], later[1]["variant"], later[1]["decided_now"]) == (200, "A", False)


def test_the_api_refuses_a_pick_as_it_refuses_a_pause(service, store):
    store.create(CampaignSpec.model_validate({**AB_SPEC, "id": "draft"}).to_campaign())

    plain = call(service, "POST", "/campaigns/plain/pick", {"variant": "A"})
    draft = call(service, "POST", "/campaigns/draft/pick")
    unknown_variant = call(service, "POST", "/campaigns/ab/pick", {"variant": "C"})
    unknown_campaign = call(service, "POST", "/campaigns/nope/pick")
    malformed = call(service, "POST", "/campaigns/ab/pick", {"variant": "B!"})

    assert plain == (
        409,
        {
            "statusCode": 409,
            "error": "IllegalTransition",
            "message": "campaign 'plain' has no A/B test; there is nothing to pick",
        },
    )
    assert draft[0] == 409 and "is draft; a winner is picked once it has sent its test" in draft[1]["message"]
    assert unknown_variant == (
        400,
        {"statusCode": 400, "error": "InvalidCampaign", "message": "variant: 'C' is not one of A, B"},
    )
    assert (unknown_campaign[0], unknown_campaign[1]["error"]) == (404, "CampaignNotFound")
    assert malformed[0] == 422 and malformed[1]["detail"][0]["loc"] == ["body", "variant"]
    assert service.get("ab").decision is None and service.get("draft").state is CampaignState.DRAFT


def test_the_api_creates_an_ab_campaign_and_answers_a_repeated_variant_id_with_409(service):
    created = call(service, "POST", "/campaigns", {**AB_SPEC, "id": "ab2"})
    twice = call(
        service,
        "POST",
        "/campaigns",
        {**AB_SPEC, "id": "ab3", "variants": [{"id": "A", "subject": "a"}, {"id": "A", "subject": "b"}]},
    )
    untracked = call(service, "POST", "/campaigns", {**AB_SPEC, "id": "ab4", "tracking": {"opens": True}})

    assert created[0] == 201 and created[1]["subject"] == "Hello {{ name }}"
    assert service.get("ab2").ab_test.variants == ("A", "B")
    assert twice == (
        409,
        {
            "statusCode": 409,
            "error": "ConflictingRequest",
            "message": "variants: variant id 'A' is given twice (variants.1.id); each needs its own",
        },
    )
    assert untracked[0] == 422 and untracked[1]["detail"][0]["loc"] == ["body", "test", "pick_by"]
    assert untracked[1]["message"].startswith("body.test.pick_by: clicks needs tracking.clicks: true")
