"""A campaign's report: what happened to it, as a few aggregates a page can draw.

Nothing here is per recipient. The report is assembled from the campaign's status (its
counters), and from aggregates kept per minute and per recipient domain, so it costs the same
at 1,000 and at 10,000,000 recipients; a timeline longer than MAX_POINTS buckets is folded
into wider buckets (a week-long campaign is still at most MAX_POINTS bars). Beside it, the
sends of at most MAX_OTHERS other campaigns whose sending overlapped its own, chosen from the
campaign listing (a Query per state on its index) and read through the same aggregates,
clipped to its minutes. An A/B campaign's figures per variant and its decision come from the
same aggregates (campaigns/ab_results.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sendonce.domain.campaigns.ab_results import AbResults, ab_results
from sendonce.domain.campaigns.report_data import (
    ENGAGEMENT_COUNTS,
    GROUP_KINDS,
    MINUTE_MS,
    AuditVerdict,
    Bucket,
    Mark,
    ReportAggregates,
    minute_of,
)
from sendonce.domain.deliverability.mailbox_groups import MailboxGroups
from sendonce.domain.models import Campaign, CampaignState, epoch_ms

if TYPE_CHECKING:
    from sendonce.domain.campaigns.ports import ReportAggregatesStore
    from sendonce.domain.campaigns.status import DeliveryStatus

MAX_POINTS = 240  # bars on the timeline: readable on one screen at any campaign length
MAX_DOMAINS = 12  # mailbox providers shown by name; the rest are summed as "other"
OTHER_DOMAINS = "other"
MAX_OTHERS = 8  # other campaigns drawn beside this one: the most recent; more is unreadable
# A campaign that stopped (paused, cancelled, completed) can still end sends already under
# way for a while after its last change: a consumer's lease outlives the move.
STOP_SLACK_MS = 15 * MINUTE_MS


@dataclass(frozen=True)
class CampaignReport:
    campaign_id: str
    name: str
    subject: str | None
    provider: str
    delivery_mode: str
    status: DeliveryStatus
    generated_at_ms: int
    bucket_ms: int
    timeline: list[Bucket]
    duplicates_prevented: list[Bucket]
    marks: list[Mark]
    feedback_by_domain: dict[str, dict[str, int]]
    unknowns: dict[str, int]
    engagement: Mapping[str, int] | None
    engagement_off_reason: str | None
    audit: AuditVerdict | None
    # Other campaigns' sends within this one's minutes, folded like `timeline` (counts
    # {"sent": n}), by campaign id; `others_left_out` overlapped too but are not drawn.
    others: Mapping[str, list[Bucket]] = field(default_factory=dict)
    others_left_out: int = 0
    # Delivered, bounced and complained per mailbox-provider group (every domain counted,
    # before `feedback_by_domain` keeps the top ones): the groups' table, in its order.
    feedback_by_group: Mapping[str, dict[str, int]] = field(default_factory=dict)
    # Per mailbox-provider group, folded like `timeline`: sends, deferrals, bounces and
    # complaints, and the emails its cap held to a later second (report_data.GROUP_KINDS).
    groups_over_time: Mapping[str, list[Bucket]] = field(default_factory=dict)
    # Unique opens and clicks, folded like `timeline` (a campaign that tracks them).
    engagement_over_time: list[Bucket] = field(default_factory=list)
    # An A/B campaign's variants: each one's sends, unique opens and clicks, the rest's, and
    # the decision or that the winner is awaited (None: the campaign has no A/B test).
    variants: AbResults | None = None
    # Its variants' sends, unique opens and clicks per variant (the rest under REST), folded
    # like `timeline`: what the test's rates were at each point, and the rest's after the pick.
    variants_over_time: Mapping[str, list[Bucket]] = field(default_factory=dict)

    def group_totals(self) -> dict[str, dict[str, int]]:
        """Each mailbox group's GROUP_KINDS summed over the campaign."""
        return {
            group: {kind: sum(b.counts.get(kind, 0) for b in buckets) for kind in GROUP_KINDS}
            for group, buckets in self.groups_over_time.items()
        }

    def held_back(self) -> dict[str, int]:
        """Where a cap held the campaign back: the emails each mailbox group's cap held to a
        later second (groups with any; the bars with `held` say when). A warm-up cap pauses
        the campaign instead: its marks say so, with the reason."""
        return {group: totals["held"] for group, totals in self.group_totals().items() if totals["held"]}

    @property
    def outcomes(self) -> dict[str, int]:
        status = self.status
        return {
            "sent": status.sent,
            "failed": status.failed,
            "suppressed": status.suppressed,
            "unknown": status.unknown,
            "dead_lettered": status.dead_lettered,
            "cancelled": status.cancelled,
            "remaining": status.pending + status.in_progress,
        }

    def figures(self) -> dict[str, Any]:
        """The numbers the page prints (and its tests read back)."""
        return {
            "total": self.status.total,
            **self.outcomes,
            "duplicates_prevented": sum(sum(b.counts.values()) for b in self.duplicates_prevented),
            "bounced": sum(v.get("bounced", 0) for v in self.feedback_by_domain.values()),
            "complained": sum(v.get("complained", 0) for v in self.feedback_by_domain.values()),
        }


