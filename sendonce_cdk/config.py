"""Deployment settings read from CDK context, with defaults so a bare `cdk synth` works.

Everything sized from these values (function timeout, visibility timeout, event source
concurrency) is derived here, once, so the stack, the tests and docs/deploy.md agree.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from sendonce.domain.deliverability import feedback_id
from sendonce.settings import PacingSettings
from sendonce_cdk.context_values import ConfigError, number
from sendonce_cdk.providers.base import ProviderStack
from sendonce_cdk.providers.registry import context_defaults, registered

REMOVAL_POLICIES = ("retain", "destroy")

# One SQS message (a batch) holds at most this many recipients (docs/messages.md).
RECIPIENTS_PER_BATCH = 100
# SQS redrive: a message is moved to the DLQ on its 6th receive. AWS recommends >= 5
# because a throttled or timed-out invocation also counts as a receive.
MAX_RECEIVE_COUNT = 5
# Budgets in the function-timeout arithmetic (see `function_timeout_seconds`).
THROTTLE_BACKOFF_BUDGET_SECONDS = 20
LEDGER_WRITES_BUDGET_SECONDS = 5
SAFETY_MARGIN_SECONDS = 15
LAMBDA_MAX_TIMEOUT_SECONDS = 900
# AWS bounds for an SQS event source's MaximumConcurrency.
MAX_CONCURRENCY_BOUNDS = (2, 1000)
# Flood protection (docs/operations.md#flood-protection). Lambda refuses a reservation that
# leaves the account fewer than 100 unreserved concurrent executions.
LAMBDA_MIN_UNRESERVED = 100
# API Gateway's default account-level throttle per region: a route limit above it never binds.
API_RATE_LIMIT_MAX, API_BURST_LIMIT_MAX = 10_000, 5_000
# The events function's share, sized from the send rate: about 3 provider events per email
# (sent, delivered, now and then a bounce or complaint), ~50 ms each (one or two
# conditional DynamoDB writes), x2 headroom, at least 10.
EVENTS_PER_EMAIL = 3
EVENT_SECONDS = 0.05
EVENTS_HEADROOM = 2
MIN_EVENTS_RESERVED = 10
AGGREGATOR_RESERVED = 10
# The jobs worker (resume, cancel: an operator's, a handful at once; sendonce_cdk/jobs.py).
JOBS_RESERVED = 5
# The account health check (one per provider with an account to read; sendonce_cdk/account_health.py):
# one check at a time, every few minutes.
ACCOUNT_HEALTH_RESERVED = 1
S3_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")

# The context keys every deployment has; each provider adds its own (sendonce_cdk/providers/).
COMMON_DEFAULTS: dict[str, Any] = {
    "stack_name": "Sendonce",
    # The registered providers to deploy, comma-separated; the first registered is the default.
    "provider": next(iter(registered())),
    "sender_domain": "example.com",
    "unsubscribe_key_secret_name": "sendonce/unsubscribe-key",
    # Without it the consumer sends no List-Unsubscribe header (docs/deploy.md).
    "unsubscribe_base_url": None,
    # The Feedback-ID header every email carries, <campaign>:<stream>:<customer>:<sender_id>
    # (docs/deliverability.md#feedback-id): the SenderId stays the same across the deployment.
    "feedback_id_sender_id": feedback_id.DEFAULT_SENDER_ID,
    "feedback_id_stream": feedback_id.DEFAULT_STREAM,
    "feedback_id_customer": "",
    # Mailbox-provider groups added to the default table ({"comcast": ["comcast.net"]}) and caps
    # per group in emails/s ({"google": 40}), for every campaign (docs/deliverability.md): a
    # mapping, or its JSON text (cdk.json, -c).
    "mailbox_groups": None,
    "pacing": None,
    # Warm-up ramps per sending domain, {"example.com": {"start": "2026-12-07", "daily": [500, 1000]}}
    # or {..., "ramp": "double-from-500"} (docs/deliverability.md#warm-up): a mapping or its JSON text.
    "warmup": None,
    # The bucket operators publish recipient files from (the operator API's s3:GetObject).
    "recipients_bucket": None,
    "oncall_email": None,
    "oncall_https_url": None,
    "send_rate": 14.0,
    "send_concurrency": 8,
    "provider_timeout_seconds": 10,
    "provider_latency_ms": 250,
    "batch_size": 1,
    "max_concurrency": None,
    "queue_age_alarm_minutes": 30,
    "removal_policy": "retain",
    # Public API throttling per route (requests/s, burst), docs/operations.md#flood-protection.
    "unsubscribe_rate_limit": 50,
    "unsubscribe_burst_limit": 100,
    "webhook_rate_limit": 100,
    "webhook_burst_limit": 200,
    # Reserved concurrency: the consumer's is its event source's max_concurrency; the
    # events function's is derived from send_rate unless set.
    "events_reserved_concurrency": None,
    "unsubscribe_reserved_concurrency": 10,
    "api_reserved_concurrency": 10,
    # The account's Lambda concurrency quota (1,000 unless raised): what the reservations
    # are checked against, before a deploy fails on them.
    "account_concurrency": 1000,
}
DEFAULTS: dict[str, Any] = {**COMMON_DEFAULTS, **context_defaults(registered())}


@dataclass(frozen=True, kw_only=True)
class SendonceConfig:
    stack_name: str
    providers: tuple[str, ...]
    sender_domain: str
    unsubscribe_key_secret_name: str
    unsubscribe_base_url: str | None
    feedback_id_sender_id: str
    feedback_id_stream: str
    feedback_id_customer: str
    mailbox_groups: str  # JSON text ("" for none), as the functions' settings take it
    pacing: str
    warmup: str
    recipients_bucket: str | None
    oncall_email: str | None
    oncall_https_url: str | None
    send_rate: float
    send_concurrency: int
    provider_timeout_seconds: int
    provider_latency_ms: int
    batch_size: int
    max_concurrency_override: int | None
    queue_age_alarm_minutes: int
    removal_policy: str
    unsubscribe_rate_limit: int
    unsubscribe_burst_limit: int
    webhook_rate_limit: int
    webhook_burst_limit: int
    events_reserved_concurrency_override: int | None
    unsubscribe_reserved_concurrency: int
    api_reserved_concurrency: int
    account_concurrency: int
    # The registered providers' context values, by key (`provider_value`), and their CDK
    # needs by name (those in `providers` are deployed).
    provider_context: tuple[tuple[str, Any], ...] = ()
    provider_stacks: Mapping[str, ProviderStack] = field(default_factory=registered, compare=False, repr=False)

    @classmethod
    def from_context(
        cls, get: Callable[[str], Any] | Mapping[str, Any], *, providers: Mapping[str, ProviderStack] | None = None
    ) -> SendonceConfig:
        """Build from `node.try_get_context` (or a plain mapping); unknown keys are ignored.
        `providers`: the registry to read (default: sendonce_cdk.providers.registry's)."""
        lookup = get.get if isinstance(get, Mapping) else get
        stacks = dict(providers if providers is not None else registered())
        defaults = {**COMMON_DEFAULTS, **context_defaults(stacks)}

        def value(key: str) -> Any:
            raw = lookup(key)
            return defaults[key] if raw is None or raw == "" else raw

        def whole(key: str) -> int:
            return number(value(key), key, int)

        provider_context: dict[str, Any] = {}
        for stack in stacks.values():
            provider_context.update(stack.parse_context(value))
        config = cls(
            stack_name=str(value("stack_name")),
            providers=_providers(value("provider"), tuple(stacks)),
            provider_context=tuple(provider_context.items()),
            provider_stacks=stacks,
            sender_domain=str(value("sender_domain")),
            unsubscribe_key_secret_name=str(value("unsubscribe_key_secret_name")),
            unsubscribe_base_url=_optional_str(value("unsubscribe_base_url")),
            feedback_id_sender_id=str(value("feedback_id_sender_id")),
            feedback_id_stream=str(value("feedback_id_stream")),
            feedback_id_customer=str(value("feedback_id_customer")),
            mailbox_groups=_json_text(value("mailbox_groups")),
            pacing=_json_text(value("pacing")),
            warmup=_json_text(value("warmup")),
            recipients_bucket=_optional_str(value("recipients_bucket")),
            oncall_email=_optional_str(value("oncall_email")),
            oncall_https_url=_optional_str(value("oncall_https_url")),
            send_rate=number(value("send_rate"), "send_rate", float),
            send_concurrency=number(value("send_concurrency"), "send_concurrency", int),
            provider_timeout_seconds=number(value("provider_timeout_seconds"), "provider_timeout_seconds", int),
            provider_latency_ms=number(value("provider_latency_ms"), "provider_latency_ms", int),
            batch_size=number(value("batch_size"), "batch_size", int),
            max_concurrency_override=(
                None if value("max_concurrency") is None else number(value("max_concurrency"), "max_concurrency", int)
            ),
            queue_age_alarm_minutes=number(value("queue_age_alarm_minutes"), "queue_age_alarm_minutes", int),
            removal_policy=str(value("removal_policy")).lower(),
            unsubscribe_rate_limit=whole("unsubscribe_rate_limit"),
            unsubscribe_burst_limit=whole("unsubscribe_burst_limit"),
            webhook_rate_limit=whole("webhook_rate_limit"),
            webhook_burst_limit=whole("webhook_burst_limit"),
            events_reserved_concurrency_override=(
                None if value("events_reserved_concurrency") is None else whole("events_reserved_concurrency")
            ),
            unsubscribe_reserved_concurrency=whole("unsubscribe_reserved_concurrency"),
            api_reserved_concurrency=whole("api_reserved_concurrency"),
            account_concurrency=whole("account_concurrency"),
        )
        config._validate()
        return config

    def _validate(self) -> None:
        problems = []
        if self.removal_policy not in REMOVAL_POLICIES:
            problems.append(f"removal_policy must be one of {REMOVAL_POLICIES}, got {self.removal_policy!r}")
        if self.send_rate <= 0:
            problems.append("send_rate must be > 0 emails/s")
        # The consumer's settings refuse send_concurrency outside 1..64 and a provider
        # timeout above 60 s; refuse them here too, before a deploy.
        if not 1 <= self.send_concurrency <= 64:
            problems.append("send_concurrency must be within 1..64")
        if not 1 <= self.provider_timeout_seconds <= 60:
            problems.append("provider_timeout_seconds must be within 1..60")
        if self.provider_latency_ms <= 0:
            problems.append("provider_latency_ms must be > 0")
        if not 1 <= self.batch_size <= 10:
            problems.append("batch_size must be within 1..10 (no batching window)")
        if self.max_concurrency_override is not None and not (
            MAX_CONCURRENCY_BOUNDS[0] <= self.max_concurrency_override <= MAX_CONCURRENCY_BOUNDS[1]
        ):
            problems.append(f"max_concurrency must be within {MAX_CONCURRENCY_BOUNDS}")
        if self.queue_age_alarm_minutes < 1:
            problems.append("queue_age_alarm_minutes must be >= 1")
        if self.oncall_https_url is not None and not self.oncall_https_url.startswith("https://"):
            problems.append("oncall_https_url must start with https://")
        # RFC 8058: the one-click link must be https (the consumer refuses anything else).
        if self.unsubscribe_base_url is not None and not self.unsubscribe_base_url.startswith("https://"):
            problems.append("unsubscribe_base_url must start with https://")
        problems.extend(
            f"feedback_id_{part}: {problem}"
            for part, problem in feedback_id.problems(
                self.feedback_id_sender_id, self.feedback_id_stream, self.feedback_id_customer
            )
        )
        problems.extend(_pacing_problems(self.mailbox_groups, self.pacing, self.warmup))
        for stack in self.provider_stacks.values():
            problems.extend(stack.problems(self))
        if self.recipients_bucket is not None and not S3_BUCKET_NAME.fullmatch(self.recipients_bucket):
            problems.append(f"recipients_bucket is not an S3 bucket name: {self.recipients_bucket!r}")
        for route in ("unsubscribe", "webhook"):
            rate, burst = getattr(self, f"{route}_rate_limit"), getattr(self, f"{route}_burst_limit")
            if not 1 <= rate <= API_RATE_LIMIT_MAX:
                problems.append(f"{route}_rate_limit must be within 1..{API_RATE_LIMIT_MAX} requests/s")
            if not 1 <= burst <= API_BURST_LIMIT_MAX:
                problems.append(f"{route}_burst_limit must be within 1..{API_BURST_LIMIT_MAX} requests")
        reservations = {
            "events_reserved_concurrency": self.events_reserved_concurrency_override,
            "unsubscribe_reserved_concurrency": self.unsubscribe_reserved_concurrency,
            "api_reserved_concurrency": self.api_reserved_concurrency,
        }
        for key, reserved in reservations.items():
            # 0 would stop the function altogether; that is a kill switch, not a setting.
            if reserved is not None and reserved < 1:
                problems.append(f"{key} must be >= 1")
        if self.account_concurrency <= LAMBDA_MIN_UNRESERVED:
            problems.append(
                f"account_concurrency must be above {LAMBDA_MIN_UNRESERVED} (Lambda keeps that many unreserved):"
                " request a Lambda concurrency quota increase for this account first"
            )
        if not problems and self.function_timeout_seconds > LAMBDA_MAX_TIMEOUT_SECONDS:
            problems.append(
                f"the batch would need a {self.function_timeout_seconds} s function timeout (Lambda max"
                f" {LAMBDA_MAX_TIMEOUT_SECONDS} s): lower batch_size or provider_timeout_seconds,"
                " or raise send_concurrency"
            )
        if not problems and self.reserved_concurrency_total > self.account_concurrency - LAMBDA_MIN_UNRESERVED:
            problems.append(
                f"the functions would reserve {self.reserved_concurrency_total} concurrent executions"
                f" (consumer {self.consumer_reserved_concurrency} = max_concurrency, events"
                f" {self.events_reserved_concurrency}, unsubscribe {self.unsubscribe_reserved_concurrency},"
                f" operator API {self.api_reserved_concurrency}, counters {self.aggregator_reserved_concurrency},"
                f" jobs {JOBS_RESERVED}, account health {self.account_health_reserved_concurrency}),"
                " more than account_concurrency"
                f" {self.account_concurrency} minus the {LAMBDA_MIN_UNRESERVED} Lambda keeps unreserved:"
                " lower them, or raise account_concurrency to the account's (increased) quota"
            )
        if problems:
            raise ConfigError("invalid sendonce context: " + "; ".join(problems))

    def provider_value(self, key: str) -> Any:
        """A provider's context value (e.g. the name of a secret it reads)."""
        return dict(self.provider_context)[key]

    @property
    def deployed(self) -> tuple[ProviderStack, ...]:
        """The CDK needs of the providers this deployment uses, in registry order."""
        return tuple(stack for name, stack in self.provider_stacks.items() if name in self.providers)

    def __getattr__(self, name: str) -> Any:
        # A provider's context value reads like any other setting: config.<key>.
        if name != "provider_context":
            for key, value in self.__dict__.get("provider_context", ()):
                if key == name:
                    return value
        raise AttributeError(name)

    @property
    def feedback_id_settings(self) -> dict[str, str]:
        """The Feedback-ID's parts by settings field (sendonce.settings: the consumer's and the
        operator API's, whose previews show it); an empty customer is left unset, which the
        settings read as empty."""
        parts = {
            "feedback_id_sender_id": self.feedback_id_sender_id,
            "feedback_id_stream": self.feedback_id_stream,
            "feedback_id_customer": self.feedback_id_customer,
        }
        return {name: value for name, value in parts.items() if value}

    @property
    def pacing_settings(self) -> dict[str, str]:
        """The groups and caps by settings field (the consumer's, the operator API's and the
        events function's: sendonce.settings._PacingSettings); unset when empty."""
        named = (("mailbox_groups", self.mailbox_groups), ("pacing", self.pacing), ("warmup", self.warmup))
        return {k: v for k, v in named if v}

    @property
    def retain(self) -> bool:
        return self.removal_policy == "retain"

    @property
    def function_timeout_seconds(self) -> int:
        """Worst case for a full invocation, rounded up to a whole 30 s.

        One batch = 100 recipients sent `send_concurrency` at a time, so
        ceil(100 / 8) = 13 rounds; in the worst case every call in a round waits the
        full provider timeout (10 s) -> 130 s. Add the consumer's throttle backoff
        (20 s: up to 3 retries per send at 0.2/0.4/0.8 s, or up to 8 s each when the
        provider sends Retry-After), the ledger writes (5 s: a claim and a record per
        recipient, 8 in parallel, ~10 ms each plus DynamoDB retries) -> 155 s per
        batch, x batch_size batches per invocation, + the safety margin below which
        the consumer stops claiming (15 s) -> 170 s -> 180 s with the defaults.
        (The incident's 30 s covered 3 rounds.)
        """
        rounds = math.ceil(RECIPIENTS_PER_BATCH / self.send_concurrency)
        per_batch = (
            rounds * self.provider_timeout_seconds + THROTTLE_BACKOFF_BUDGET_SECONDS + LEDGER_WRITES_BUDGET_SECONDS
        )
        total = self.batch_size * per_batch + SAFETY_MARGIN_SECONDS
        return math.ceil(total / 30) * 30

    @property
    def visibility_timeout_seconds(self) -> int:
        # AWS: at least 6 x the function timeout, so retries of a throttled or failed
        # invocation never overlap a message still being worked on.
        return 6 * self.function_timeout_seconds

    @property
    def safety_margin_ms(self) -> int:
        return SAFETY_MARGIN_SECONDS * 1000

    @property
    def max_concurrency(self) -> int:
        """Concurrent consumer invocations (SQS event source MaximumConcurrency).

        Little's law: sends in flight = send_rate x average provider latency; one
        invocation keeps `send_concurrency` in flight, so
        ceil(send_rate x latency_s / send_concurrency), clamped to AWS's [2, 1000].
        Defaults: ceil(14 x 0.25 / 8) = 1 -> 2. The floor of 2 can offer more than a
        new SES account's 14/s; the consumer's throttle handling absorbs the excess.
        """
        if self.max_concurrency_override is not None:
            return self.max_concurrency_override
        wanted = math.ceil(self.send_rate * (self.provider_latency_ms / 1000) / self.send_concurrency)
        low, high = MAX_CONCURRENCY_BOUNDS
        return max(low, min(high, wanted))

    @property
    def consumer_reserved_concurrency(self) -> int:
        """The consumer's event source never runs more than max_concurrency invocations;
        reserving exactly that keeps them free of every other function in the account
        (and caps nothing the consumer would use)."""
        return self.max_concurrency

    @property
    def events_reserved_concurrency(self) -> int:
        """ceil(send_rate x 3 events per email x 0.05 s x 2 headroom), at least 10.

        Defaults: ceil(14 x 3 x 0.05 x 2) = 5 -> 10; at 200/s, 60. A throttled SES event
        waits in Lambda's asynchronous queue (retried up to the 6 h max event age, then
        the events DLQ); a throttled Resend webhook is answered 5xx and Resend retries it.
        """
        if self.events_reserved_concurrency_override is not None:
            return self.events_reserved_concurrency_override
        wanted = math.ceil(self.send_rate * EVENTS_PER_EMAIL * EVENT_SECONDS * EVENTS_HEADROOM)
        return max(MIN_EVENTS_RESERVED, wanted)

    @property
    def aggregator_reserved_concurrency(self) -> int:
        """The counters' aggregator runs one invocation per stream shard (two tables, a few
        shards each while a campaign sends): a throttled one only delays the counters."""
        return AGGREGATOR_RESERVED

    @property
    def account_health_reserved_concurrency(self) -> int:
        """One check per deployed provider with an account state to read (SES)."""
        return ACCOUNT_HEALTH_RESERVED * sum(1 for stack in self.deployed if stack.account_health)

    @property
    def reserved_concurrency_total(self) -> int:
        return (
            self.aggregator_reserved_concurrency
            + self.account_health_reserved_concurrency
            + JOBS_RESERVED
            + self.consumer_reserved_concurrency
            + self.events_reserved_concurrency
            + self.unsubscribe_reserved_concurrency
            + self.api_reserved_concurrency
        )


def _providers(raw: Any, known: tuple[str, ...]) -> tuple[str, ...]:
    names = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    providers = tuple(dict.fromkeys(n.strip().lower() for n in names if str(n).strip()))
    unknown = [p for p in providers if p not in known]
    if not providers or unknown:
        raise ConfigError(f"invalid sendonce context: provider must be one or more of {known}, got {raw!r}")
    return providers


def _optional_str(raw: Any) -> str | None:
    return None if raw is None else str(raw)


__all__ = ["ConfigError", "SendonceConfig"]


def _json_text(value: Any) -> str:
    """A mapping (or its JSON text) as compact JSON text; "" for none. Text that is not JSON
    is kept as is, for `_pacing_problems` to name."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(value)


def _pacing_problems(mailbox_groups: str, pacing: str, warmup: str) -> list[str]:
    """What the functions' settings would refuse at cold start, said before a deploy."""
    try:
        PacingSettings(mailbox_groups=mailbox_groups, pacing=pacing, warmup=warmup)
    except ValidationError as exc:
        return [
            (f"{'.'.join(str(p) for p in e['loc'])}: " if e["loc"] else "") + e["msg"].removeprefix("Value error, ")
            for e in exc.errors()
        ]
    return []
