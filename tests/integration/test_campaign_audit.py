"""`sendonce campaign audit`: the provider's own record of a campaign set against the ledger,
through the real `resend` SDK against the local Resend server (List Sent Emails, Retrieve
Email) and the real DynamoDB adapters on moto's server."""

from __future__ import annotations

import json
import time

import boto3
import pytest
import resend

from sendonce.domain.models import DeliveryRequest, DeliveryState
from sendonce.domain.sending.guards import LedgerDeliveryGuard
from tests.integration.operator_helpers import as_json, sendonce

pytestmark = pytest.mark.integration


def earlier_team_email(system) -> None:
    """The team sent something an hour before the campaign: a listing that reaches it has
    reached back past the campaign's start (complete), as on any account in use."""
    system.resend.clock = lambda: time.time() - 3600
    try:
        resend.api_url, resend.api_key = system.resend.url, "re_local_test_key"
        resend.Emails.send(
            {"from": "ops@example.org", "to": ["someone@example.org"], "subject": "Earlier", "text": "x"}
        )
    finally:
        system.resend.clock = time.time


def run_campaign(system, n: int = 5):
    earlier_team_email(system)
    system.campaign()
    people = system.recipients(n)
    system.operator.publish("c1", people)
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    return people


def audit(system, *args: str):
    result = sendonce(system, "campaign", "audit", "c1", "--json", *args)
    return result.exit_code, json.loads(result.stdout.splitlines()[-1]), result


def states(system) -> dict[str, DeliveryState]:
    return {r.recipient_id: r.state for r in system.operator.records("c1")}


def plant_duplicate(system, person) -> None:
    """Someone sends `person` the campaign's email again by hand, outside sendonce, with the same tags."""
    resend.api_url = system.resend.url
    resend.Emails.send(
        {
            "from": f"news@{system.domain}",
            "to": [person.email],
            "subject": "Hello User 2",
            "html": "<p>Hi</p>",
            "tags": [{"name": "campaign_id", "value": "c1"}, {"name": "recipient_id", "value": person.recipient_id}],
        }
    )


def test_after_a_campaign_every_recipient_was_sent_exactly_once(system, tmp_path):
    run_campaign(system)
    out = tmp_path / "audit.json"

    code, artefact, _ = audit(system, "--out", str(out))
    again_code, again, _ = audit(system)
    text = sendonce(system, "campaign", "audit", "c1")

    findings = artefact["findings"]
    assert code == 0 and findings["clean"] is True and findings["listing_complete"] is True
    assert artefact["run"]["listed_emails"] == 6  # the campaign's 5, then the earlier one: stop
    assert findings["counts"]["sent_once"] == 5 and findings["counts"]["duplicate"] == 0
    assert findings["duplicates"] == [] and findings["recipients"] == {}
    # Stable: the same facts give the same digest, and the file holds the same artefact.
    assert (again_code, again["digest"]) == (0, artefact["digest"])
    assert json.loads(out.read_text())["digest"] == artefact["digest"]
    # One address per recipient: matched by address, sender, subject and window, no Retrieve.
    assert artefact["run"]["retrieves"] == 0 and artefact["run"]["must_run_before"]
    assert text.exit_code == 0 and "must run before" in text.stdout and "@" not in text.stdout


def test_an_email_sent_outside_sendonce_with_the_campaign_tags_is_a_duplicate(system):
    people = run_campaign(system)
    # Someone sends r2 the campaign's email again by hand, with the same tags.
    plant_duplicate(system, people[2])

    code, artefact, result = audit(system)
    text = sendonce(system, "campaign", "audit", "c1")

    findings = artefact["findings"]
    assert code == 5 and findings["clean"] is False
    assert [d["recipient_id"] for d in findings["duplicates"]] == ["r2"]
    assert len(findings["duplicates"][0]["emails"]) == 2
    assert findings["counts"]["sent_once"] == 4 and findings["counts"]["duplicate"] == 1
    assert artefact["run"]["retrieves"] == 2  # only the address whose match was not unique
    assert text.exit_code == 5 and "duplicate r2" in text.stdout


def test_a_deleted_ledger_record_shows_up_as_a_difference(system):
    run_campaign(system)
    ledger = system.ledger()
    key = ledger._keys.key(ledger.get_many("c1", ["r3"])["r3"].key)
    boto3.client("dynamodb").delete_item(TableName=system.resources.ledger_table, Key=key)

    code, artefact, _ = audit(system)

    findings = artefact["findings"]
    assert code == 5 and findings["recipients"] == {"provider_only": ["r3"]}
    assert findings["counts"]["sent_once"] == 4


