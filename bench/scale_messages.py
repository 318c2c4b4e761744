"""bench-scale's per-message comparison: one batch-mode message against the one-by-one path,
through the deployed stack, at Resend's default team limit.

Two small campaigns, each sent by one consumer runtime (the deployed function and its
environment: the shared limiter, suppressions, provider events and the aggregator on), with
the local Resend server holding the team to Resend's default 5 requests per sliding second:
- one by one (`delivery_mode="single"`): a provider request per recipient;
- batch mode: a provider request per message of up to 100 recipients.

Each message is one invocation (the mapping's batch size is 1); its time is the handler's.
A campaign's last message also checks the campaign's completion, so it is left out of the
median. The figure is the median batch-mode message over the median one-by-one message, both
of 100 recipients: issue 17's goal is <= 1/8."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.scale_stack import ScaleStack, bench_campaign, recipients_of
from bench.scale_writers import writer_units
from sendonce.domain.models import CampaignState
from sendonce_local.request_counter import RequestCounter
from sendonce_local.resend_server import DEFAULT_TEAM_RATE_LIMIT

MESSAGE_RECIPIENTS = 100  # the publisher's batch: one queue message
GOAL = 0.125  # a batch-mode message in <= 1/8 of the one-by-one path's time (issue 17)
ONE_BY_ONE_MESSAGES = 2  # the first is timed, the second (the last) checks completion
BATCH_MESSAGES = 4


def send_one_campaign(
    stack: ScaleStack,
    campaign_id: str,
    delivery_mode: str,
    messages: int,
    say: Callable[[str], None],
    timeout_s: float = 900.0,
) -> dict[str, Any]:
    size = messages * MESSAGE_RECIPIENTS
    stack.operator.create(bench_campaign(campaign_id, f"bench-scale per message ({delivery_mode})", delivery_mode))
    summary = stack.client.publish(campaign_id, recipients_of(campaign_id, size), streams=1)
    if summary.batches_new != messages:
        raise RuntimeError(f"{campaign_id}: {summary.batches_new} messages published, {messages} expected")
    before = stack.resend.stats()["requests"]
    webhooks_before = stack.webhook_count()
    stack.reset_phase()
    seconds: list[float] = []
    session = stack.consumer_session()
    consumer_requests = RequestCounter(session)
    stack.start_consumers(count=1, invocation_seconds=seconds, session=session)
    deadline = time.monotonic() + timeout_s
    try:
        while len(seconds) < messages or stack.operator.get(campaign_id).state is not CampaignState.COMPLETED:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{campaign_id}: {len(seconds)} of {messages} messages handled in {timeout_s:g} s")
            time.sleep(0.5)
    finally:
        stack.stop_consumers()
    # Its webhooks and stream records applied before the next campaign: the writers below
    # are this campaign's sending, events and aggregator (its publish left out).
    settle_webhooks(stack, say)
    writers = writer_units(stack.accountant, stack.table_roles(), campaign_id)
    duplicates, missing = stack.duplicates_and_missing(campaign_id, size)
    timed = seconds[:-1]  # the last message checks the campaign's completion
    return {
        "delivery_mode": delivery_mode,
        "recipients": size,
        "messages": messages,
        "message_s": [round(s, 3) for s in seconds],
        "median_message_s": round(statistics.median(timed), 3),
        "provider_requests_per_message": round((stack.resend.stats()["requests"] - before) / messages, 2),
        # The consumer's own requests (the events function's and the aggregator's apart)
        "consumer_dynamodb_requests_per_message": round(consumer_requests.total("dynamodb") / messages, 1),
        "provider_events": stack.webhook_count() - webhooks_before,
        "writers": {
            name: {**entry, "write_units_per_recipient": round(entry["write_units"] / size, 4)}
            for name, entry in sorted(writers.items())
        },
        "duplicates": duplicates,
        "missing": missing,
    }


def settle_webhooks(stack: ScaleStack, say: Callable[[str], None], quiet_s: float = 15.0) -> None:
    """Wait until no webhook has come for `quiet_s` and the aggregator has applied its
    records, so that none of these campaigns' writes fall in the next campaign's figures."""
    last, changed = stack.webhook_count(), time.monotonic()
    while time.monotonic() - changed < quiet_s:
        time.sleep(1)
        count = stack.webhook_count()
        if count != last:
            last, changed = count, time.monotonic()
    stack.drain_aggregator(say, "per message")


def run_message_times(stack: ScaleStack, say: Callable[[str], None]) -> dict[str, Any]:
    stack.events_on(True)
    stack.set_team_limit(DEFAULT_TEAM_RATE_LIMIT)
    try:
        say(f"per message: one by one, {ONE_BY_ONE_MESSAGES} messages at {DEFAULT_TEAM_RATE_LIMIT} requests/s")
        one_by_one = send_one_campaign(stack, "msg-single", "single", ONE_BY_ONE_MESSAGES, say)
        say(f"per message: batch mode, {BATCH_MESSAGES} messages")
        batch = send_one_campaign(stack, "msg-batch", "batch", BATCH_MESSAGES, say)
    finally:
        stack.set_team_limit(None)
    ratio = batch["median_message_s"] / one_by_one["median_message_s"]
    say(
        f"per message: batch {batch['median_message_s']} s, one by one {one_by_one['median_message_s']} s "
        f"-> {ratio:.3f} (goal <= {GOAL})"
    )
    return {
        "team_limit_requests_per_s": DEFAULT_TEAM_RATE_LIMIT,
        "one_by_one": one_by_one,
        "batch": batch,
        "batch_vs_one_by_one_ratio": round(ratio, 3),
        "goal": GOAL,
        "met": ratio <= GOAL,
    }
