"""How a campaign spec asks for its share of the provider's rate (issue 31): `weight`,
`priority` and `max_rate` as operator input — their types with the JSON schema they publish,
and the words their errors are given in. How campaigns sending at once divide the rate is
sending/shares.py; a `max_rate` above the provider's own rate is the campaign service's to
refuse (it knows the rates the deployment configures: no schema can say them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from sendonce.domain.deliverability.group_caps import CAP_LEAST, CAP_MOST
from sendonce.domain.sending.shares import MAX_WEIGHT, NORMAL_FLOOR

# A cap is stored as a DynamoDB number (1E-130 to 9.99E+125): these bounds keep it well inside,
# from one request every 1,000 s to the fastest any provider's settings allow.
MAX_RATE_LEAST = 0.001
MAX_RATE_MOST = 100_000


def _number(value: Any) -> Any:
    # JSON Schema's number: 2 and 2.0 are the same number; "2" and true are not numbers.
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError("not a number")
    return value


Weight = Annotated[
    Annotated[int, Field(ge=1, le=MAX_WEIGHT)],
    BeforeValidator(_number),
    Field(
        description=f"1-{MAX_WEIGHT}: the campaign's share of the provider's rate against the other campaigns of "
        "its priority sending at the same time (2 against 1: twice the rate). Default 1: equal shares.",
    ),
]
Priority = Annotated[
    Literal["normal", "high"],
    Field(
        description="high (a security notice, an outage message): served before every normal campaign, which keep "
        f"{NORMAL_FLOOR:.0%} of the rate between them so that none starves. Default normal.",
    ),
]
MaxRate = Annotated[
    Annotated[float, Field(ge=MAX_RATE_LEAST, le=MAX_RATE_MOST, allow_inf_nan=False)] | None,
    BeforeValidator(_number),
    Field(
        description="At most this many provider requests per second for this campaign (one email each in single "
        "mode, one batch of up to 100 in batch mode), however idle the others; not above the provider's configured "
        "rate (else 409 naming it). Default: no cap.",
    ),
]

# A cap on a mailbox-provider group (deliverability/group_caps.py), in emails per second.
GROUP_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,31}$"
PacingCap = Annotated[
    Annotated[float, Field(ge=CAP_LEAST, le=CAP_MOST, allow_inf_nan=False)],
    BeforeValidator(_number),
    Field(description=f"Emails per second to the group, {CAP_LEAST:g} to {CAP_MOST:,}."),
]

RULES = {
    "weight": f"must be a whole number from 1 to {MAX_WEIGHT} (the campaign's share against others of its priority)",
    "priority": "must be normal or high",
    "pacing": f"must map mailbox groups to caps from {CAP_LEAST:g} to {CAP_MOST:,} emails per second",
    "max_rate": f"must be a number from {MAX_RATE_LEAST:g} to {MAX_RATE_MOST:,} (provider requests per second)",
}


def share_rule(loc: Sequence[Any]) -> str | None:
    """The rule a sharing field of a spec broke, in our words; `loc` is the error's location,
    in a spec file (`weight`) or in the API's body (`body.weight`). None: not one of them."""
    if loc and str(loc[-1]) in RULES and (len(loc) == 1 or loc[-2] == "body"):
        return RULES[str(loc[-1])]
    return None
