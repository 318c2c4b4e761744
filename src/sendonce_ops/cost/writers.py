"""Every writer of DynamoDB the deployed stack has: which function writes which kind of key,
what its writes grow with, and whether bench-scale measures it.

bench-scale (bench/scale_writers.py) puts each write it accounts under one of these by the
function that made it, its table and its kind of key (`classify`); the cost model
(model.py) prices each from the figures bench-scale measured (measured.json). A write no
entry describes is classified `<function>: unclassified ...`: the capture then holds a
writer the model does not know, and tests/unit/test_cost_model.py fails until it does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What a writer's units grow with, in the cost model:
#   recipient       - fixed per campaign + per recipient, as measured (a message's writes are
#                     per recipient at 100 recipients a message; a write once per campaign
#                     shows as fixed)
#   provider_event  - per provider event (sent, delivered, bounce, complaint, open, click): the
#                     measured units per recipient scaled by the model's events per email over
#                     the events bench-scale's recipients had
#   first_engagement - per recipient's first open or first click (a tracking campaign's):
#                     the units per first bench-scale --tracking measured (measured.json's
#                     `tracking`), times the model's opens and clicks per email (each taken
#                     as a first: an upper bound)
#   not_measured    - not written by bench-scale's campaigns: outside an immediate campaign's
#                     send (jobs, scheduled starts, unsubscribes), or on bounces and complaints,
#                     which its campaigns have none of: listed, not priced
# In the mode bench-scale's campaigns were not sent in (one provider request per recipient),
# the writers its one-by-one campaign wrote come from that campaign, per recipient; the
# others (the publish's) from the campaigns.
SCALES = ("recipient", "provider_event", "first_engagement", "not_measured")


@dataclass(frozen=True)
class Writer:
    name: str
    function: str  # the stack's function: api, consumer, events, aggregator, jobs, scheduled_start, unsubscribe,
    # account_health
    table: str  # ledger, campaigns, suppressions
    keys: str  # a regular expression on "<partition-key kind> / <sort-key kind>" (bench/scale_writers.py)
    scales: str
    share: str  # the cost model's share: ledger, limiter, events, pipeline
    what: str
    batch_only: bool = False  # written in batch mode only (send groups)
    # The ledger's conditional writes per recipient sent one by one: a provider with no
    # idempotency key takes one more (mark_in_flight) than the one bench-scale measured.
    per_ledger_write: bool = False


WRITERS: tuple[Writer, ...] = (
    Writer(
        "api: batch records",
        "api",
        "campaigns",
        r"campaign#<id>#b<k> / batch(-enqueued)?",
        "recipient",
        "ledger",
        "each message's batch record (its recipients) and its enqueued mark, under 32 batch shards",
    ),
    Writer(
        "api: campaign items",
        "api",
        "campaigns",
        r"(campaign#<id> / (campaign|content)|report#<id> / mark|counters#<id> / recorded)",
        "recipient",
        "pipeline",
        "the campaign, its content and its report's mark at creation; its publish leases and the count"
        " of batches recorded (per publish request)",
    ),
    Writer(
        "consumer: ledger claims and settles",
        "consumer",
        "ledger",
        r"<id>#<k> / r<k>",
        "recipient",
        "ledger",
        "batch mode: a claim and a completion transaction per message (2 units per item);"
        " one by one: the claim and mark_sent per recipient (and mark_in_flight without an idempotency key)",
        per_ledger_write=True,
    ),
    Writer(
        "consumer: send groups",
        "consumer",
        "campaigns",
        r"campaign#<id>(#b<k>)? / group",
        "recipient",
        "ledger",
        "batch mode: one send-group record per provider request",
        batch_only=True,
    ),
    Writer(
        "consumer: campaign item",
        "consumer",
        "campaigns",
        r"campaign#<id> / campaign",
        "recipient",
        "pipeline",
        "each message closed on the campaign item (one ADD to its open batches a message)",
    ),
    Writer(
        "consumer: limiter",
        "consumer",
        "campaigns",
        r"limiter#\w+ / .*",
        "recipient",
        "limiter",
        "the shared limiter's reservations (one per provider request, failed ones included)",
    ),
    Writer(
        "consumer: mailbox group caps",
        "consumer",
        "campaigns",
        r"limiter#group#\w[\w-]* / .*",
        "not_measured",
        "limiter",
        "a deployment's or a campaign's caps per mailbox group (pacing): one reservation per provider request"
        " to a capped group (one by one, a few places a write); bench-scale's stack has no caps",
    ),
    Writer(
        "consumer: report counts",
        "consumer",
        "campaigns",
        r"report#<id>#consumer-<k> / minute",
        "not_measured",
        "pipeline",
        "a message's duplicates prevented and emails a group's cap held (report): one ADD per message that had"
        " any, none for a fresh message sent without waiting; bench-scale sends each message once, uncapped",
    ),
    Writer(
        "consumer: warm-up day counts",
        "consumer",
        "campaigns",
        r"warmup#.* / day#.*",
        "not_measured",
        "limiter",
        "a sending domain warming up (warmup): one reservation per send group, one per 10 recipients one by"
        " one; bench-scale's stack warms no domain",
    ),
    Writer(
        "events: first opens and clicks",
        "events",
        "campaigns",
        r"engagement#<id>#<k> / r",
        "first_engagement",
        "events",
        "a tracking campaign's recipient's first open and first click (tracking): one Update in a transaction per"
        " first, none for a repeat, over 64 keys (bench-scale --tracking)",
    ),
    Writer(
        "events: unique opens and clicks per minute",
        "events",
        "campaigns",
        r"report#<id>#w<k> / minute",
        "first_engagement",
        "events",
        "the report's unique opens and clicks, an ADD in the same transaction as the first's, on the report's"
        " 64 writer keys (bench-scale --tracking)",
    ),
    Writer(
        "events: mailbox group slowdown",
        "events",
        "campaigns",
        r"limiter#group#\w[\w-]* / state",
        "not_measured",
        "events",
        "a deferral cuts its group's factor, at most once a second per process; bench-scale's campaigns have"
        " no deferrals",
    ),
    Writer(
        "events: ledger annotations",
        "events",
        "ledger",
        r"<id>#<k> / r<k>",
        "provider_event",
        "events",
        "each provider event recorded once on its delivery's ledger item (a conditional update)",
    ),
    Writer(
        "events: sent shards",
        "events",
        "campaigns",
        r"campaign#<id>#sent#<k> / deliverability",
        "not_measured",
        "events",
        "the `sent` counter's 16 shards (one ADD per sent event), read by the brakes: a campaign created before"
        " counters only (a counted one's brakes read its totals); bench-scale's campaigns are counted",
    ),
    Writer(
        "events: feedback counter",
        "events",
        "campaigns",
        r"campaign#<id> / deliverability",
        "not_measured",
        "events",
        "bounces and complaints counted for the brakes, in the annotation's transaction; bench-scale's"
        " campaigns have none",
    ),
    Writer(
        "events: suppressions",
        "events",
        "suppressions",
        r".*",
        "not_measured",
        "events",
        "an address suppressed on a hard bounce or a complaint; bench-scale's campaigns have none",
    ),
    Writer(
        "aggregator: counters",
        "aggregator",
        "campaigns",
        r"counters#<id>#<k> / from",
        "recipient",
        "ledger",
        "the counters' positions: one write per (ledger key, stream batch) over 128 counter keys",
    ),
    Writer(
        "aggregator: totals",
        "aggregator",
        "campaigns",
        r"counters#<id>#total#<k> / total",
        "recipient",
        "ledger",
        "the campaign's totals (what status and completion read): one ADD per stream batch and campaign,"
        " over 32 keys, in the counters' transaction",
    ),
    Writer(
        "aggregator: report aggregates",
        "aggregator",
        "campaigns",
        r"report#<id>(#w<k>)? / (minute|domain|unknowns|mark)",
        "recipient",
        "ledger",
        "the report's per-minute and per-domain aggregates, in the counters' transaction",
    ),
    Writer(
        "aggregator: published markers",
        "aggregator",
        "campaigns",
        r"published#<id>#<k> / r<k>",
        "recipient",
        "ledger",
        "one conditional put per published recipient (the distinct published count)",
    ),
    Writer(
        "aggregator: campaign item",
        "aggregator",
        "campaigns",
        r"campaign#<id> / campaign",
        "recipient",
        "pipeline",
        "the campaign completed when its counters say every delivery is final (once a campaign)",
    ),
    Writer(
        "jobs: job items and their work",
        "jobs",
        "campaigns",
        r"job#.*",
        "not_measured",
        "pipeline",
        "reconcile, republish, audit, resume, enqueue_recorded: only when an operator (or an unschedule)"
        " starts one; their progress item per step and the writes of the work",
    ),
    Writer(
        "account_health: its record and paused campaigns",
        "account_health",
        "campaigns",
        r"account#\w+ / health|campaign#<id> / campaign",
        "not_measured",
        "pipeline",
        "the SES account read every 5 minutes: one put of its record per check (~8,640 a month, whatever is"
        " sent), and a campaign's pause when the account stops",
    ),
    Writer(
        "scheduled_start: campaign item",
        "scheduled_start",
        "campaigns",
        r"campaign#<id> / campaign",
        "not_measured",
        "pipeline",
        "a scheduled campaign's start or a send window's opening: a few writes per firing",
    ),
    Writer(
        "unsubscribe: suppressions",
        "unsubscribe",
        "suppressions",
        r".*",
        "not_measured",
        "pipeline",
        "one put per recipient who unsubscribes",
    ),
)
BY_NAME = {w.name: w for w in WRITERS}


def classify(function: str, table: str, partition_kind: str, sort_kind: str) -> str:
    """The writer a write belongs to (bench-scale's capture names writers so)."""
    key = f"{partition_kind} / {sort_kind or '-'}"
    for writer in WRITERS:
        if writer.function == function and writer.table == table and re.fullmatch(writer.keys, key):
            return writer.name
    return f"{function}: unclassified {table} {key}"