def bucket_width(buckets: Iterable[Bucket], *, max_points: int = MAX_POINTS) -> int:
    """The narrowest whole number of minutes that draws the span in at most `max_points` bars."""
    starts = [b.start_ms for b in buckets]
    if not starts:
        return MINUTE_MS
    minutes = (max(starts) - min(starts)) // MINUTE_MS + 1
    return MINUTE_MS * max(1, math.ceil(minutes / max_points))


def fold(buckets: Iterable[Bucket], width_ms: int, *, origin: int | None = None) -> list[Bucket]:
    """Per-minute buckets summed into buckets `width_ms` wide, in time order, counted from the
    first minute (aligned to the epoch instead, a span could straddle one bar more)."""
    buckets = list(buckets)
    if origin is None:
        origin = min((b.start_ms for b in buckets), default=0)
    summed: dict[int, Counter[str]] = {}
    for bucket in buckets:
        start = origin + (bucket.start_ms - origin) // width_ms * width_ms
        summed.setdefault(start, Counter()).update({k: v for k, v in bucket.counts.items() if v})
    return [Bucket(start, dict(counts)) for start, counts in sorted(summed.items())]


def trouble(counts: Mapping[str, int]) -> int:
    return counts.get("bounced", 0) + counts.get("complained", 0)


def top_domains(by_domain: Mapping[str, Mapping[str, int]], *, limit: int = MAX_DOMAINS) -> dict[str, dict[str, int]]:
    """The `limit` domains with the most bounces and complaints, the rest summed as OTHER_DOMAINS."""
    ranked = sorted(by_domain.items(), key=lambda item: (-trouble(item[1]), -sum(item[1].values()), item[0]))
    shown = {domain: dict(counts) for domain, counts in ranked[:limit]}
    rest: Counter[str] = Counter()
    for _, counts in ranked[limit:]:
        rest.update(counts)
    if rest:
        shown[OTHER_DOMAINS] = dict(rest)
    return shown


def by_group(
    by_domain: Mapping[str, Mapping[str, int]], groups: MailboxGroups | None = None
) -> dict[str, dict[str, int]]:
    """Per-domain counts summed per mailbox-provider group (deliverability/mailbox_groups.py),
    the groups with any, in the table's order. A domain the aggregator folded into
    OTHER_DOMAINS (a batch of stream records with too many domains) counts as `other`."""
    groups = groups or MailboxGroups()
    summed: dict[str, Counter[str]] = {}
    for domain, counts in by_domain.items():
        summed.setdefault(groups.of_domain(domain), Counter()).update(counts)
    return {name: dict(summed[name]) for name in groups.names if name in summed}


