"""Unknown outcomes (list, reopen, resume --include-unknown), the suppression list service,
the suppressed settlement, and the deliverability settings, with fakes."""

from __future__ import annotations

import pytest

from sendonce.domain.campaigns.ports import StateChange
from sendonce.domain.campaigns.service import CampaignService
from sendonce.domain.campaigns.unknowns import UnknownOutcomes, unknowns_older_than
from sendonce.domain.deliverability.ports import EventKind, ProviderEvent, SuppressionReason
from sendonce.domain.deliverability.suppressions import SuppressionService, parse_import_lines
from sendonce.domain.errors import IllegalTransitionError, SettingsError, SuppressedError
from sendonce.domain.models import (
    BatchMessage,
    CampaignState,
    DeliveryKey,
    DeliveryRecord,
    DeliveryState,
    email_fingerprint,
)
from sendonce.domain.sending.delivery_tables import Verdict, classify
from sendonce.domain.sending.outcomes import settlement_for
from sendonce.settings import EventsSettings, UnsubscribeSettings
from tests.fakes import FakeClock, FakeLedgerEvents, FakeSuppressions
from tests.unit.helpers import World, recipients

NOW = 1_800_000_000_000


@pytest.fixture
def world() -> World:
    w = World(provider_name="ses")
    w.campaign(state=CampaignState.PAUSED)
    return w


def record(world: World, rid: str, state: DeliveryState, **extra) -> None:
    world.ledger.items[("c1", rid)] = DeliveryRecord(
        campaign_id="c1", recipient_id=rid, state=state, provider="ses", payload_hash="h", **extra
    )


def test_unknowns_are_listed_only_after_the_window(world):
    events = FakeLedgerEvents(world.ledger)
    record(world, "old", DeliveryState.UNKNOWN, maybe_sent_at_ms=NOW - 3_600_000)
    record(world, "new", DeliveryState.UNKNOWN, maybe_sent_at_ms=NOW - 60_000)
    record(world, "sent", DeliveryState.SENT)
    events.unknown_since_ms.update({("c1", "old"): NOW - 3_600_000, ("c1", "new"): NOW - 60_000})

    listed = unknowns_older_than(events, "c1", 900, now_ms=NOW)

    assert [u.recipient_id for u in listed] == ["old"]


def test_an_unknown_with_an_earlier_sent_event_is_resolved_not_listed(world):
    events = FakeLedgerEvents(world.ledger)
    # The Send event arrived while the consumer still held the delivery (in flight) ...
    record(world, "r1", DeliveryState.IN_FLIGHT)
    events.annotate(
        ProviderEvent(
            event_id="e1", provider="ses", kind=EventKind.SENT, campaign_id="c1", recipient_id="r1", message_id="ses-1"
        )
    )
    # ... and the consumer's successor then closed it as unknown.
    record(world, "r1", DeliveryState.UNKNOWN)

    assert unknowns_older_than(events, "c1", 0, now_ms=NOW) == []
    assert world.ledger.items[("c1", "r1")].state is DeliveryState.SENT


def test_reopen_moves_chosen_unknowns_to_pending_and_the_claim_rules_let_them_go(world):
    events = FakeLedgerEvents(world.ledger)
    for rid in ("r1", "r2", "r3"):
        record(world, rid, DeliveryState.UNKNOWN, maybe_sent_at_ms=NOW - 3_600_000)
    record(world, "r4", DeliveryState.SENT)
    outcomes = UnknownOutcomes(ledger_events=events, clock_ms=FakeClock(NOW), accept_possible_duplicates=True)

    report = outcomes.reopen("c1", recipient_ids=["r1", "r2", "r4"], by="alice")

    assert report.reopened == ["r1", "r2"] and report.skipped == ["r4"]
    reopened = world.ledger.items[("c1", "r1")]
    assert reopened.state is DeliveryState.PENDING and reopened.maybe_sent_at_ms is None
    assert classify(reopened, payload_hash="h", provider_idempotent=False, now_ms=NOW) is Verdict.CLAIM
    assert world.ledger.items[("c1", "r3")].state is DeliveryState.UNKNOWN  # not chosen: untouched


def test_without_accepting_duplicates_only_unknowns_proven_not_sent_are_reopened(world):
    events = FakeLedgerEvents(world.ledger)
    for rid in ("r1", "r2"):
        record(world, rid, DeliveryState.UNKNOWN, maybe_sent_at_ms=NOW - 3_600_000)
    events.prove_not_sent(DeliveryKey(campaign_id="c1", recipient_id="r2"), audit="audit-1")

    report = UnknownOutcomes(ledger_events=events, clock_ms=FakeClock(NOW)).reopen("c1", by="alice")
    named = UnknownOutcomes(ledger_events=events, clock_ms=FakeClock(NOW)).reopen(
        "c1", recipient_ids=["r1"], by="alice"
    )

    assert report.reopened == ["r2"] and named.reopened == [] and named.skipped == ["r1"]
    assert world.ledger.items[("c1", "r1")].state is DeliveryState.UNKNOWN