def _unknown_before_sending(system, people, rid: str) -> None:
    """rid's first attempt may have reached Resend (a claim, then an ambiguous answer that
    cannot be repeated): its outcome is unknown, and Resend in fact never received it."""
    index = int(rid[1:])
    ledger = system.ledger()
    request = DeliveryRequest(
        campaign_id="c1",
        recipient_id=rid,
        batch_id="b0",
        email=people[index].email,
        variables=people[index].variables,
        provider="resend",
        provider_idempotent=True,
        owner="lost",
    )
    now = int(time.time() * 1000)
    ledger.claim(
        request,
        payload_hash=LedgerDeliveryGuard(ledger).payload_hash(people[index].email, people[index].variables),
        lease_until_ms=now + 60_000,
        now_ms=now,
    )
    ledger.settle(
        request.key,
        owner="lost",
        state=DeliveryState.UNKNOWN,
        reason="409 invalid_idempotent_request",
        error_class="ambiguous",
        maybe_sent=True,
        now_ms=now,
    )
    # It ended an hour ago (the operator audits later): no request of it can still be accepted.
    hour_ago = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 3600))
    boto3.client("dynamodb").update_item(
        TableName=system.resources.ledger_table,
        Key=ledger._keys.key(request.key),
        UpdateExpression="SET updated_at = :t",
        ExpressionAttributeValues={":t": {"S": hour_ago}},
    )


def test_unknowns_are_settled_by_evidence_and_only_the_absent_one_is_sent_again(system):
    earlier_team_email(system)
    system.campaign()
    people = system.recipients(4)
    system.operator.publish("c1", people)
    _unknown_before_sending(system, people, "r1")
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    # r2 was accepted by Resend, but its consumer died before writing it: the ledger ended it
    # unknown (the state a takeover refused past the key window leaves).
    ledger_table = system.resources.ledger_table
    r2 = system.ledger().get_many("c1", ["r2"])["r2"]
    boto3.client("dynamodb").update_item(
        TableName=ledger_table,
        Key=system.ledger()._keys.key(r2.key),
        UpdateExpression="SET #s = :u REMOVE provider_message_id",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":u": {"S": "unknown"}},
    )
    assert {k: v.value for k, v in states(system).items() if v is DeliveryState.UNKNOWN} == {
        "r1": "unknown",
        "r2": "unknown",
    }
    # Without proof, resume --include-unknown reopens nothing.
    before = as_json(sendonce(system, "campaign", "resume", "c1", "--include-unknown", "--json"))
    assert before["reopened"] == [] and sorted(before["not_reopened"]) == []

    dry_code, dry, _ = audit(system)
    code, settled, _ = audit(system, "--settle")
    resumed = as_json(sendonce(system, "campaign", "resume", "c1", "--include-unknown", "--json"))
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    after_code, after, _ = audit(system)

    assert dry_code == 0 and dry["findings"]["recipients"] == {"unknown_not_sent": ["r1"], "unknown_sent": ["r2"]}
    assert states(system)["r1"] is DeliveryState.SENT and code == 0
    assert settled["run"]["settled"] is True
    assert resumed["reopened"] == ["r1"]
    # Each recipient got exactly one email: r1 once after its proof, r2 never again.
    assert system.deliveries() == {p.email.lower(): 1 for p in people}
    assert states(system) == {p.recipient_id: DeliveryState.SENT for p in people}
    assert after_code == 0 and after["findings"]["counts"]["sent_once"] == 4


def test_an_audit_outside_the_retention_window_is_refused_clearly(system):
    run_campaign(system, 2)

    # A plan that kept sent emails 86 s: the campaign began (less a margin) before that.
    result = sendonce(system, "campaign", "audit", "c1", "--retention-days", "0.001")

    assert result.exit_code == 4, result.output
    assert "lists sent emails only 0.001 day(s) back" in result.stderr and "must run before" in result.stderr


def test_watch_audits_the_campaign_when_it_completes(system):
    people = run_campaign(system, 3)
    resend.api_url = system.resend.url
    resend.Emails.send(
        {
            "from": f"news@{system.domain}",
            "to": [people[0].email],
            "subject": "Hello User 0",
            "html": "<p>Hi</p>",
            "tags": [{"name": "campaign_id", "value": "c1"}, {"name": "recipient_id", "value": "r0"}],
        }
    )

    result = sendonce(system, "campaign", "watch", "c1", "--timeout", "10", "--audit", "--json")

    artefact = json.loads(result.stdout.splitlines()[-1])
    assert result.exit_code == 5 and [d["recipient_id"] for d in artefact["findings"]["duplicates"]] == ["r0"]


