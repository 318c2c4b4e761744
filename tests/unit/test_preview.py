"""Preview, check and test sends (domain/campaigns/preview.py) with in-memory fakes: the email
is the consumer's own (`sender.compose`), variables are named, and a test send stays out of
the ledger's way: its own key namespace, no suppression writes, a few addresses per call,
the shared send rate, a record per call."""

from __future__ import annotations

import itertools

import pytest

from sendonce.domain import limits
from sendonce.domain.campaigns.preview import (
    TEST_HEADER,
    TEST_KEY_PREFIX,
    PreviewService,
    TestSendService,
    recipient_of,
)
from sendonce.domain.campaigns.recipients_file import RecipientReader
from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.deliverability.unsubscribe import UnsubscribeLinks, UnsubscribeTokens
from sendonce.domain.errors import InvalidCampaignError, RetryableProviderError
from sendonce.domain.models import Campaign, Content, DeliveryKey, Recipient, email_fingerprint
from sendonce.domain.sending.provider_call import compose
from sendonce.domain.sending.rendering import CompiledContent
from tests.fakes import FakeCampaignStore, FakeProvider, FakeSuppressions, FakeTestSendLog

KEY = b"k" * 32


def links() -> UnsubscribeLinks:
    return UnsubscribeLinks(UnsubscribeTokens([KEY]), "https://u.example.com")


def store(**content) -> FakeCampaignStore:
    campaigns = FakeCampaignStore()
    campaigns.create(
        Campaign(
            campaign_id="c1",
            name="Launch",
            provider="resend",
            sender="News <news@example.com>",
            content=Content(
                **{
                    "subject": "Hello {{ name }}",
                    "html": "<p>Hi {{ name }}, {{ city }}</p>",
                    "text": "Hi {{ name }}",
                    **content,
                }
            ),
        )
    )
    return campaigns


class Limiter:
    def __init__(self, grant: bool = True):
        self.grant = grant
        self.acquired: list[str] = []
        self.throttles: list[str] = []

    def acquire(self, provider, *, deadline=None):
        self.acquired.append(provider)
        return self.grant

    def throttled(self, provider):
        self.throttles.append(provider)

    def observed_limit(self, provider, limit_per_s):
        pass

    def exhausted(self, provider, *, reset_s):
        pass


def make_service(campaigns=None, **overrides):
    parts = {
        "campaigns": campaigns or store(),
        "providers": {"resend": FakeProvider("resend")},
        "log": FakeTestSendLog(),
        "limiter": Limiter(),
        "suppressions": FakeSuppressions(),
        "unsubscribe": links(),
        "sleep": lambda s: None,
        "new_id": iter(f"{i:032x}" for i in itertools.count(1)).__next__,
        **overrides,
    }
    return TestSendService(**parts), parts


# --- preview --------------------------------------------------------------------------


def test_preview_is_the_consumers_email_with_its_unsubscribe_headers():
    campaigns = store()
    recipient = Recipient(recipient_id="r1", email="ann@example.com", variables={"name": "Ann", "city": "<Oslo>"})

    preview = PreviewService(campaigns=campaigns, unsubscribe=links()).preview("c1", recipient)

    # The consumer's own composition, byte for byte.
    sent = compose(campaigns.get("c1"), CompiledContent(campaigns.get("c1").content), recipient, "k", links())
    assert preview.ok and (preview.missing, preview.unused) == ([], [])
    assert (preview.subject, preview.html, preview.text) == (sent.subject, sent.html, sent.text)
    assert preview.html == "<p>Hi Ann, &lt;Oslo&gt;</p>"
    assert preview.headers == sent.headers
    assert preview.headers["List-Unsubscribe"].startswith("<https://u.example.com/u/v1.c1.r1.")
    assert preview.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"


