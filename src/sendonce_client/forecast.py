"""The forecast as the client returns it (`Client.forecast`): the API's answer (an inline
list's, or a `forecast_s3` job's result), typed, and priced here.

The API does not price it: `sendonce cost`'s model (sendonce_ops/cost/: list prices and the
write units bench-scale measured, ~1,000 lines and a JSON capture) is the operator tooling's,
not shipped to Lambda. The answer carries what the model needs (audience, provider,
delivery_mode) and the client, installed with that tooling, prices it as `campaign forecast`
does (`audience_cost`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ForecastResult:
    """Who a list would reach and when the send would end (docs/api.md, the forecast route)."""

    campaign_id: str
    provider: str
    delivery_mode: str
    rows_read: int
    bad_rows: int
    repeated_ids: int
    duplicate_addresses: int
    dedupe_addresses: bool
    suppressed: int
    suppressions_checked: bool
    audience: int
    groups: dict[str, int]
    rate: float  # provider requests/s at its start, shared as now
    recipients_per_request: int
    recipients_per_s: float
    campaigns_sharing: int
    starts_at: str
    ends_at: str | None  # None: never (no rate, or its send window never opens)
    eta_s: float | None
    not_applied: list[str]
    problems: list[str]  # the first 100 reported rows: "recipients.N: reason" or "LINE: reason"
    exact: bool  # False: an S3 file counted in ranges (audience an upper bound; docs/api.md)
    group_caps: dict[str, float] | None = None  # caps per mailbox group applying (emails/s)
    bound_by: str | None = None  # what the ETA follows: "rate", "<group> cap" or "warm-up"
    warmup_days: int | None = None  # days of the sending domain's ramp the audience needs
    warmup_left_today: int | None = None
    cost: dict[str, Any] | None = None  # sendonce cost's model: aws_total, per_1000_recipients, note
    job_id: str | None = None  # the forecast_s3 job that counted an S3 object
    extra: dict[str, Any] = field(default_factory=dict)  # what else the answer held (lines, parts, ...)

    @classmethod
    def of(cls, answer: Mapping[str, Any], *, job_id: str | None = None, price: bool = True) -> ForecastResult:
        """From the API's answer; priced with `sendonce cost`'s model unless `price` is False."""
        names = {f.name for f in dataclasses.fields(cls)} - {"cost", "job_id", "extra"}
        known = {name: answer[name] for name in names if name in answer}
        result = cls(
            **{name: known.get(name) for name in names},  # type: ignore[arg-type]
            job_id=job_id,
            extra={k: v for k, v in answer.items() if k not in names},
        )
        return dataclasses.replace(result, cost=priced(result)) if price else result

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def priced(result: ForecastResult) -> dict[str, Any]:
    """The forecast's cost, as `sendonce campaign forecast` shows it."""
    from sendonce_ops.cost.model import audience_cost  # the operator tooling's; imported when used

    return audience_cost(result.audience, result.provider, result.delivery_mode)


def s3_source(s3: Mapping[str, str] | str) -> dict[str, str]:
    """The body's `s3` from {"bucket", "key", "format"?} or "s3://bucket/key"."""
    if isinstance(s3, str):
        bucket, _, key = s3.removeprefix("s3://").partition("/")
        if not s3.startswith("s3://") or not bucket or not key:
            raise ValueError(f"not an S3 location s3://bucket/key: {s3!r}")
        return {"bucket": bucket, "key": key}
    return {name: value for name, value in s3.items() if value is not None}