def groups_over_time(
    per_minute: Mapping[str, Iterable[Bucket]],
    width_ms: int,
    *,
    origin: int,
    groups: MailboxGroups | None = None,
) -> dict[str, list[Bucket]]:
    """Each mailbox group's minutes folded like the timeline, the groups in the table's
    order (a group the deployment added after them, by name)."""
    order = {name: i for i, name in enumerate((groups or MailboxGroups()).names)}
    ranked = sorted(per_minute, key=lambda g: (order.get(g, len(order)), g))
    return {group: fold(per_minute[group], width_ms, origin=origin) for group in ranked}


def variants_over_time(
    results: AbResults | None, per_minute: Mapping[str, Iterable[Bucket]], width_ms: int, *, origin: int
) -> dict[str, list[Bucket]]:
    """Each test variant's minutes, then the rest's (REST), folded like the timeline; none
    for a campaign without a test."""
    if results is None:
        return {}
    keys = (*(v.variant for v in results.variants), results.rest.variant)
    return {key: fold(per_minute.get(key, ()), width_ms, origin=origin) for key in keys}


def pick_marks(results: AbResults | None) -> list[Mark]:
    """An A/B test's decision as a move on the timeline: the winner, when, by whom and why."""
    if results is None or results.decision is None:
        return []
    decision = results.decision
    return [Mark(at_ms=decision.at_ms, event=f"pick {decision.variant}", by=decision.by, reason=decision.reason)]


def engagement_of(campaign: Any, aggregates: ReportAggregates) -> tuple[dict[str, int] | None, str | None]:
    """The campaign's unique opens and clicks (the kinds it tracks), or None and why not."""
    tracking = getattr(campaign, "tracking", None)
    kinds = [k for k in ENGAGEMENT_COUNTS if tracking is not None and tracking.records(k)]
    if not kinds:
        return None, "this campaign does not track opens or clicks (its spec's `tracking`)"
    totals = {k: sum(b.counts.get(k, 0) for b in aggregates.engagement_per_minute) for k in kinds}
    return totals, None


def build_report(
    *,
    campaign: Any,
    status: DeliveryStatus,
    aggregates: ReportAggregates,
    marks: Iterable[Mark] = (),
    audit: AuditVerdict | None = None,
    others: Mapping[str, Iterable[Bucket]] | None = None,
    others_left_out: int = 0,
    now_ms: int,
) -> CampaignReport:
    """The report of `campaign` (a domain Campaign) from its status and aggregates."""
    minutes = [
        *aggregates.outcomes_per_minute,
        *aggregates.duplicates_prevented_per_minute,
        *(b for buckets in aggregates.groups_per_minute.values() for b in buckets),
        *aggregates.engagement_per_minute,
        *(b for buckets in aggregates.variants_per_minute.values() for b in buckets),
    ]
    width = bucket_width(minutes)
    origin = min((b.start_ms for b in minutes), default=0)  # both charts' bars line up
    engagement, off_reason = engagement_of(campaign, aggregates)
    results = ab_results(campaign, aggregates.variants)
    unknowns = {
        "open": status.unknown,
        "settled_sent": aggregates.unknowns_settled.get("sent", 0),
        "settled_not_sent": aggregates.unknowns_settled.get("not_sent", 0),
    }
    return CampaignReport(
        campaign_id=campaign.campaign_id,
        name=campaign.name,
        subject=campaign.subject,
        provider=campaign.provider,
        delivery_mode=campaign.delivery_mode,
        status=status,
        generated_at_ms=now_ms,
        bucket_ms=width,
        timeline=fold(aggregates.outcomes_per_minute, width, origin=origin),
        duplicates_prevented=fold(aggregates.duplicates_prevented_per_minute, width, origin=origin),
        marks=sorted([*aggregates.marks, *marks, *pick_marks(results)], key=lambda m: m.at_ms),
        feedback_by_domain=top_domains(aggregates.feedback_by_domain),
        feedback_by_group=by_group(aggregates.feedback_by_domain),
        groups_over_time=groups_over_time(aggregates.groups_per_minute, width, origin=origin),
        unknowns=unknowns,
        engagement=engagement,
        engagement_off_reason=None if engagement is not None else off_reason,
        engagement_over_time=fold(aggregates.engagement_per_minute, width, origin=origin),
        variants=results,
        variants_over_time=variants_over_time(results, aggregates.variants_per_minute, width, origin=origin),
        audit=audit,
        others={cid: fold(buckets, width, origin=origin) for cid, buckets in (others or {}).items()},
        others_left_out=others_left_out,
    )