def test_preview_names_the_missing_and_the_unused_variables():
    preview = PreviewService(campaigns=store(), unsubscribe=None).preview(
        "c1", recipient_of({"name": "Ann", "nmae": "typo"})
    )

    assert not preview.ok
    assert preview.missing == ["city"] and preview.unused == ["nmae"]
    assert "'city' is undefined" in preview.error and "lacks: city" in preview.error
    assert preview.subject is None and not preview.unsubscribe_configured


def test_a_variable_guarded_in_the_template_is_missing_but_renders():
    campaigns = store(html="<p>{% if city is defined %}{{ city }}{% endif %}</p>", text=None)

    preview = PreviewService(campaigns=campaigns).preview("c1", recipient_of({"name": "Ann"}))

    assert preview.ok and preview.missing == ["city"] and preview.html == "<p></p>"


def test_bad_variables_are_refused_by_name():
    with pytest.raises(InvalidCampaignError, match=r"variables\.name"):
        recipient_of({"name": {"nested": 1}})


def test_check_reports_each_failing_row_by_line():
    lines = [
        "recipient_id,email,name,city\n",
        "r1,ann@example.com,Ann,Oslo\n",
        "r2,bob@example.com,Bob,\n",  # an empty city renders: not a failure
        "r3,not-an-address,Cy,Rome\n",
        "r1,ann@example.com,Ann,Oslo\n",
    ]
    jsonl = [
        '{"recipient_id": "r1", "email": "ann@example.com", "variables": {"name": "Ann", "city": "Oslo"}}\n',
        '{"recipient_id": "r2", "email": "bob@example.com", "variables": {"name": "Bob", "zip": "1"}}\n',
    ]
    service = PreviewService(campaigns=store(), unsubscribe=links())

    csv_report = service.check("c1", RecipientReader(lines, "csv", name="people.csv"))
    jsonl_report = service.check("c1", RecipientReader(jsonl, "jsonl", name="people.jsonl"))

    assert (csv_report.checked, csv_report.failed, csv_report.duplicates) == (2, 1, 1)
    assert [(p.line, p.problem) for p in csv_report.problems] == [(4, "email: not a valid email address")]
    assert (jsonl_report.checked, jsonl_report.failed) == (2, 1)
    [problem] = jsonl_report.problems
    assert (problem.line, problem.recipient_id) == (2, "r2") and "'city' is undefined" in problem.problem
    assert jsonl_report.unused == {"zip"}


# --- test sends -----------------------------------------------------------------------


def test_a_test_send_is_marked_keyed_in_its_own_namespace_and_recorded_by_fingerprint():
    service, parts = make_service()

    record = service.send(
        "c1", ["me@example.com", "You@example.com"], variables={"name": "Ann", "city": "Oslo"}, by="ann"
    )

    provider = parts["providers"]["resend"]
    assert [e.to for e in provider.accepted] == ["me@example.com", "You@example.com"]
    real_keys = DeliveryKey(campaign_id="c1", recipient_id="r1").idempotency_key.rsplit(":", 1)[0] + ":"
    for email in provider.accepted:
        assert email.subject == "[TEST] Hello Ann"
        assert email.headers[TEST_HEADER] == "1" and email.headers["List-Unsubscribe-Post"]
        assert email.idempotency_key.startswith(f"{TEST_KEY_PREFIX}:c1:")
        assert not email.idempotency_key.startswith(real_keys)  # no real delivery's key is ever used
        assert "recipient_id" not in email.tags  # a provider event about it matches no delivery
    assert len({e.idempotency_key for e in provider.accepted}) == 2
    assert parts["limiter"].acquired == ["resend", "resend"]
    assert parts["log"].entries == [record]
    assert record.by == "ann" and record.sent == 2 and record.subject == "[TEST] Hello Ann"
    assert [o.email_fingerprint for o in record.outcomes] == [
        email_fingerprint("me@example.com"),
        email_fingerprint("you@example.com"),
    ]
    assert "example.com" not in record.model_dump_json()  # no address in the record


