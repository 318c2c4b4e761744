"""Caps per mailbox-provider group (issue 32, item 1), with fakes: the tables as data, what
bad input is told, send groups that never mix groups, the consumer asking the caps for
every request, and deferrals slowing their group."""

from __future__ import annotations

import json
import re

import pytest

from sendonce.domain.campaigns.spec import CampaignSpec
from sendonce.domain.deliverability.group_caps import (
    GroupPacing,
    PacingError,
    is_deferral,
    parse_pacing,
    send_group_size,
)
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups
from sendonce.domain.deliverability.ports import EventKind
from sendonce.domain.deliverability.provider_events import ProviderEventService
from sendonce.domain.errors import ConflictingRequestError, RetryableProviderError, SettingsError
from sendonce.domain.models import Campaign, Content, Recipient
from sendonce.settings import ConsumerSettings
from sendonce_cdk.config import SendonceConfig
from sendonce_cdk.context_values import ConfigError
from tests.fakes import FakeCampaignStore, FakeLedger, FakeLedgerEvents, FakeSuppressions, ses_event
from tests.unit.helpers import FakeGroupCaps, World, batch

# --- the tables and their refusals --------------------------------------------------------


def test_caps_name_known_groups_and_refuse_anything_else_naming_the_field():
    groups = MailboxGroups().extended({"comcast": ["comcast.net"]})

    assert parse_pacing({"google": 40, "comcast": 2.5}, groups) == {"google": 40.0, "comcast": 2.5}
    for bad, says in [
        ({"gogle": 40}, "pacing.gogle: unknown mailbox group"),
        ({"google": 0}, "pacing.google: a cap of 0 emails/s"),
        ({"google": -1}, "pacing.google: a cap of -1"),
        ({"google": "fast"}, "pacing.google: 'fast' is not a number"),
        ({"google": True}, "pacing.google: True is not a number"),
        ([40], "pacing: expected a mapping"),
    ]:
        with pytest.raises(PacingError, match=says.replace(".", r"\.")):
            parse_pacing(bad, groups)


def test_the_tightest_cap_applies_and_a_group_without_one_is_uncapped():
    pacing = GroupPacing(caps={"google": 40, "yahoo": 10})

    assert pacing.cap("google") == 40 and pacing.cap("google", {"google": 15}) == 15
    assert pacing.cap("yahoo", {"yahoo": 30}) == 10
    assert pacing.cap("microsoft") is None and pacing.cap("microsoft", {"microsoft": 5}) == 5
    assert (send_group_size(None), send_group_size(40), send_group_size(3), send_group_size(1000)) == (100, 20, 1, 100)


def test_send_groups_never_mix_mailbox_groups_and_follow_the_tightest_cap():
    people = [f"u{i}@gmail.com" if i % 2 else f"u{i}@hotmail.co.uk" for i in range(30)] + ["x@corp.example"]
    pacing = GroupPacing(caps={"google": 20})

    groups = pacing.send_groups(people, lambda a: a)

    assert [len(g) for g in groups] == [15, 10, 5, 1]  # hotmail (uncapped), then google by 10
    assert all(len({pacing.group_of(a) for a in g}) == 1 for g in groups)
    assert groups == pacing.send_groups(people, lambda a: a)  # the same members: the same groups
    assert GroupPacing().send_groups(people, lambda a: a) == [people]  # no cap anywhere: one group
    assert [len(g) for g in GroupPacing().send_groups(people, lambda a: a, {"microsoft": 8})] == [4] * 3 + [3, 15, 1]


def test_a_deferral_is_a_rate_limit_code_or_a_delay_without_reason():
    assert is_deferral(EventKind.BOUNCED, hard=False, detail="Transient General 4.7.28")
    assert is_deferral(EventKind.DELIVERY_DELAYED, hard=False, detail="RecipientServerError 4.7.0 TSS04")
    assert is_deferral(EventKind.DELIVERY_DELAYED, hard=False, detail=None)  # Resend's: no reason given
    assert not is_deferral(EventKind.DELIVERY_DELAYED, hard=False, detail="MailboxFull 4.2.2")
    assert not is_deferral(EventKind.BOUNCED, hard=True, detail="Permanent General 5.1.1")
    assert not is_deferral(EventKind.COMPLAINED, hard=False, detail="abuse")


def test_settings_refuse_bad_groups_and_caps_at_cold_start_naming_them():
    base = {
        "SENDONCE_LEDGER_TABLE": "ledger",
        "SENDONCE_CAMPAIGNS_TABLE": "campaigns",
        "SENDONCE_DEAD_LETTER_QUEUE_URL": "http://dlq",
    }
    settings = ConsumerSettings.from_env({**base, "SENDONCE_PACING": '{"google": 40}'})
    assert settings.group_pacing.caps == {"google": 40.0} and hash(settings)
    for variable, value, says in [
        ("SENDONCE_PACING", '{"google": 0}', "pacing.google: a cap of 0"),
        ("SENDONCE_PACING", '{"gmail": 4}', "pacing.gmail: unknown mailbox group"),
        ("SENDONCE_PACING", "{google: 4}", "SENDONCE_PACING: Value error, not JSON"),
        ("SENDONCE_MAILBOX_GROUPS", '{"google": ["hotmail.*"]}', "'hotmail.*' is already in group 'microsoft'"),
        ("SENDONCE_MAILBOX_GROUPS", '{"corp": 5}', "mailbox_groups: expected {group: [domain patterns]}"),
    ]:
        with pytest.raises(SettingsError, match=re.escape(says)):
            ConsumerSettings.from_env({**base, variable: value})