def sending_span(aggregates: ReportAggregates) -> tuple[int, int] | None:
    """The first and last minute the campaign ended a delivery in; None before any."""
    minutes = [b.start_ms for b in aggregates.outcomes_per_minute]
    return (min(minutes), max(minutes)) if minutes else None


def could_send_within(campaign: Campaign, span: tuple[int, int]) -> bool:
    """Whether the listed `campaign` may have sent during `span`, from its listing alone: not
    before it was created, and, unless it is sending now, not long after its last change."""
    if campaign.state in (CampaignState.DRAFT, CampaignState.SCHEDULED):
        return False  # it has not started (a scheduled one that ran moved to sending)
    created = epoch_ms(campaign.created_at)
    if created is not None and minute_of(created) > span[1]:
        return False
    changed = epoch_ms(campaign.updated_at)
    if campaign.state is CampaignState.SENDING or changed is None:
        return True
    return changed + STOP_SLACK_MS >= span[0]


def overlapping(
    campaigns: Iterable[Campaign], span: tuple[int, int], *, exclude: str, limit: int = MAX_OTHERS
) -> tuple[list[Campaign], int]:
    """The `limit` most recently created campaigns (other than `exclude`) that may have sent
    within `span`, and how many more did."""
    found = [c for c in campaigns if c.campaign_id != exclude and could_send_within(c, span)]
    found.sort(key=lambda c: (epoch_ms(c.created_at) or 0, c.campaign_id), reverse=True)
    return found[:limit], max(0, len(found) - limit)


def sent_within(aggregates: ReportAggregates, span: tuple[int, int]) -> list[Bucket]:
    """A campaign's sends per minute within `span` (minutes it sent nothing are left out)."""
    return [
        Bucket(b.start_ms, {"sent": b.counts.get("sent", 0)})
        for b in aggregates.outcomes_per_minute
        if span[0] <= b.start_ms <= span[1] and b.counts.get("sent", 0)
    ]


class CampaignReader(Protocol):
    """What the report reads of the campaigns (the campaign service gives it)."""

    def get(self, campaign_id: str) -> Campaign: ...

    def status(self, campaign_id: str) -> DeliveryStatus: ...

    def list_campaigns(self) -> Iterable[Campaign]: ...


class ReportService:
    """Assembles a campaign's report from its status and its aggregates: two reads whose
    cost does not grow with the number of recipients; then, once it has sent, the campaign
    listing and the aggregates of at most MAX_OTHERS others that sent at the same time."""

    def __init__(self, *, campaigns: CampaignReader, aggregates: ReportAggregatesStore, clock: Any) -> None:
        self._campaigns = campaigns
        self._aggregates = aggregates
        self._clock = clock

    def report(self, campaign_id: str) -> CampaignReport:
        campaign = self._campaigns.get(campaign_id)
        aggregates = self._aggregates.aggregates(campaign_id)
        others, left_out = self._others(campaign_id, sending_span(aggregates))
        return build_report(
            campaign=campaign,
            status=self._campaigns.status(campaign_id),
            aggregates=aggregates,
            others=others,
            others_left_out=left_out,
            now_ms=self._clock(),
        )

    def _others(self, campaign_id: str, span: tuple[int, int] | None) -> tuple[dict[str, list[Bucket]], int]:
        if span is None:
            return {}, 0
        candidates, left_out = overlapping(self._campaigns.list_campaigns(), span, exclude=campaign_id)
        others = {c.campaign_id: sent_within(self._aggregates.aggregates(c.campaign_id), span) for c in candidates}
        return {cid: buckets for cid, buckets in others.items() if buckets}, left_out
