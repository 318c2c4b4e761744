"""Provider events into the ledger, with fakes: parsing, annotation, dedup, suppression,
unknown -> sent, the brakes, and the events handler's two doors."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from dataclasses import dataclass, field

import pytest

from sendonce.adapters.providers.descriptor import event_readers
from sendonce.adapters.providers.registry import registered
from sendonce.adapters.providers.resend.events import parse_resend_event
from sendonce.adapters.providers.resend.webhooks import SvixWebhooks, SvixWebhookVerifier
from sendonce.adapters.providers.ses.events import parse_ses_event
from sendonce.domain.campaigns.ports import StateChange
from sendonce.domain.deliverability.ports import EventKind, SuppressionReason
from sendonce.domain.deliverability.provider_events import BrakeSettings, ProviderEventService
from sendonce.domain.errors import WebhookSignatureError
from sendonce.domain.models import Campaign, CampaignState, Content, DeliveryRecord, DeliveryState, email_fingerprint
from sendonce.handlers import events as events_handler
from sendonce_local.poller import LocalLambdaContext
from sendonce_local.resend_server import svix_headers
from tests.fakes import FakeCampaignStore, FakeLedger, FakeLedgerEvents, FakeSuppressions, ses_event

SECRET = "whsec_" + base64.b64encode(b"k" * 24).decode()


@dataclass
class Env:
    ledger: FakeLedger = field(default_factory=FakeLedger)
    campaigns: FakeCampaignStore = field(default_factory=FakeCampaignStore)
    suppressions: FakeSuppressions = field(default_factory=FakeSuppressions)
    brakes: BrakeSettings = field(default_factory=BrakeSettings)

    def __post_init__(self):
        self.events = FakeLedgerEvents(self.ledger)
        self.campaigns.campaigns["c1"] = Campaign(
            campaign_id="c1",
            name="Launch",
            provider="ses",
            sender="news@example.com",
            content=Content(subject="Hi", text="Hi"),
            state=CampaignState.SENDING,
        )

    @property
    def service(self) -> ProviderEventService:
        return ProviderEventService(
            ledger_events=self.events,
            suppressions=self.suppressions,
            campaigns=self.campaigns,
            brakes=self.brakes,
            event_readers=event_readers(registered()),
            webhooks={"resend": SvixWebhooks(SvixWebhookVerifier(secret=SECRET))},
        )

    def delivery(
        self, rid: str = "r1", state: DeliveryState = DeliveryState.SENT, provider: str = "ses", mid: str | None = "m-1"
    ):
        self.ledger.items[("c1", rid)] = DeliveryRecord(
            campaign_id="c1",
            recipient_id=rid,
            state=state,
            provider=provider,
            provider_message_id=mid,
        )

    def state(self, rid: str = "r1") -> DeliveryState:
        return self.ledger.items[("c1", rid)].state


@pytest.fixture
def env() -> Env:
    return Env()


def resend_payload(kind: str, *, rid: str = "r1", to: str = "user1@example.com", bounce_type: str = "Permanent") -> str:
    data = {
        "created_at": "2025-05-06T10:15:00.000Z",
        "email_id": "4ef9a417-02e9-4d39-ad75-9611e0fcc33c",
        "from": "news@example.com",
        "to": [to],
        "subject": "Hi",
        "tags": {"campaign_id": "c1", "recipient_id": rid},
    }
    if kind == "email.bounced":
        data["bounce"] = {"message": "rejected", "subType": "General", "type": bounce_type}
    return json.dumps({"type": kind, "created_at": "2025-05-06T10:15:01.000Z", "data": data})


def signed(body: str, msg_id: str = "msg_1", *, secret: str = SECRET, timestamp: int | None = None) -> dict[str, str]:
    return svix_headers(secret, msg_id, body, timestamp)


# --- parsing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture, kind, hard, reason",
    [
        ("send", EventKind.SENT, False, None),
        ("delivery", EventKind.DELIVERED, False, None),
        ("delivery_delay", EventKind.DELIVERY_DELAYED, False, None),
        ("bounce_permanent", EventKind.BOUNCED, True, SuppressionReason.BOUNCED),
        ("bounce_transient", EventKind.BOUNCED, False, None),
        ("complaint", EventKind.COMPLAINED, False, SuppressionReason.COMPLAINED),
        ("reject", EventKind.REJECTED, False, None),
    ],
)
def test_ses_fixtures_parse_to_the_delivery_they_name(fixture, kind, hard, reason):
    event = parse_ses_event(ses_event(fixture, campaign_id="c9", recipient_id="r9", email="ann@example.com"))

    assert (event.kind, event.hard, event.suppression_reason) == (kind, hard, reason)
    assert (event.campaign_id, event.recipient_id, event.provider) == ("c9", "r9", "ses")
    assert event.addresses == ("ann@example.com",)
    assert "ann@example.com" not in (event.detail or "")  # diagnostic codes quote addresses: not kept


def test_ses_event_ids_are_stable_per_event_and_differ_between_events():
    send, again = parse_ses_event(ses_event("send")), parse_ses_event(ses_event("send"))
    delivery = parse_ses_event(ses_event("delivery"))

    assert send.event_id == again.event_id != delivery.event_id


def test_ses_opens_and_clicks_are_read_without_agent_ip_or_link_and_other_events_are_not():
    opened = parse_ses_event(ses_event("open"))
    assert (opened.kind, opened.key.recipient_id, opened.detail) == (EventKind.OPENED, "r1", None)
    assert opened.occurred_at and opened.suppression_reason is None
    assert (
        parse_ses_event({"source": "aws.ses", "detail-type": "Advisor Recommendation Status Open", "detail": {}})
        is None
    )


# --- opens and clicks: apart from the ledger, for a campaign that tracks them ---------------


class FakeEngagementStore:
    def __init__(self):
        self.first: dict[tuple[str, str, str], int] = {}
        self.variants: dict[tuple[str, str], str | None] = {}

    def record(self, campaign_id: str, recipient_id: str, kind: str, at_ms: int, *, variant: str | None = None) -> str:
        key = (campaign_id, recipient_id, kind)
        self.variants[(campaign_id, recipient_id)] = variant
        if key not in self.first:
            self.first[key] = at_ms
            return "first"
        if at_ms < self.first[key]:
            self.first[key] = at_ms
            return "earlier"
        return "repeat"


def opened(at: str = "2026-12-07T10:00:00Z", event_id: str = "o1", kind: EventKind = EventKind.OPENED):
    from sendonce.domain.deliverability.ports import ProviderEvent

    return ProviderEvent(
        event_id=event_id, provider="resend", kind=kind, campaign_id="c1", recipient_id="r1", occurred_at=at
    )


def test_an_open_is_recorded_apart_from_the_ledger_only_when_the_campaign_tracks_opens(env):
    from sendonce.domain.deliverability.engagement import EngagementRecorder
    from sendonce.domain.models import Tracking

    env.delivery()
    store, asked = FakeEngagementStore(), []

    def campaign_of(campaign_id: str):
        asked.append(campaign_id)
        return env.campaigns.get(campaign_id)

    service = ProviderEventService(
        ledger_events=env.events,
        suppressions=env.suppressions,
        campaigns=env.campaigns,
        engagement=EngagementRecorder(store=store, campaign_of=campaign_of),
    )
    env.campaigns.campaigns["c1"] = env.campaigns.campaigns["c1"].model_copy(update={"tracking": Tracking(opens=True)})

    first = service.apply(opened())
    again = service.apply(opened(event_id="o2"))  # the same open, delivered again under another id
    earlier = service.apply(opened(at="2026-12-07T09:59:00Z", event_id="o3"))
    click = service.apply(opened(kind=EventKind.CLICKED, event_id="c1"))

    assert [r.engagement for r in (first, again, earlier, click)] == ["first", "repeat", "earlier", "not_tracked"]
    assert [r.status for r in (first, again, earlier, click)] == ["applied", "duplicate", "applied", "ignored"]
    assert store.first == {("c1", "r1", "opened"): 1_796_637_540_000}
    assert env.events.annotations == {}  # the ledger never saw them
    assert asked == ["c1"]  # a campaign's tracking is read once per process
    assert store.variants == {("c1", "r1"): None}  # no A/B test: no variant counted
    assert service.apply(dataclasses.replace(opened(), campaign_id="gone")).engagement == "no_campaign"


def test_an_ab_campaigns_open_counts_for_the_recipients_test_variant_or_the_rest(env):
    from sendonce.domain.campaigns.report_data import REST
    from sendonce.domain.campaigns.variants import AbTest, assign
    from sendonce.domain.deliverability.engagement import EngagementRecorder
    from sendonce.domain.models import Tracking

    # Given an A/B campaign that tracks opens, and recipients in its test and in the rest
    env.delivery()
    test = AbTest(variants=("A", "B"), share=0.5, pick_by="opens", after_s=3_600)
    env.campaigns.campaigns["c1"] = env.campaigns.campaigns["c1"].model_copy(
        update={"tracking": Tracking(opens=True), "ab_test": test}
    )
    store = FakeEngagementStore()
    recorder = EngagementRecorder(store=store, campaign_of=env.campaigns.get)
    recipients = [f"r{i}" for i in range(40)]

    # When each opens
    for recipient_id in recipients:
        assert recorder.record(opened(), "c1", recipient_id).counted

    # Then each counts under its own test variant, or the rest's key (it got the winner)
    expected = {("c1", r): assign("c1", r, test) or REST for r in recipients}
    assert store.variants == expected
    assert {REST, "A", "B"} == set(expected.values())


def test_without_a_store_opens_are_not_tracked_and_touch_nothing(env):
    env.delivery()
    report = env.service.apply(opened())
    assert (report.engagement, report.status) == ("not_tracked", "ignored") and env.events.annotations == {}


def test_resend_payloads_parse_with_tags_as_an_object_or_a_list():
    event = parse_resend_event(json.loads(resend_payload("email.bounced")), "msg_7")
    listed = json.loads(resend_payload("email.complained"))
    listed["data"]["tags"] = [{"name": "campaign_id", "value": "c1"}, {"name": "recipient_id", "value": "r1"}]

    assert (event.event_id, event.kind, event.hard, event.recipient_id) == ("svix:msg_7", EventKind.BOUNCED, True, "r1")
    assert parse_resend_event(listed, "msg_8").key.recipient_id == "r1"
    assert parse_resend_event({"type": "email.opened", "data": {}}, "msg_9").kind is EventKind.OPENED
    assert parse_resend_event({"type": "contact.created", "data": {}}, "msg_10") is None


# --- annotations ----------------------------------------------------------------------


def test_delivered_is_an_annotation_not_a_change_of_state(env):
    env.delivery()

    report = env.service.handle_event("aws.ses", ses_event("delivery"))

    assert report.status == "applied"
    assert env.state() is DeliveryState.SENT
    assert env.events.kinds("c1", "r1") == ["delivered"]
    assert env.suppressions.items == {}


def test_the_same_event_twice_is_applied_once(env):
    env.delivery()
    body = resend_payload("email.delivered")

    first = env.service.handle_webhook("resend", body, signed(body, "msg_same"))
    second = env.service.handle_webhook("resend", body, signed(body, "msg_same"))

    assert (first.status, second.status) == ("applied", "duplicate")
    assert env.events.kinds("c1", "r1") == ["delivered"]


def test_an_event_without_our_tags_changes_no_delivery(env):
    report = env.service.handle_event("aws.ses", ses_event("delivery", campaign_id=None, recipient_id=None))

    assert report.status == "no_delivery" and env.events.annotations == {}


def test_a_hard_bounce_suppresses_the_address_and_is_counted(env):
    env.delivery()

    report = env.service.handle_event("aws.ses", ses_event("bounce_permanent", email="Gone@Example.com"))

    suppression = env.suppressions.is_suppressed("gone@example.com")
    assert suppression.reason is SuppressionReason.BOUNCED and suppression.campaign_id == "c1"
    assert suppression.source == "ses:bounced" and report.counted == "hard_bounces"
    assert env.state() is DeliveryState.SENT
    assert env.events.feedback("c1").hard_bounces == 1


def test_a_soft_bounce_is_recorded_but_does_not_suppress(env):
    env.delivery()

    report = env.service.handle_event("aws.ses", ses_event("bounce_transient"))

    assert env.suppressions.items == {} and report.counted is None
    assert env.events.kinds("c1", "r1") == ["bounced"]


def test_a_complaint_suppresses_the_address(env):
    env.delivery()

    env.service.handle_event("aws.ses", ses_event("complaint"))

    assert env.suppressions.is_suppressed("user1@example.com").reason is SuppressionReason.COMPLAINED
    assert env.events.feedback("c1").complaints == 1


def test_a_bounce_for_an_email_that_is_not_ours_still_suppresses(env):
    report = env.service.handle_event("aws.ses", ses_event("bounce_permanent", campaign_id=None, recipient_id=None))

    assert report.status == "no_delivery" and report.newly_suppressed == 1


def test_a_replay_finishes_what_a_failed_first_attempt_left_undone(env):
    env.delivery()
    env.suppressions.fail_next_add.append(RuntimeError("throttled"))
    event = ses_event("complaint")

    with pytest.raises(RuntimeError):
        env.service.handle_event("aws.ses", event)  # EventBridge retries the invocation
    env.service.handle_event("aws.ses", event)

    assert env.suppressions.is_suppressed("user1@example.com") is not None
    assert env.events.feedback("c1").complaints == 1


# --- unknown outcomes -------------------------------------------------------------------


def test_a_send_event_resolves_an_unknown_ses_delivery_to_sent(env):
    env.delivery(state=DeliveryState.UNKNOWN, mid=None)

    report = env.service.handle_event("aws.ses", ses_event("send", message_id="ses-msg-42"))

    assert report.resolved_unknown
    record = env.ledger.items[("c1", "r1")]
    assert (record.state, record.provider_message_id) == (DeliveryState.SENT, "ses-msg-42")
    assert env.events.feedback("c1").sent == 1


def test_a_send_event_from_another_provider_does_not_resolve_an_unknown(env):
    env.delivery(state=DeliveryState.UNKNOWN, provider="resend", mid=None)

    report = env.service.handle_event("aws.ses", ses_event("send"))

    assert not report.resolved_unknown and env.state() is DeliveryState.UNKNOWN


def test_only_a_sent_event_resolves_an_unknown(env):
    env.delivery(state=DeliveryState.UNKNOWN, mid=None)

    env.service.handle_event("aws.ses", ses_event("delivery_delay"))

    assert env.state() is DeliveryState.UNKNOWN


# --- brakes ------------------------------------------------------------------------------


def sent(env: Env, n: int) -> None:
    for i in range(n):
        env.delivery(f"r{i}")
        env.service.handle_event("aws.ses", ses_event("send", recipient_id=f"r{i}", message_id=f"m{i}"))


def test_the_complaint_brake_pauses_the_campaign_above_the_threshold(env):
    env.brakes = BrakeSettings(complaint_rate=0.001, min_sent=100)
    sent(env, 1001)
    # 1 complaint in 1001 sent is 0.0999 %: at most the threshold, not above it.
    first = env.service.handle_event("aws.ses", ses_event("complaint", recipient_id="r0", email="a@example.com"))
    assert first.brake is None and env.campaigns.get("c1").state is CampaignState.SENDING

    second = env.service.handle_event("aws.ses", ses_event("complaint", recipient_id="r1", email="b@example.com"))

    campaign = env.campaigns.get("c1")
    assert second.brake == "complaint"
    assert campaign.state is CampaignState.PAUSED and campaign.state_changed_by == "sendonce (complaint brake)"
    assert "complaint rate 0.20%" in campaign.state_reason


def test_a_counted_campaigns_sent_events_write_no_shard_and_its_brakes_divide_by_its_counters(env):
    from sendonce.domain.campaigns.ports import Advance, Counts
    from tests.fakes import FakeCounters

    counters, asked = FakeCounters(), []
    counters.count_from_creation("c1")
    totals = counters.totals
    counters.totals = lambda campaign_id: asked.append(campaign_id) or totals(campaign_id)  # type: ignore[method-assign]
    env.brakes = BrakeSettings(complaint_rate=0.001, min_sent=100)
    service = ProviderEventService(
        ledger_events=env.events,
        suppressions=env.suppressions,
        campaigns=env.campaigns,
        brakes=env.brakes,
        event_readers=event_readers(registered()),
        counters=counters,
    )
    for i in range(3):
        env.delivery(f"r{i}")
        assert service.handle_event("aws.ses", ses_event("send", recipient_id=f"r{i}", message_id=f"m{i}")).status == (
            "applied"
        )
    assert env.events.feedback("c1").sent == 0  # no 'sent' shard written
    assert asked == ["c1"]  # counted or not: asked once per campaign and process

    # The aggregator counted 1,001 sent: 1 complaint is at most 0.1 %, 2 are above it.
    delta = Counts()
    delta.states[DeliveryState.SENT] = 1001
    counters.advance("c1", [Advance("ledger#c1#0", None, 1, delta)])
    first = service.handle_event("aws.ses", ses_event("complaint", recipient_id="r0", email="a@example.com"))
    second = service.handle_event("aws.ses", ses_event("complaint", recipient_id="r1", email="b@example.com"))

    assert first.brake is None and second.brake == "complaint"
    assert "(2 complaints, 1001 sent)" in (env.campaigns.get("c1").state_reason or "")


def test_no_brake_below_the_minimum_sample(env):
    env.brakes = BrakeSettings(min_sent=100)
    sent(env, 99)

    report = env.service.handle_event("aws.ses", ses_event("complaint", recipient_id="r0"))

    assert report.brake is None and env.campaigns.get("c1").state is CampaignState.SENDING


def test_the_bounce_brake_uses_its_own_threshold(env):
    env.brakes = BrakeSettings(hard_bounce_rate=0.05, min_sent=20)
    sent(env, 20)
    reports = [
        env.service.handle_event(
            "aws.ses", ses_event("bounce_permanent", recipient_id=f"r{i}", email=f"x{i}@example.com")
        )
        for i in range(2)
    ]

    assert [r.brake for r in reports] == [None, "bounce"]  # 1/20 = 5 % is not above 5 %; 2/20 is
    assert env.campaigns.get("c1").state_changed_by == "sendonce (bounce brake)"


def test_a_brake_on_a_campaign_that_is_no_longer_sending_does_nothing(env):
    env.brakes = BrakeSettings(min_sent=1)
    sent(env, 5)
    env.campaigns.transition(
        "c1", StateChange(to=CampaignState.CANCELLED, allowed_from=(CampaignState.SENDING,), by="operator")
    )

    report = env.service.handle_event("aws.ses", ses_event("complaint", recipient_id="r0"))

    assert report.brake is None and env.campaigns.get("c1").state is CampaignState.CANCELLED


def test_a_replayed_complaint_is_counted_once(env):
    env.brakes = BrakeSettings(min_sent=1, complaint_rate=0.5)
    sent(env, 4)
    body = resend_payload("email.complained", rid="r0")

    for _ in range(3):
        env.service.handle_webhook("resend", body, signed(body, "msg_c"))

    assert env.events.feedback("c1").complaints == 1
    assert env.campaigns.get("c1").state is CampaignState.SENDING  # 1/4 is not above 50 %


# --- webhook signatures ------------------------------------------------------------------


def test_a_forged_webhook_is_refused_and_changes_nothing(env):
    env.delivery()
    body = resend_payload("email.complained")
    forged = signed(body, secret="whsec_" + base64.b64encode(b"x" * 24).decode())

    with pytest.raises(WebhookSignatureError):
        env.service.handle_webhook("resend", body, forged)

    assert env.suppressions.items == {} and env.events.annotations == {}


def test_an_altered_body_is_refused(env):
    env.delivery()
    body = resend_payload("email.delivered")
    headers = signed(body)

    with pytest.raises(WebhookSignatureError):
        env.service.handle_webhook("resend", body.replace('"r1"', '"r2"'), headers)


@pytest.mark.parametrize("age_s", [301, -301, 3600])
def test_a_stale_or_future_signature_is_refused(env, age_s):
    env.delivery()
    body = resend_payload("email.delivered")

    with pytest.raises(WebhookSignatureError, match="tolerance"):
        env.service.handle_webhook("resend", body, signed(body, timestamp=int(time.time()) - age_s))


@pytest.mark.parametrize("label", ["v2,", "V1,", "v1a,", ",", "x,"])
def test_a_valid_signature_under_another_label_than_v1_is_refused(env, label):
    # The SDK ignores the label; Svix's HMAC signature is `v1` only (found by tests/fuzz).
    env.delivery()
    body = resend_payload("email.delivered")
    headers = signed(body)
    relabelled = {**headers, "svix-signature": headers["svix-signature"].replace("v1,", label, 1)}

    with pytest.raises(WebhookSignatureError, match="no v1 signature"):
        env.service.handle_webhook("resend", body, relabelled)
    assert env.events.annotations == {}
    assert env.service.handle_webhook(
        "resend", body, {**headers, "svix-signature": f"{label}x {headers['svix-signature']}"}
    )


def test_a_webhook_without_svix_headers_is_refused(env):
    with pytest.raises(WebhookSignatureError):
        env.service.handle_webhook("resend", resend_payload("email.delivered"), {"content-type": "application/json"})


# --- the handler -------------------------------------------------------------------------


def context() -> LocalLambdaContext:
    return LocalLambdaContext(
        function_name="sendonce-events", invoked_function_arn="arn:aws:lambda:::function:x", timeout_s=30
    )


def http_event(body: str, headers: dict[str, str], path: str = "/webhooks/resend") -> dict:
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": "application/json", **{k.lower(): v for k, v in headers.items()}},
        "requestContext": {
            "http": {
                "method": "POST",
                "path": path,
                "sourceIp": "127.0.0.1",
                "protocol": "HTTP/1.1",
                "userAgent": "Svix-Webhooks/1.0",
            },
            "stage": "$default",
            "requestId": "1",
        },
        "body": body,
        "isBase64Encoded": False,
    }


def test_the_handler_applies_a_signed_webhook_and_refuses_a_forged_one_with_401(env, capsys):
    env.delivery()
    body = resend_payload("email.bounced")

    bad = events_handler.lambda_handler(
        http_event(body, {**signed(body), "svix-signature": "v1,AAAA"}), context(), service=env.service
    )
    good = events_handler.lambda_handler(http_event(body, signed(body)), context(), service=env.service)

    assert bad["statusCode"] == 401
    assert good["statusCode"] == 200 and json.loads(good["body"]) == {"status": "applied"}
    assert env.suppressions.is_suppressed("user1@example.com") is not None
    assert "WebhookSignaturesRejected" in capsys.readouterr().out


def test_the_handler_takes_ses_events_from_eventbridge_and_emits_brake_metrics(env, capsys):
    env.brakes = BrakeSettings(min_sent=1)
    sent(env, 3)
    capsys.readouterr()

    result = events_handler.lambda_handler(ses_event("complaint", recipient_id="r2"), context(), service=env.service)

    assert result == {"status": "applied"}
    out = capsys.readouterr().out
    assert "ComplaintBrakeTriggered" in out and '"Complaints"' in out
    assert email_fingerprint("user1@example.com") in env.suppressions.items