def test_resume_including_unknown_republishes_the_reopened_recipients(world):
    events = FakeLedgerEvents(world.ledger)
    service = CampaignService(campaigns=world.campaigns, ledger=world.ledger, queue=world.queue, provider_names=["ses"])
    people = recipients(3)
    world.campaigns.add_batch(BatchMessage(schema_version=1, campaign_id="c1", batch_id="b1", recipients=people))
    record(world, "r0", DeliveryState.SENT)
    record(world, "r1", DeliveryState.UNKNOWN)
    record(world, "r2", DeliveryState.SENT)
    world.campaigns.transition(
        "c1", StateChange(to=CampaignState.COMPLETED, allowed_from=(CampaignState.PAUSED,), by="sendonce")
    )

    events.prove_not_sent(DeliveryKey(campaign_id="c1", recipient_id="r1"), audit="audit-1")

    campaign, job, report = service.resume_including_unknown(
        "c1", UnknownOutcomes(ledger_events=events, clock_ms=FakeClock(NOW)), older_than_s=0
    )

    assert report.reopened == ["r1"] and job.progress["republished"] == 1
    assert campaign.state is CampaignState.SENDING
    published = BatchMessage.model_validate_json(world.queue.published[-1])
    assert [r.recipient_id for r in published.recipients] == ["r1"]


def test_a_cancelled_campaign_cannot_be_resumed_with_its_unknowns(world):
    events = FakeLedgerEvents(world.ledger)
    record(world, "r1", DeliveryState.UNKNOWN)
    world.campaigns.transition(
        "c1", StateChange(to=CampaignState.CANCELLED, allowed_from=(CampaignState.PAUSED,), by="operator")
    )
    service = CampaignService(campaigns=world.campaigns, ledger=world.ledger, queue=world.queue, provider_names=["ses"])

    with pytest.raises(IllegalTransitionError, match="cancelled"):
        service.resume_including_unknown("c1", UnknownOutcomes(ledger_events=events))
    assert world.ledger.items[("c1", "r1")].state is DeliveryState.UNKNOWN


# --- the suppressed settlement ------------------------------------------------------------


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_suppressed_recipient_settles_as_suppressed_never_maybe_sent(idempotent):
    settlement = settlement_for(SuppressedError("address suppressed (unsubscribed)"), provider_idempotent=idempotent)

    assert settlement.state is DeliveryState.SUPPRESSED and not settlement.maybe_sent
    assert settlement.error_class == "suppressed"


# --- suppression list service -----------------------------------------------------------


def test_add_is_idempotent_and_keeps_the_first_reason():
    fake = FakeSuppressions()
    service = SuppressionService(fake)

    first = service.add(["ann@example.com", "not-an-address"], reason=SuppressionReason.COMPLAINED)
    second = service.add(["ANN@example.com "], reason=SuppressionReason.MANUAL)

    assert (first.changed, first.invalid_lines, second.unchanged) == (1, [2], 1)
    assert service.check("ann@example.com").reason is SuppressionReason.COMPLAINED
    listed = list(service.list())
    assert [s.fingerprint for s in listed] == [email_fingerprint("ann@example.com")]


def test_remove_reports_what_was_there():
    service = SuppressionService(FakeSuppressions())
    service.add(["ann@example.com"])

    report = service.remove(["ann@example.com", "bob@example.com"])

    assert (report.changed, report.unchanged) == (1, 1)
    assert service.check("ann@example.com") is None


def test_import_reads_plain_lists_and_csv_with_reasons_and_reports_bad_lines_by_number():
    fake = FakeSuppressions()
    fake.add("old@example.com", SuppressionReason.BOUNCED, "ses:bounced")
    lines = [
        "email,reason",
        "ann@example.com,unsubscribed",
        "# a comment",
        "",
        "bob@example.com",
        "nonsense",
        "old@example.com,manual",
        "eve@example.com,whatever",
    ]

    report = SuppressionService(fake).import_lines(lines, reason=SuppressionReason.MANUAL)

    assert (report.changed, report.unchanged, report.invalid_lines) == (2, 1, [6, 8])
    assert fake.is_suppressed("ann@example.com").reason is SuppressionReason.UNSUBSCRIBED
    assert fake.is_suppressed("bob@example.com").reason is SuppressionReason.MANUAL
    assert fake.is_suppressed("old@example.com").reason is SuppressionReason.BOUNCED


def test_parse_import_lines_never_yields_an_invalid_address():
    parsed = list(parse_import_lines(["x@y", "ok@example.com"], SuppressionReason.MANUAL))

    assert parsed == [(1, None, SuppressionReason.MANUAL), (2, "ok@example.com", SuppressionReason.MANUAL)]


# --- settings ---------------------------------------------------------------------------


BASE = {
    "SENDONCE_LEDGER_TABLE": "ledger",
    "SENDONCE_CAMPAIGNS_TABLE": "campaigns",
    "SENDONCE_SUPPRESSIONS_TABLE": "supp",
}


def test_events_settings_defaults_and_refusals():
    settings = EventsSettings.from_env({**BASE, "SENDONCE_RESEND_WEBHOOK_SECRET": "sendonce/resend-webhook"})

    assert (settings.complaint_rate_threshold, settings.hard_bounce_rate_threshold, settings.brake_min_sent) == (
        0.001,
        0.05,
        100,
    )
    without_table = {k: v for k, v in BASE.items() if k != "SENDONCE_SUPPRESSIONS_TABLE"}
    for bad in (
        {**BASE, "SENDONCE_COMPLAINT_RATE_THRESHOLD": "0"},
        {**BASE, "SENDONCE_HARD_BOUNCE_RATE_THRESHOLD": "1.5"},
        {**BASE, "SENDONCE_BRAKE_MIN_SENT": "0"},
        without_table,
    ):
        with pytest.raises(SettingsError):
            EventsSettings.from_env(bad)


def test_unsubscribe_settings_need_the_key_secret():
    with pytest.raises(SettingsError, match="UNSUBSCRIBE_KEY_SECRET"):
        UnsubscribeSettings.from_env({"SENDONCE_SUPPRESSIONS_TABLE": "supp"})
