"""Deliverability against moto's server and the local Resend server: the suppression list
and ledger-events adapters, Resend webhooks (Svix-signed, retried, replayed) and SES events
(fixtures) through the events handler, one-click unsubscribe over HTTP, the brakes.

Over 500 lines: the deliverability path end to end shares one fixture set (moto's server,
the local Resend server, the events handler).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid

import boto3
import pytest

from sendonce.adapters.dynamodb.ledger import DynamoDBLedger
from sendonce.adapters.dynamodb.ledger_events import DynamoDBLedgerEvents
from sendonce.adapters.dynamodb.suppressions import DynamoDBSuppressions
from sendonce.domain.deliverability.ports import (
    AnnotationStatus,
    EventKind,
    FeedbackCounter,
    ProviderEvent,
    SuppressionReason,
)
from sendonce.domain.models import (
    CampaignState,
    DeliveryKey,
    DeliveryRequest,
    DeliveryState,
    Receipt,
    email_fingerprint,
)
from sendonce.domain.sending.ports import ClaimStatus
from sendonce.handlers import events as events_handler
from sendonce.wiring.clients import clients
from sendonce.wiring.events import build_events_service
from sendonce_local.poller import LocalLambdaContext
from sendonce_local.resend_server import svix_headers
from sendonce_local.resources import create_suppressions_table, create_tables
from tests.fakes import ses_event

pytestmark = pytest.mark.integration


def http(method: str, url: str, body: str | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=body.encode() if body is not None else None, headers=headers or {}, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def one_click(url: str) -> int:
    return http("POST", url, "List-Unsubscribe=One-Click", {"content-type": "application/x-www-form-urlencoded"})[0]


def wait_for(predicate, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def context() -> LocalLambdaContext:
    return LocalLambdaContext(
        function_name="sendonce-events", invoked_function_arn="arn:aws:lambda:::function:e", timeout_s=30
    )


def kinds(item: dict) -> list[str]:
    return sorted(entry.get("k") or entry["event"] for entry in item.get("provider_events", []))


def run_campaign(system, n: int, provider: str = "resend"):
    system.campaign(provider=provider)
    people = system.recipients(n)
    system.operator.publish("c1", people)
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    return people


# --- adapters -------------------------------------------------------------------------


@pytest.fixture
def tables(aws_env):
    prefix = f"d{uuid.uuid4().hex[:8]}"
    dynamodb = boto3.client("dynamodb")
    create_tables(dynamodb, ledger_table=f"{prefix}-ledger", campaigns_table=f"{prefix}-campaigns")
    create_suppressions_table(dynamodb, f"{prefix}-suppressions")
    return (
        DynamoDBLedger(client=dynamodb, table_name=f"{prefix}-ledger", shards_of=lambda _: 4),
        DynamoDBLedgerEvents(
            client=dynamodb,
            ledger_table=f"{prefix}-ledger",
            campaigns_table=f"{prefix}-campaigns",
            shards_of=lambda _: 4,
        ),
        DynamoDBSuppressions(client=dynamodb, table_name=f"{prefix}-suppressions"),
        f"{prefix}-suppressions",
    )


def test_the_suppression_list_keeps_fingerprints_and_the_first_reason(tables):
    _, _, suppressions, table = tables

    assert suppressions.add("Ann@Example.com", SuppressionReason.COMPLAINED, "ses:complained", "c1") is True
    assert suppressions.add("ann@example.com", SuppressionReason.MANUAL, "operator") is False
    report = suppressions.import_(
        ["ann@example.com", "bob@example.com", "bob@example.com"], reason=SuppressionReason.MANUAL, source="import"
    )

    assert (report.added, report.already_suppressed) == (1, 1)
    assert suppressions.is_suppressed("ANN@example.com").reason is SuppressionReason.COMPLAINED
    raw = json.dumps(boto3.client("dynamodb").scan(TableName=table)["Items"])
    assert "@" not in raw  # addresses are never stored
    assert {s.fingerprint for s in suppressions.list()} == {
        email_fingerprint("ann@example.com"),
        email_fingerprint("bob@example.com"),
    }
    assert suppressions.remove("bob@example.com") is True and suppressions.remove("bob@example.com") is False


def claim(ledger: DynamoDBLedger, rid: str, owner: str = "A", provider: str = "ses") -> DeliveryRequest:
    request = DeliveryRequest(
        campaign_id="c1",
        recipient_id=rid,
        batch_id="b1",
        email=f"{rid}@example.com",
        variables={},
        provider=provider,
        provider_idempotent=provider == "resend",
        owner=owner,
    )
    now = int(time.time() * 1000)
    assert (
        ledger.claim(request, payload_hash="h", lease_until_ms=now + 60_000, now_ms=now).status is ClaimStatus.CLAIMED
    )
    return request


def make_unknown(ledger: DynamoDBLedger, rid: str) -> DeliveryRequest:
    request = claim(ledger, rid)
    now = int(time.time() * 1000)
    ledger.mark_in_flight(request.key, owner="A", now_ms=now)
    ledger.settle(
        request.key,
        owner="A",
        state=DeliveryState.UNKNOWN,
        reason="read timeout",
        error_class="ambiguous",
        maybe_sent=True,
        now_ms=now,
    )
    return request


def event(kind: EventKind, rid: str = "r1", event_id: str = "e1", message_id: str | None = None) -> ProviderEvent:
    return ProviderEvent(
        event_id=event_id, provider="ses", kind=kind, campaign_id="c1", recipient_id=rid, message_id=message_id
    )


def test_annotations_are_deduplicated_and_leave_the_state_alone(tables):
    ledger, events, _, _ = tables
    request = claim(ledger, "r1")
    ledger.mark_sent(request.key, owner="A", receipt=Receipt(provider_message_id="m1"))

    first = events.annotate(event(EventKind.DELIVERED))
    again = events.annotate(event(EventKind.DELIVERED))
    stranger = events.annotate(event(EventKind.DELIVERED, rid="nobody"))

    assert (first.status, first.state, again.status, stranger.status) == (
        AnnotationStatus.APPLIED,
        DeliveryState.SENT,
        AnnotationStatus.DUPLICATE,
        AnnotationStatus.NO_DELIVERY,
    )
    record = ledger.get(request.key)
    assert record.state is DeliveryState.SENT and record.provider_message_id == "m1"


def test_counted_annotations_count_once_in_one_transaction(tables):
    ledger, events, _, _ = tables
    claim(ledger, "r1")

    results = [
        events.annotate(event(EventKind.COMPLAINED, event_id="c-1"), counter=FeedbackCounter.COMPLAINTS)
        for _ in range(3)
    ]
    events.count_sent("c1", "r1")
    events.count_sent("c1", "r2")
    orphan = events.annotate(
        event(EventKind.COMPLAINED, rid="nobody", event_id="c-2"), counter=FeedbackCounter.COMPLAINTS
    )

    assert [r.status for r in results] == [AnnotationStatus.APPLIED] + [AnnotationStatus.DUPLICATE] * 2
    assert orphan.status is AnnotationStatus.NO_DELIVERY
    feedback = events.feedback("c1")
    assert (feedback.sent, feedback.complaints, feedback.hard_bounces) == (2, 1, 0)


def test_sent_is_counted_over_shards_each_its_own_partition_key_and_summed_with_the_old_counter(tables):
    from collections import Counter

    from sendonce.adapters.dynamodb.ledger_events import SENT_SHARDS, sent_shard

    _, events, _, _ = tables
    dynamodb = boto3.client("dynamodb")
    campaigns_table = events._campaigns
    # Given a campaign counted by the previous version (one item) and then by this one
    dynamodb.put_item(
        TableName=campaigns_table,
        Item={"pk": {"S": "campaign#c1"}, "sk": {"S": "deliverability#sent"}, "sent": {"N": "5"}},
    )
    writes: Counter = Counter()
    dynamodb.meta.events.register(
        "provide-client-params.dynamodb.UpdateItem", lambda params, **_: writes.update([params["Key"]["pk"]["S"]])
    )
    events._client = dynamodb
    for i in range(200):
        events.count_sent("c1", f"r{i}")
    # Then no partition-key value took more than a tenth of the writes, and the sum is exact
    assert len(writes) == SENT_SHARDS and max(writes.values()) / 200 <= 0.1
    assert events.feedback("c1").sent == 205
    # And over many recipients the hash spreads them evenly: the hottest shard's share
    shares = Counter(sent_shard(f"r{i}") for i in range(100_000))
    assert max(shares.values()) / 100_000 <= 0.07  # 1/16 = 0.0625


def test_resolve_and_reopen_are_conditional_on_unknown(tables):
    ledger, events, _, _ = tables
    r1, r2, r3 = make_unknown(ledger, "r1"), make_unknown(ledger, "r2"), make_unknown(ledger, "r3")
    claim(ledger, "r4")
    # r2's Send event came while it was still in flight, before it was closed as unknown.
    events.annotate(event(EventKind.SENT, rid="r2", event_id="s2", message_id="ses-2"))

    assert events.resolve_unknown(r1.key, provider_message_id="ses-1", detail="test") is True
    assert events.resolve_unknown(r1.key, provider_message_id="ses-x", detail="test") is False
    unknown = {u.recipient_id: u for u in events.unknowns("c1")}
    # SES: nothing can prove r3 absent at the provider; the operator accepts a possible duplicate.
    report = events.reopen_unknown("c1", ["r1", "r2", "r3", "r4"], by="alice", accept_possible_duplicates=True)

    assert set(unknown) == {"r2", "r3"} and unknown["r2"].confirmed_message_id == "ses-2"
    assert unknown["r3"].since_ms is not None and unknown["r3"].email_fingerprint == email_fingerprint("r3@example.com")
    assert (report.reopened, report.confirmed_sent, sorted(report.skipped)) == (["r3"], ["r2"], ["r1", "r4"])
    assert ledger.get(r1.key).provider_message_id == "ses-1"
    assert ledger.get(r2.key).state is DeliveryState.SENT
    reopened = ledger.get(r3.key)
    assert reopened.state is DeliveryState.PENDING and reopened.maybe_sent_at_ms is None
    # The SES claim rules take a reopened delivery again (they refuse any that may have been sent).
    assert claim(ledger, "r3", owner="B").owner == "B"


def test_reopen_without_accepting_duplicates_takes_only_an_unknown_proven_not_sent(tables):
    ledger, events, _, _ = tables
    proven, unproven, evidenced = make_unknown(ledger, "r1"), make_unknown(ledger, "r2"), make_unknown(ledger, "r3")
    events.annotate(event(EventKind.SENT, rid="r3", event_id="s3", message_id="ses-3"))

    assert events.prove_not_sent(proven.key, audit="audit-1") is True
    assert events.prove_not_sent(evidenced.key, audit="audit-1") is False  # the provider said sent
    assert events.prove_not_sent(make_unknown(ledger, "r4").key, audit="a") is True
    ledger_sent = claim(ledger, "r5")
    assert events.prove_not_sent(ledger_sent.key, audit="audit-1") is False  # not unknown
    flags = {u.recipient_id: u.proven_not_sent for u in events.unknowns("c1")}
    report = events.reopen_unknown("c1", ["r1", "r2", "r3"], by="alice")

    assert flags == {"r1": True, "r2": False, "r3": False, "r4": True}
    assert (report.reopened, report.confirmed_sent, report.skipped) == (["r1"], ["r3"], ["r2"])
    reopened = ledger.get(proven.key)
    assert reopened.state is DeliveryState.PENDING and reopened.maybe_sent_at_ms is None
    assert ledger.get(unproven.key).state is DeliveryState.UNKNOWN
    # The proof went with the reopen: once pending, nothing says "proven" any more.
    assert "r1" not in {u.recipient_id for u in events.unknowns("c1")}


# --- Resend webhooks ----------------------------------------------------------------------


def test_resend_webhooks_annotate_every_delivery_and_suppress_hard_bounces(system, deliverability):
    system.resend.bounce([f"user2@{system.domain}"])

    run_campaign(system, 12)
    assert system.resend.wait_for_webhooks(20)

    delivered = deliverability.ledger_item("c1", "r1")
    assert delivered["state"] == "sent" and delivered["last_event"] == "delivered"
    assert kinds(delivered) == ["delivered", "sent"]
    assert delivered["provider_sent_id"] == delivered["provider_message_id"]
    bounced = deliverability.ledger_item("c1", "r2")
    assert bounced["state"] == "sent" and bounced["last_event"] == "bounced"
    suppression = deliverability.suppressions.is_suppressed(f"user2@{system.domain}")
    assert suppression.reason is SuppressionReason.BOUNCED and suppression.source == "resend:bounced"
    assert [s.fingerprint for s in deliverability.suppressions.list()] == [email_fingerprint(f"user2@{system.domain}")]
    feedback = deliverability.ledger_events.feedback("c1")
    assert (feedback.sent, feedback.hard_bounces, feedback.complaints) == (12, 1, 0)


def test_a_complaint_suppresses_and_the_brake_pauses_the_campaign(system, deliverability):
    run_campaign(system, 12)
    assert system.resend.wait_for_webhooks(20)
    system.operator.publish("c1", system.recipients(5, start=12))  # more to send: the brake has work to do
    # past the minimum sample (10); a webhook Resend retries after a failed delivery counts late
    assert wait_for(lambda: deliverability.ledger_events.feedback("c1").sent == 12, timeout=20)

    assert system.resend.emit_webhook(f"user3@{system.domain}", "email.complained") == 1
    assert system.resend.wait_for_webhooks(20)

    campaign = system.operator.get("c1")
    assert campaign.state is CampaignState.PAUSED and campaign.state_changed_by == "sendonce (complaint brake)"
    assert "1 complaints, 12 sent" in campaign.state_reason
    assert deliverability.suppressions.is_suppressed(f"user3@{system.domain}").reason is SuppressionReason.COMPLAINED
    assert deliverability.ledger_item("c1", "r3")["last_event"] == "complained"


def test_a_replayed_webhook_is_applied_once(system, deliverability):
    run_campaign(system, 3)
    assert system.resend.wait_for_webhooks(20)
    hook = next(h for h in system.resend.webhook_deliveries() if h.type == "email.delivered")
    rid = json.loads(hook.body)["data"]["tags"]["recipient_id"]
    seen = len(deliverability.events_api.requests)

    system.resend.redeliver(hook.svix_id)
    assert system.resend.wait_for_webhooks(20)

    assert len(deliverability.events_api.requests) == seen + 1 and hook.attempts == [200, 200]
    assert kinds(deliverability.ledger_item("c1", rid)) == ["delivered", "sent"]


def test_a_webhook_answered_non_2xx_is_retried_with_the_same_svix_id_and_applied_once(system, deliverability):
    handler = deliverability.events_api.handler
    failed: set[str] = set()

    def flaky(event, ctx):
        svix_id = event["headers"].get("svix-id")
        if '"email.delivered"' in (event.get("body") or "") and svix_id not in failed:
            failed.add(svix_id)
            return {"statusCode": 503, "body": "busy"}
        return handler(event, ctx)

    deliverability.events_api.handler = flaky
    run_campaign(system, 2)
    assert system.resend.wait_for_webhooks(20)

    delivered = [h for h in system.resend.webhook_deliveries() if h.type == "email.delivered"]
    assert [h.attempts for h in delivered] == [[503, 200], [503, 200]]
    ids = [e["headers"]["svix-id"] for e in deliverability.events_api.requests if '"email.delivered"' in e["body"]]
    assert sorted(ids) == sorted(h.svix_id for h in delivered for _ in range(2))
    assert [kinds(deliverability.ledger_item("c1", r)) for r in ("r0", "r1")] == [["delivered", "sent"]] * 2


def test_forged_and_stale_webhooks_are_refused_and_change_nothing(system, deliverability):
    body = json.dumps(
        {
            "type": "email.complained",
            "created_at": "2025-05-06T10:00:00Z",
            "data": {
                "email_id": "x",
                "to": ["victim@example.com"],
                "tags": {"campaign_id": "c1", "recipient_id": "r1"},
            },
        }
    )
    forged = svix_headers("whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB", "msg_forged", body)
    stale = svix_headers(deliverability.resources.webhook_secret, "msg_stale", body, int(time.time()) - 400)
    fresh = svix_headers(deliverability.resources.webhook_secret, "msg_fresh", body)

    answers = [
        http("POST", deliverability.webhook_url, body, {"content-type": "application/json", **h})[0]
        for h in (forged, stale, {})
    ]
    tampered = http(
        "POST",
        deliverability.webhook_url,
        body.replace("victim", "other"),
        {"content-type": "application/json", **fresh},
    )[0]

    assert answers + [tampered] == [401, 401, 401, 401]
    assert list(deliverability.suppressions.list()) == []
    assert http("POST", deliverability.webhook_url, body, {"content-type": "application/json", **fresh})[0] == 200
    assert deliverability.suppressions.is_suppressed("victim@example.com") is not None


# --- SES events from fixtures -------------------------------------------------------------


def test_ses_events_resolve_an_unknown_and_suppress_bounces_and_complaints(system, deliverability):
    system.campaign(provider="ses")
    ledger = system.ledger()
    unknown = make_unknown(ledger, "r1")
    for rid in ("r2", "r3"):
        request = claim(ledger, rid)
        ledger.mark_sent(request.key, owner="A", receipt=Receipt(provider_message_id=f"ses-{rid}"))
    service = build_events_service(deliverability.events_settings, clients())

    def deliver(name: str, rid: str, **kw) -> dict:
        return events_handler.lambda_handler(
            ses_event(name, recipient_id=rid, email=f"{rid}@example.com", **kw), context(), service=service
        )

    assert deliver("send", "r1", message_id="ses-recovered") == {"status": "applied"}
    assert deliver("send", "r1", message_id="ses-recovered") == {"status": "duplicate"}
    deliver("bounce_permanent", "r2")
    deliver("complaint", "r3")
    deliver("bounce_transient", "r3")

    record = ledger.get(unknown.key)
    assert record.state is DeliveryState.SENT and record.provider_message_id == "ses-recovered"
    assert deliverability.suppressions.is_suppressed("r2@example.com").reason is SuppressionReason.BOUNCED
    assert deliverability.suppressions.is_suppressed("r3@example.com").reason is SuppressionReason.COMPLAINED
    # The transient bounce arrived last but is stamped before the complaint and means less.
    assert deliverability.ledger_item("c1", "r3")["last_event"] == "complained"
    assert ledger.get(DeliveryKey(campaign_id="c1", recipient_id="r3")).state is DeliveryState.SENT


# --- one-click unsubscribe ----------------------------------------------------------------


def test_one_click_unsubscribe_over_http(system, deliverability):
    token = deliverability.tokens().sign("c1", "r1", f"user1@{system.domain}")
    url = f"{deliverability.unsubscribe_api.url}/u/{token}"

    status, page = http("GET", url)
    assert status == 200 and "<form" in page
    assert list(deliverability.suppressions.list()) == []  # a prefetching scanner unsubscribes nobody

    assert [one_click(url), one_click(url)] == [200, 200]
    suppression = deliverability.suppressions.is_suppressed(f"USER1@{system.domain}")
    assert suppression.reason is SuppressionReason.UNSUBSCRIBED and suppression.campaign_id == "c1"
    assert len(list(deliverability.suppressions.list())) == 1


def test_a_tampered_unsubscribe_token_is_403_and_changes_nothing(system, deliverability):
    token = deliverability.tokens().sign("c1", "r1", f"user1@{system.domain}")
    version, campaign, recipient, fp, mac = token.split(".")
    other_fp = email_fingerprint(f"user2@{system.domain}")

    for altered in (
        f"{version}.{campaign}.{recipient}.{other_fp}.{mac}",
        f"{version}.{campaign}.r2.{fp}.{mac}",
        f"{version}.{campaign}.{recipient}.{fp}.{mac[::-1]}",
    ):
        url = f"{deliverability.unsubscribe_api.url}/u/{altered}"
        assert one_click(url) == 403 and http("GET", url)[0] == 403

    assert list(deliverability.suppressions.list()) == []


# --- the consumer's side: suppression check and one-click headers ----------------------


def test_an_unsubscribe_arriving_mid_campaign_stops_later_sends_to_that_recipient(system, deliverability):
    system.campaign()
    people = system.recipients(10)
    system.operator.publish("c1", people[:5])
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)

    token = deliverability.tokens().sign("c1", "r7", people[7].email)
    assert one_click(f"{deliverability.unsubscribe_api.url}/u/{token}") == 200
    system.operator.publish("c1", people[5:])
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)

    deliveries = system.deliveries()
    assert people[7].email.lower() not in deliveries
    assert len(deliveries) == 9 and set(deliveries.values()) == {1}
    states = {r.recipient_id: r.state for r in system.operator.records("c1")}
    assert states["r7"] is DeliveryState.SUPPRESSED
    assert system.operator.status("c1").suppressed == 1


def test_every_email_carries_working_one_click_headers(system, deliverability):
    run_campaign(system, 3)

    accepted = system.resend.accepted()
    assert len(accepted) == 3
    for email in accepted:
        assert email.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        link = email.headers["List-Unsubscribe"]
        assert link.startswith("<https://unsubscribe.example.com/u/v1.c1.") and link.endswith(">")
    token = accepted[0].headers["List-Unsubscribe"][1:-1].rsplit("/", 1)[1]
    assert one_click(f"{deliverability.unsubscribe_api.url}/u/{token}") == 200
    assert deliverability.suppressions.is_suppressed(next(iter(accepted[0].recipients))) is not None


# --- the suppression commands ------------------------------------------------------------


def test_suppression_commands(tables, tmp_path, monkeypatch):
    import types

    from click.testing import CliRunner

    from sendonce_ops.deliverability_cli import suppression

    _, _, _, table = tables
    monkeypatch.setenv("SENDONCE_SUPPRESSIONS_TABLE", table)
    obj = types.SimpleNamespace(session=boto3.session.Session(), stack="Sendonce", operator_name="alice")
    run = lambda *args: CliRunner().invoke(suppression, list(args), obj=obj)  # noqa: E731
    (tmp_path / "list.csv").write_text("email,reason\nann@example.com,complained\nnot-an-address\nbob@example.com\n")

    added = run("add", "carol@example.com", "--reason", "unsubscribed")
    imported = run("import", str(tmp_path / "list.csv"), "--json")
    again = run("add", "ann@example.com")
    listed = run("list", "--json")
    removed = run("remove", "bob@example.com")

    assert (added.exit_code, added.output.strip()) == (0, "added 1, already suppressed 0")
    assert imported.exit_code == 3 and json.loads(imported.output.splitlines()[0]) == {
        "added": 2,
        "already suppressed": 0,
        "invalid_lines": [3],
    }
    assert again.output.strip() == "added 0, already suppressed 1"
    entries = [json.loads(line) for line in listed.output.splitlines()]
    assert {e["reason"] for e in entries} == {"unsubscribed", "complained", "manual"} and "@" not in listed.output
    assert removed.output.strip() == "removed 1, not on the list 0"
    assert "complained" in run("check", "ANN@example.com").output
    assert run("check", "bob@example.com").output.strip() == "not suppressed"


def test_batch_mode_leaves_suppressed_addresses_out_of_the_group_and_adds_the_headers(system, deliverability):
    system.campaign(delivery_mode="batch")
    people = system.recipients(6)
    deliverability.suppressions.add(people[4].email, SuppressionReason.COMPLAINED, "ses:complained")
    system.operator.publish("c1", people)

    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)

    deliveries = system.deliveries()
    assert len(deliveries) == 5 and people[4].email.lower() not in deliveries
    assert {a.endpoint for a in system.resend.accepted()} == {"/emails/batch"}
    assert all("List-Unsubscribe" in a.headers for a in system.resend.accepted())
    states = {r.recipient_id: r.state for r in system.operator.records("c1")}
    assert states["r4"] is DeliveryState.SUPPRESSED


# --- the operator's side: unknown outcomes and the suppression list on the command line --


def test_an_operator_lists_unknowns_and_resumes_with_them(system, deliverability):
    from sendonce.domain.sending.guards import LedgerDeliveryGuard
    from tests.integration.operator_helpers import as_json, json_lines, sendonce

    system.campaign(provider="ses")
    people = system.recipients(3)
    system.operator.publish("c1", people)
    # r1's first attempt may have reached SES: its outcome is unknown.
    ledger = system.ledger()
    request = DeliveryRequest(
        campaign_id="c1",
        recipient_id="r1",
        batch_id="b0",
        email=people[1].email,
        variables=people[1].variables,
        provider="ses",
        provider_idempotent=False,
        owner="lost",
    )
    now = int(time.time() * 1000)
    ledger.claim(
        request,
        payload_hash=LedgerDeliveryGuard(ledger).payload_hash(people[1].email, people[1].variables),
        lease_until_ms=now + 60_000,
        now_ms=now,
    )
    ledger.mark_in_flight(request.key, owner="lost", now_ms=now)
    ledger.settle(
        request.key,
        owner="lost",
        state=DeliveryState.UNKNOWN,
        reason="read timeout",
        error_class="ambiguous",
        maybe_sent=True,
        now_ms=now,
    )
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    assert system.operator.status("c1").state is CampaignState.COMPLETED  # "1 outcome(s) unknown"

    listed = json_lines(sendonce(system, "campaign", "unknowns", "c1", "--older-than", "0", "--json"))
    resumed = as_json(
        sendonce(
            system,
            "campaign",
            "resume",
            "c1",
            "--include-unknown",
            "--accept-possible-duplicates",
            "--unknown-older-than",
            "0",
            "--json",
        )
    )
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)

    assert [u["recipient_id"] for u in listed] == ["r1"]
    assert (resumed["state"], resumed["republished"], resumed["reopened"]) == ("sending", 1, ["r1"])
    assert system.deliveries("ses") == {p.email.lower(): 1 for p in people}
    assert {r.recipient_id: r.state for r in system.operator.records("c1")}["r1"] is DeliveryState.SENT
    added = sendonce(
        system,
        "suppression",
        "add",
        "ann@example.com",
        env={"SENDONCE_SUPPRESSIONS_TABLE": deliverability.resources.suppressions_table},
    )
    assert added.exit_code == 0 and deliverability.suppressions.is_suppressed("ann@example.com") is not None
