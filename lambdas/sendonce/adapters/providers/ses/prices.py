"""What SES charges: per email on the AWS bill, under the account's pricing plan
(GetAccount's PricingAttributes.CurrentPlan). Sources and dates: docs/benchmarks.md,
"What a campaign costs"."""

from __future__ import annotations

from sendonce.adapters.providers.descriptor import Billing, Plan

PLANS = (
    Plan("none", 0.10, 0.0, "no pricing plan: $0.10 per 1,000 emails (the price before the plans)"),
    *(
        Plan(
            name,
            None,
            None,
            f"the {name.title()} plan (since 2026-07 for new accounts): its prices could not"
            " be confirmed offline; give them with --ses-price-per-1000 and --ses-plan-monthly-fee",
        )
        for name in ("essentials", "pro", "enterprise")
    ),
)

PRICE_SOURCES = (
    (
        "ses_email",
        "$0.10 per 1,000 emails (no pricing plan)",
        "aws.amazon.com/ses/pricing; shared/reference/providers.md ('the old $0.10 per 1,000', 2026-12)",
        "2026-12",
        False,
    ),
    (
        "ses_plan",
        "Essentials / Pro / Enterprise: per-email price and monthly fee",
        "plan names: botocore 1.44.8 "
        "sesv2 model (PricingPlan NONE, ESSENTIALS, PRO, ENTERPRISE; GetAccount.PricingAttributes); a price-list "
        "summary in providers.md (new accounts since 2026-07); figures not available offline",
        "2026-12",
        False,
    ),
)

BILLING = Billing(through_aws=True, plans=PLANS, price_list="aws.amazon.com/ses/pricing", price_sources=PRICE_SOURCES)
