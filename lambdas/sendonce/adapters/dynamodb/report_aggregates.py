"""A campaign's report aggregates in the campaigns table (domain/campaigns/report.py).

    pk = report#<campaign>#<writer>, sk = minute#<minute start ms, 13 digits>#<writer>
        one number per outcome (sent, failed, ...), `prevented` (duplicates prevented), and
        `g:<group>:<kind>` per mailbox-provider group (sent, deferred, bounced, complained;
        a consumer's `held`: report_data.GROUP_KINDS); `opened`, `clicked`: unique opens and
        clicks by the minute of each recipient's first (the events function's: engagement.py);
        an A/B campaign's `v:<variant>:<kind>` (sent, opened, clicked; the rest's under
        `v:*:<kind>`: report_data.variant_count), each added in the very ADD that adds the
        same send, open or click to the totals above
    pk = report#<campaign>#<writer>, sk = domain#<recipient domain>#<writer>
        delivered, bounced, complained
    pk = report#<campaign>#<writer>, sk = unknowns#<writer>
        sent, not_sent (unknowns settled by evidence)
    pk = report#<campaign>, sk = mark#<campaign version, 10 digits>
        at_ms, event, by, reason: one lifecycle move (written by the campaign store's
        `transition`, keyed by the version it made, so a repeated write is the same item)

Each writer (the stream aggregator, one per stream shard) adds to items of its own, so no
item takes a write per recipient: a batch of stream records is one ADD per minute and per
domain it touched, made in the aggregator's transaction that also moves the shard's
watermark (exactly once per stream record). Duplicates prevented are not in the stream (a
refused claim writes nothing): a consumer adds a message's count with one ADD of its own,
only when it had any, on `consumer-<k>` minute items (report.prevented_writer), with the
emails a group's cap held to a later second in the same write. Reading is
one Query per partition-key value (the campaign's own, holding its marks and the items of
the release before writers had keys of their own, and one per writer), 8 in flight, summed
here: its size grows with the campaign's minutes, domains and moves, not its recipients.

Each writer has a partition-key value of its own: the aggregator's ADDs for one campaign
took ~2 write units per recipient (bench-scale: a transaction per batch of stream records,
2 units per item touched), which on one key capped the aggregator at ~500 recipients/s;
over REPORT_WRITERS keys the hottest takes ~1/64 of it (docs/scale.md). An A/B campaign's
figures per variant are more numbers of the same items in the same ADDs: no item, write or
key more, so no key's write units per recipient grow, as long as each write stays one unit:
the fullest minute item (the longest campaign id, every outcome, every mailbox group's counts,
five variants of the longest id, 8 characters, each sent, opened and clicked) is 980 bytes,
under 1 KB (tests/integration/test_ab_figures.py; 32-character ids made it 1,340). A
deployment's own mailbox groups with long names add to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sendonce.domain.campaigns.report import OTHER_DOMAINS
from sendonce.domain.campaigns.report_data import (
    ENGAGEMENT_COUNTS,
    MINUTE_MS,
    Bucket,
    Mark,
    ReportAggregates,
    ReportIncrements,
    group_count_of,
    minute_of,
    prevented_writers,
    variant_count_of,
)
from sendonce.domain.campaigns.variants import VariantFigures
from sendonce.domain.sending.shards import dealt

MINUTE, DOMAIN, UNKNOWNS, MARK = "minute#", "domain#", "unknowns#", "mark#"


# The aggregator's writers (a stream key's hash picks one): each its own partition-key value.
REPORT_WRITERS = 64
READ_WORKERS = 8


def partition(campaign_id: str) -> str:
    """The campaign's own key: its lifecycle marks."""
    return f"report#{campaign_id}"


def writer_partition(campaign_id: str, writer: str) -> str:
    """The key of one writer's items (an aggregator's `w<k>`, a consumer's `consumer-<k>`)."""
    return f"report#{campaign_id}#{writer}"


def aggregator_writer(stream: str) -> str:
    """The writer key a stream position's increments go to: the ledger shards dealt evenly
    (ADDs commute: which writer holds an increment changes no total)."""
    return f"w{dealt(stream, REPORT_WRITERS)}"


def partitions(campaign_id: str) -> list[str]:
    """Every key a campaign's report items can have."""
    writers = [f"w{k}" for k in range(REPORT_WRITERS)] + prevented_writers()
    return [partition(campaign_id), *(writer_partition(campaign_id, w) for w in writers)]