def test_the_listing_is_read_page_by_page_and_waits_out_the_teams_rate_limit(system, monkeypatch):
    from sendonce.adapters.providers.resend import records

    run_campaign(system, 4)
    # One email a page, and a team limit of 2 requests/s that the audit's requests meet.
    monkeypatch.setattr(records, "PAGE_SIZE", 1)
    system.resend.set_rate_limit(2)

    code, artefact, _ = audit(system)

    run = artefact["run"]
    assert code == 0 and artefact["findings"]["counts"]["sent_once"] == 4
    assert run["listed_emails"] == 5  # 4 pages of the campaign, then the earlier email: stop
    assert run["provider_requests"] >= 5  # and a retry for every 429 met on the way


def test_the_audit_takes_the_shared_rate_limit_at_a_lower_priority_than_sending(system):
    from tests.fakes import LimiterClock
    from tests.integration.test_rate_from_headers import limiter, per_second

    clock = LimiterClock()
    audit_side, senders = limiter(system, clock, reserve=0.0), limiter(system, clock, reserve=0.0)

    # Reads alone: at most half of each second's 10 places.
    reads = []
    for _ in range(12):
        assert audit_side.acquire_background("resend", share=0.5)
        reads.append(clock.now)
    slot = int(clock.now)
    # Senders arriving later in that second still find the other half.
    for _ in range(5):
        assert senders.acquire("resend")
    sent_in_slot = int(clock.now) == slot

    # When senders took more than half of a second, a read waits for the next one.
    clock.now = float(int(clock.now) + 5)
    busy = int(clock.now)
    for _ in range(6):
        assert senders.acquire("resend")
    assert int(clock.now) == busy
    assert audit_side.acquire_background("resend", share=0.5)

    assert per_second(reads) == [5, 5, 2] and sent_in_slot
    assert int(clock.now) == busy + 1


def test_ses_is_audited_on_its_recorded_send_events_and_proves_nothing_absent(system):
    from sendonce.domain.deliverability.ports import EventKind, ProviderEvent
    from sendonce.wiring.stores import build_ledger_events

    system.campaign(provider="ses")
    system.operator.publish("c1", system.recipients(3))
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)
    events = build_ledger_events(
        system.resources.ledger_table, system.resources.campaigns_table, boto3.client("dynamodb")
    )
    sent = {r.recipient_id: r.provider_message_id for r in system.operator.records("c1")}

    def send_event(rid: str, message_id: str, event_id: str) -> None:
        events.annotate(
            ProviderEvent(
                event_id=event_id,
                provider="ses",
                kind=EventKind.SENT,
                campaign_id="c1",
                recipient_id=rid,
                message_id=message_id,
            )
        )

    # r0's Send event came twice (one event, redelivered); r1 was sent twice (two message
    # ids: a duplicate); r2's events never arrived.
    send_event("r0", sent["r0"], "e0")
    send_event("r0", sent["r0"], "e0-again")
    send_event("r1", sent["r1"], "e1")
    send_event("r1", "another-message", "e2")

    code, artefact, result = audit(system)
    text = sendonce(system, "campaign", "audit", "c1")

    findings = artefact["findings"]
    assert code == 5 and findings["proves_absence"] is False
    # r2 was sent seconds ago: its event may still come (an older one would be sent_unwitnessed).
    assert findings["recipients"] == {"duplicate": ["r1"], "after_listing": ["r2"]}
    assert findings["counts"]["sent_once"] == 1
    assert "proves nothing absent" in text.stdout


def test_the_api_audits_as_a_job_whose_result_names_the_duplicate_and_matches_the_cli(system):
    from sendonce.handlers import api
    from tests.integration.operator_helpers import api_event, lambda_context

    def call(method: str, path: str):
        response = api.lambda_handler(api_event(method, path, None), lambda_context(), service=system.operator)
        return response["statusCode"], json.loads(response["body"])

    people = run_campaign(system)
    plant_duplicate(system, people[2])

    status, job = call("POST", "/campaigns/c1/audit")
    # Without a jobs queue (as here) the job ran in the call; GET /jobs/{id} shows its result.
    _, shown = call("GET", f"/jobs/{job['job_id']}")
    _, artefact, _ = audit(system)

    assert status == 202 and job["kind"] == "audit" and shown["state"] == "done"
    result = shown["result"]
    assert result["clean"] is False and result["duplicates"] == ["r2"]
    assert result["counts"]["sent_once"] == 4 and result["counts"]["duplicate"] == 1
    assert result["digest"] == artefact["digest"]  # the same findings as the CLI's artefact
    assert call("POST", "/campaigns/nope/audit")[0] == 404
    # Read-only: nothing settled.
    assert states(system)["r2"] is DeliveryState.SENT
