"""The demo's campaign: the incident's content, and recipients generated from a seed."""

from __future__ import annotations

import random

from sendonce.domain.models import Campaign, Content, Recipient
from sendonce.domain.sending.shards import DEFAULT_LEDGER_SHARDS

DEFAULT_RECIPIENTS = 12_480
DEFAULT_SEED = 7
SENDER_DOMAIN = "example.com"  # the stack's default sender_domain
RECIPIENT_DOMAIN = "example.net"
# The calibration's recipients: addresses no demo campaign sends to.
CALIBRATION_DOMAIN = "calibration.example.net"
# The demo's campaigns spread their ledger over 16 partition-key values, not the deployed
# default's 256: 16 keys carry 12,480 recipients at up to ~2,600 a second (6 write units per
# recipient, 1,000 a key), far above the demo's ~100, and every whole-campaign step on moto
# (the counters' positions per ledger key and stream batch, the resume's pages, the audit's
# read) costs 16 queries or writes instead of 256. A real deployment keeps 256: a key per
# 1/256 of a campaign sent at 10,000 a second (docs/scale.md).
DEMO_LEDGER_SHARDS = 16
assert DEMO_LEDGER_SHARDS < DEFAULT_LEDGER_SHARDS

FIRST_NAMES = (
    "Ada", "Ben", "Chloe", "Dev", "Elif", "Femi", "Grace", "Hugo", "Ines", "Jon", "Kai", "Lena", "Mateo", "Nia",
    "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Xena", "Yusuf", "Zoe",
)  # fmt: skip
LAST_NAMES = (
    "Abara", "Berg", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Haddad", "Ito", "Jensen", "Kowalski",
    "Lopez", "Murphy", "Nakamura", "Okafor", "Petrov", "Quispe", "Rossi", "Silva", "Tanaka", "Uddin", "Varga",
    "Walsh", "Xu", "Yilmaz", "Zhang",
)  # fmt: skip


def demo_recipients(n: int, seed: int, *, domain: str = RECIPIENT_DOMAIN) -> list[Recipient]:
    """`n` distinct recipients, the same ones for the same seed."""
    rng = random.Random(seed)
    numbers = rng.sample(range(10_000_000), n)
    people = []
    for number in numbers:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        people.append(
            Recipient(
                recipient_id=f"cust-{number:07d}",
                email=f"{first}.{last}.{number:07d}@{domain}".lower(),
                variables={"first_name": first},
            )
        )
    return people


def demo_campaign(campaign_id: str, provider: str, delivery_mode: str) -> Campaign:
    return Campaign(
        campaign_id=campaign_id,
        name="Spring launch (incident replay)",
        provider=provider,
        delivery_mode=delivery_mode,
        ledger_shards=DEMO_LEDGER_SHARDS,
        sender=f"news@{SENDER_DOMAIN}",
        content=Content(
            subject="{{ first_name }}, the spring collection is here",
            html="<p>Hi {{ first_name }},</p><p>The spring collection is here.</p>",
            text="Hi {{ first_name }},\n\nThe spring collection is here.",
        ),
    )