def item_count(increments: ReportIncrements) -> int:
    minutes = {m for m, _ in increments.outcomes} | set(increments.prevented)
    domains = {d for d, _ in increments.feedback}
    return len(minutes) + len(domains) + (1 if increments.unknowns_settled else 0)


def fit(increments: ReportIncrements, max_items: int) -> ReportIncrements:
    """The same counts in at most `max_items` items, so that they go in one transaction with
    the counter write: the least busy domains are summed as OTHER_DOMAINS, then (a batch that
    spans more minutes than that, after a long lag) minutes are merged pairwise. Totals stay
    exact; only the finest detail of such a batch is coarser."""
    fitted = ReportIncrements(
        outcomes=Counter(increments.outcomes),
        prevented=Counter(increments.prevented),
        feedback=Counter(increments.feedback),
        unknowns_settled=Counter(increments.unknowns_settled),
    )
    while item_count(fitted) > max_items:
        by_domain: Counter[str] = Counter()
        for (domain, _), n in fitted.feedback.items():
            by_domain[domain] += n
        foldable = [d for d in by_domain if d != OTHER_DOMAINS]
        if foldable:
            quietest = min(foldable, key=lambda d: (by_domain[d], d))
            for (domain, kind), n in list(fitted.feedback.items()):
                if domain == quietest:
                    del fitted.feedback[(domain, kind)]
                    fitted.feedback[(OTHER_DOMAINS, kind)] += n
            continue
        width = 2 * MINUTE_MS
        while True:
            merged_outcomes: Counter[tuple[int, str]] = Counter()
            for (minute, outcome), n in fitted.outcomes.items():
                merged_outcomes[(minute - minute % width, outcome)] += n
            merged_prevented: Counter[int] = Counter()
            for minute, n in fitted.prevented.items():
                merged_prevented[minute - minute % width] += n
            candidate = ReportIncrements(merged_outcomes, merged_prevented, fitted.feedback, fitted.unknowns_settled)
            if item_count(candidate) <= max_items:
                return candidate
            width *= 2
    return fitted


def increment_updates(table: str, campaign_id: str, writer: str, increments: ReportIncrements) -> list[dict[str, Any]]:
    """TransactWriteItems `Update` entries adding `increments` to `writer`'s items."""
    items: dict[str, Counter[str]] = {}
    for (minute, outcome), n in increments.outcomes.items():
        items.setdefault(f"{MINUTE}{minute:013d}#{writer}", Counter())[outcome] += n
    for minute, n in increments.prevented.items():
        items.setdefault(f"{MINUTE}{minute:013d}#{writer}", Counter())["prevented"] += n
    for (domain, kind), n in increments.feedback.items():
        items.setdefault(f"{DOMAIN}{domain}#{writer}", Counter())[kind] += n
    for kind, n in increments.unknowns_settled.items():
        items.setdefault(f"{UNKNOWNS}{writer}", Counter())[kind] += n
    return [
        {
            "Update": {
                "TableName": table,
                "Key": {"pk": {"S": writer_partition(campaign_id, writer)}, "sk": {"S": sk}},
                **adding(counts),
            }
        }
        for sk, counts in sorted(items.items())
    ]


def adding(counts: Mapping[str, int]) -> dict[str, Any]:
    """The UpdateExpression (one `ADD` of each count) and its names and values."""
    names = {f"#a{i}": name for i, name in enumerate(sorted(counts))}
    return {
        "UpdateExpression": "ADD " + ", ".join(f"{alias} :v{alias[2:]}" for alias in names),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": {f":v{alias[2:]}": {"N": str(counts[name])} for alias, name in names.items()},
    }


def mark_update(
    table: str, campaign_id: str, *, version: int, at_ms: int, event: str, by: str, reason: str | None
) -> dict[str, Any]:
    """UpdateItem request (UpdateItem, not PutItem: every function that moves a campaign may
    already update that table) writing one lifecycle mark."""
    values = {":at": {"N": str(at_ms)}, ":event": {"S": event}, ":by": {"S": by}}
    update = "SET at_ms = :at, #event = :event, #by = :by"
    if reason:
        update += ", reason = :reason"
        values[":reason"] = {"S": reason[:500]}
    return {
        "TableName": table,
        "Key": {"pk": {"S": partition(campaign_id)}, "sk": {"S": f"{MARK}{version:010d}"}},
        "UpdateExpression": update,
        "ExpressionAttributeNames": {"#event": "event", "#by": "by"},
        "ExpressionAttributeValues": values,
    }