def test_two_test_sends_to_one_address_use_two_keys():
    service, parts = make_service()
    variables = {"name": "Ann", "city": "Oslo"}

    service.send("c1", ["me@example.com"], variables=variables, by="ann")
    service.send("c1", ["me@example.com"], variables=variables, by="ann")

    provider = parts["providers"]["resend"]
    assert provider.deliveries()["me@example.com"] == 2
    assert service.recent("c1")[1] == 2


def test_a_suppressed_address_is_refused_unless_included_and_nothing_is_sent():
    suppressions = FakeSuppressions()
    suppressions.add("gone@example.com", SuppressionReason.UNSUBSCRIBED, "campaign:c0")
    service, parts = make_service(suppressions=suppressions)
    variables = {"name": "Ann", "city": "Oslo"}

    with pytest.raises(InvalidCampaignError, match=r"to\[1\] \(unsubscribed") as refused:
        service.send("c1", ["me@example.com", "gone@example.com"], variables=variables, by="ann")
    assert "gone@" not in str(refused.value)
    assert parts["providers"]["resend"].accepted == [] and parts["log"].entries == []

    record = service.send(
        "c1", ["me@example.com", "gone@example.com"], variables=variables, by="ann", include_suppressed=True
    )
    assert record.sent == 2 and record.outcomes[1].suppressed.startswith("unsubscribed")
    assert suppressions.reasons() == {email_fingerprint("gone@example.com"): "unsubscribed"}  # unchanged


def test_at_most_a_few_addresses_per_call():
    service, parts = make_service()
    many = [f"me{i}@example.com" for i in range(limits.TEST_SEND_ADDRESSES + 1)]

    with pytest.raises(InvalidCampaignError, match=f"at most {limits.TEST_SEND_ADDRESSES}"):
        service.send("c1", many, variables={"name": "A", "city": "B"}, by="ann")
    # The same address twice is one address.
    record = service.send("c1", ["me@example.com", "ME@example.com "], variables={"name": "A", "city": "B"}, by="ann")

    assert len(record.outcomes) == 1 and len(parts["providers"]["resend"].accepted) == 1


@pytest.mark.parametrize(
    ("to", "variables", "message"),
    [
        (["nobody"], {"name": "A", "city": "B"}, r"to\[0\]: not a valid email address"),
        ([], {}, "at least one address"),
        (["me@example.com"], {"name": "A"}, "variables: .*'city' is undefined"),
    ],
)
def test_bad_input_is_refused_before_anything_is_sent(to, variables, message):
    service, parts = make_service()

    with pytest.raises(InvalidCampaignError, match=message):
        service.send("c1", to, variables=variables, by="ann")

    assert parts["providers"]["resend"].calls == 0 and parts["log"].entries == []


def test_a_provider_not_configured_here_is_named():
    service, _ = make_service(providers={"ses": FakeProvider("ses", idempotent=False)})

    with pytest.raises(InvalidCampaignError, match="'resend', which is not configured here"):
        service.send("c1", ["me@example.com"], variables={"name": "A", "city": "B"}, by="ann")


def test_the_shared_rate_is_kept_and_a_throttle_slows_everyone():
    provider = FakeProvider("resend")
    provider.script["me@example.com"] = [RetryableProviderError("slow down", throttled=True)]
    service, parts = make_service(providers={"resend": provider})

    record = service.send("c1", ["me@example.com"], variables={"name": "A", "city": "B"}, by="ann")

    assert record.sent == 1
    assert parts["limiter"].acquired == ["resend", "resend"] and parts["limiter"].throttles == ["resend"]

    full, parts = make_service(limiter=Limiter(grant=False))
    refused = full.send("c1", ["me@example.com"], variables={"name": "A", "city": "B"}, by="ann")
    assert refused.sent == 0 and "shared send rate" in refused.outcomes[0].error
    assert parts["providers"]["resend"].calls == 0 and parts["log"].entries == [refused]
