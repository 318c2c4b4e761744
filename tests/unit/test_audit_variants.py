"""The audit of an A/B campaign (issue 33) over in-memory fakes: each variant's emails carry
their variant's subject, and Resend's listing gives no tags, so an email is the campaign's by
its sender and a subject one of the variants' templates can render. Found by the A/B
acceptance test (tests/integration/test_ab_end_to_end.py), where every recipient sent B was
reported missing."""

from __future__ import annotations

from sendonce.domain.audit.service import CampaignAudit
from sendonce.domain.campaigns.variants import AbTest, Variant
from sendonce.domain.models import Campaign, Content, DeliveryState
from tests.fakes import FakeLedger, FakeLedgerEvents
from tests.unit.test_campaign_audit import NOW_MS, START_MS, Records, email, iso, older, record

CONTENT = Content(
    subject="[A] Spring is here, {{ name }}",  # the spec's default: the first variant's
    text="Hi {{ name }}",
    variants=(
        Variant(id="A", subject="[A] Spring is here, {{ name }}"),
        Variant(id="B", subject="[B] {{ name }}, 20% off this week"),
    ),
)


class AbCampaigns:
    """The campaign with its content on `get` and from `content`, whichever the audit reads."""

    def get(self, campaign_id: str) -> Campaign:
        return Campaign(
            campaign_id=campaign_id,
            name="n",
            provider="resend",
            sender="News <news@example.com>",
            created_at=iso(START_MS),
            content=CONTENT,
            ab_test=AbTest(variants=("A", "B"), share=0.2, pick_by="opens", after_s=3_600),
        )

    def content(self, campaign_id: str) -> Content:
        return CONTENT


def test_each_variants_emails_are_the_campaigns_and_each_recipient_sent_one_is_sent_once():
    # Given r1 sent variant A and r2 variant B (the winner, or its test variant), once each
    ledger = FakeLedger()
    record(ledger, "r1", DeliveryState.SENT)
    record(ledger, "r2", DeliveryState.SENT)
    records = Records(
        [
            email("r1", subject="[A] Spring is here, User 1"),
            email("r2", subject="[B] User 2, 20% off this week"),
            older(),
        ]
    )
    audit = CampaignAudit(
        campaigns=AbCampaigns(),
        ledger=ledger,
        ledger_events=FakeLedgerEvents(ledger),
        records=records,
        clock_ms=lambda: NOW_MS,
    )

    result = audit.run("c1")

    assert (result.counts["sent_once"], result.counts["missing"], result.clean) == (2, 0, True)
    assert result.retrieves == 0  # matched by address, sender, subject and window