def _summed(counts: Iterable[Counter[str]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)  # update adds, keeping zeros and negatives (`+` would drop them)
    return total


class DynamoDBReportAggregates:
    def __init__(self, *, client: Any, table_name: str):
        self._client = client
        self._table = table_name

    def add_counts(self, campaign_id: str, *, at_ms: int, counts: Mapping[str, int], writer: str) -> None:
        self._client.update_item(
            TableName=self._table,
            Key={
                "pk": {"S": writer_partition(campaign_id, writer)},
                "sk": {"S": f"{MINUTE}{minute_of(at_ms):013d}#{writer}"},
            },
            **adding(counts),
        )

    def _items(self, pk: str) -> list[dict[str, Any]]:
        paginator = self._client.get_paginator("query")
        pages = paginator.paginate(
            TableName=self._table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": pk}}
        )
        return [item for page in pages for item in page["Items"]]

    def aggregates(self, campaign_id: str) -> ReportAggregates:
        marks: list[Mark] = []
        minutes: dict[int, Counter[str]] = {}
        domains: dict[str, Counter[str]] = {}
        unknowns: Counter[str] = Counter()
        groups: dict[str, dict[int, Counter[str]]] = {}
        engaged: dict[int, Counter[str]] = {}
        variants: dict[str, dict[int, Counter[str]]] = {}
        with ThreadPoolExecutor(max_workers=READ_WORKERS) as pool:
            shards = list(pool.map(self._items, partitions(campaign_id)))
        for items in shards:
            for item in items:
                sk = item["sk"]["S"]
                if sk.startswith(MARK):
                    marks.append(
                        Mark(
                            at_ms=int(item["at_ms"]["N"]),
                            event=item["event"]["S"],
                            by=item["by"]["S"],
                            reason=item["reason"]["S"] if "reason" in item else None,
                        )
                    )
                    continue
                counts = Counter(
                    {name: int(value["N"]) for name, value in item.items() if name not in ("pk", "sk") and "N" in value}
                )
                if sk.startswith(MINUTE):
                    start = int(sk[len(MINUTE) :].split("#", 1)[0])
                    for name in list(counts):
                        of_group, of_variant = group_count_of(name), variant_count_of(name)
                        if of_variant is not None:
                            variants.setdefault(of_variant[0], {}).setdefault(start, Counter())[of_variant[1]] += (
                                counts.pop(name)
                            )
                        elif of_group is not None:
                            groups.setdefault(of_group[0], {}).setdefault(start, Counter())[of_group[1]] += counts.pop(
                                name
                            )
                        elif name in ENGAGEMENT_COUNTS:
                            engaged.setdefault(start, Counter())[name] += counts.pop(name)
                    if counts:  # a minute of a group's events alone is no minute of outcomes
                        minutes.setdefault(start, Counter()).update(counts)
                elif sk.startswith(DOMAIN):
                    domains.setdefault(sk[len(DOMAIN) :].rsplit("#", 1)[0], Counter()).update(counts)
                elif sk.startswith(UNKNOWNS):
                    unknowns.update(counts)
        outcomes = [
            Bucket(start, {k: v for k, v in counts.items() if k != "prevented"})
            for start, counts in sorted(minutes.items())
        ]
        prevented = [
            Bucket(start, {"prevented": counts["prevented"]})
            for start, counts in sorted(minutes.items())
            if counts["prevented"]
        ]
        return ReportAggregates(
            outcomes_per_minute=outcomes,
            duplicates_prevented_per_minute=prevented,
            feedback_by_domain={domain: dict(counts) for domain, counts in domains.items()},
            unknowns_settled=dict(unknowns),
            marks=marks,
            groups_per_minute={
                group: [Bucket(start, dict(c)) for start, c in sorted(by_minute.items())]
                for group, by_minute in sorted(groups.items())
            },
            engagement_per_minute=[
                Bucket(start, {k: v for k, v in c.items() if v})
                for start, c in sorted(engaged.items())
                if any(c.values())
            ],
            variants={
                variant: VariantFigures(**_summed(by_minute.values()))
                for variant, by_minute in sorted(variants.items())
            },
            variants_per_minute={
                variant: [
                    Bucket(start, {k: v for k, v in c.items() if v})
                    for start, c in sorted(by_minute.items())
                    if any(c.values())
                ]
                for variant, by_minute in sorted(variants.items())
            },
        )