def test_the_construct_refuses_bad_groups_and_caps_before_a_deploy():
    config = SendonceConfig.from_context(
        {"pacing": {"google": 40, "corp": 5}, "mailbox_groups": {"corp": ["corp.example"]}}
    )
    assert json.loads(config.pacing_settings["pacing"]) == {"corp": 5, "google": 40}
    with pytest.raises(ConfigError, match=r"pacing\.google: a cap of 0"):
        SendonceConfig.from_context({"pacing": {"google": 0}})
    with pytest.raises(ConfigError, match="pacing: not JSON"):
        SendonceConfig.from_context({"pacing": "{google"})


def test_a_campaign_caps_only_groups_the_deployment_knows():
    spec = {"id": "c1", "name": "n", "subject": "s", "from": "a@example.com", "text": "t", "provider": "resend"}
    assert CampaignSpec.model_validate({**spec, "pacing": {"google": 40}}).to_campaign().pacing == {"google": 40}
    for bad in ({"google": 0}, {"Google": 4}, {"google": "4"}):
        with pytest.raises(ValueError, match="pacing"):
            CampaignSpec.model_validate({**spec, "pacing": bad})
    world = World()
    with pytest.raises(ConflictingRequestError, match="pacing.corp: unknown mailbox group"):
        world_service(world).create(_campaign(pacing={"corp": 4}))
    known = GroupPacing(groups=MailboxGroups().extended({"corp": ["corp.example"]}))
    assert world_service(world, group_pacing=lambda: known).create(_campaign(pacing={"corp": 4})).pacing == {"corp": 4}


# --- the consumer asks the caps for each request -----------------------------------------------


def test_one_by_one_each_send_to_a_capped_group_takes_one_place_of_it():
    world, caps = World(), FakeGroupCaps()
    world.campaigns.campaigns["c1"] = _campaign(pacing={"google": 3})
    people = [Recipient(recipient_id=f"r{i}", email=f"u{i}@gmail.com", variables={}) for i in range(2)]
    people.append(Recipient(recipient_id="r9", email="u9@example.com", variables={}))
    service = world.service(group_caps=caps, pacing=GroupPacing(caps={"yahoo": 50}))

    report = world.process(batch(people=people), service=service)

    assert report.sent == 3
    assert sorted((p.group, p.count, p.cap, p.campaign_cap) for p in caps.asked) == [("google", 1, None, 3)] * 2


def test_no_place_under_the_cap_before_the_time_budget_ends_returns_the_recipient_unsent():
    world, caps = World(), FakeGroupCaps(refuse=True)
    world.campaign()

    report = world.process(batch(n=2), service=world.service(group_caps=caps, pacing=GroupPacing(caps={"other": 1})))

    assert report.sent == 0 and report.returning == 2 and report.must_return
    assert world.provider.deliveries() == {}


def test_a_throttled_request_to_a_capped_group_slows_that_group():
    world, caps = World(), FakeGroupCaps()
    world.campaign()
    world.provider.script["user0@example.com"] = [RetryableProviderError("429", throttled=True)]

    report = world.process(batch(n=1), service=world.service(group_caps=caps, pacing=GroupPacing(caps={"other": 5})))

    assert report.sent == 1 and caps.deferrals == ["other"]


def test_without_caps_the_consumer_never_asks():
    world, caps = World(), FakeGroupCaps()
    world.campaign()

    assert world.process(batch(n=3), service=world.service(group_caps=caps)).sent == 3
    assert caps.asked == []


# --- deferrals slow their group ------------------------------------------------------------------


def test_a_deferral_event_slows_the_group_of_its_address_once():
    ledger = FakeLedger()
    campaigns = FakeCampaignStore()
    campaigns.campaigns["c1"] = _campaign()
    caps = FakeGroupCaps()
    from sendonce.adapters.providers.descriptor import event_readers
    from sendonce.adapters.providers.registry import registered
    from sendonce.domain.models import DeliveryRecord, DeliveryState

    ledger.items[("c1", "r1")] = DeliveryRecord(
        campaign_id="c1", recipient_id="r1", state=DeliveryState.SENT, provider="ses", provider_message_id="m-1"
    )
    service = ProviderEventService(
        ledger_events=FakeLedgerEvents(ledger),
        suppressions=FakeSuppressions(),
        campaigns=campaigns,
        event_readers=event_readers(registered()),
        group_caps=caps,
    )
    delay = ses_event("delivery_delay", email="someone@gmail.com")
    delay["detail"]["deliveryDelay"]["delayedRecipients"][0]["diagnosticCode"] = (
        "smtp; 421-4.7.28 [1.2.3.4] Our system has detected an unusual rate of unsolicited mail someone@gmail.com"
    )

    first = service.handle_event("aws.ses", delay)
    again = service.handle_event("aws.ses", delay)  # the same event redelivered

    assert first.deferred_groups == ("google",) and again.deferred_groups == ()
    assert caps.deferrals == ["google"]
    parsed = event_readers(registered())["aws.ses"].read(delay)
    assert parsed is not None and "4.7.28" in (parsed.detail or "") and "@" not in (parsed.detail or "")
    timeout = ses_event("delivery_delay", email="other@gmail.com", recipient_id="r1", message_id="m-2")
    assert service.handle_event("aws.ses", timeout).deferred_groups == ()  # 4.4.1: a timeout, not a rate limit


def _campaign(**fields) -> Campaign:
    return Campaign(
        campaign_id="c1",
        name="Launch",
        provider="resend",
        sender="news@example.com",
        content=Content(subject="Hi", text="Hi"),
        state=fields.pop("state", "sending"),
        **fields,
    )


def world_service(world: World, **options):
    from sendonce.domain.campaigns.service import CampaignService

    return CampaignService(
        campaigns=FakeCampaignStore(),
        ledger=world.ledger,
        queue=world.queue,
        provider_names=["resend", "ses"],
        **options,
    )
