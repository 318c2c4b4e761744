"""Pacing per mailbox-provider group (issue 32, item 1): caps in emails per second on what
every campaign of the deployment sends to a group (`pacing: {google: 40}`), and a campaign's
own caps under them (its spec's `pacing`).

A cap binds every campaign at once: the consumers take a group's places in a one-second slot
shared through the campaigns table (adapters/dynamodb/group_caps.py), an email a place, and
a slot never hands out more than the cap. A campaign's cap is counted in the same slot item.

In batch mode a send group never mixes mailbox groups, and one to a capped group carries at
most half the tightest cap: two such requests share a second, so a request that finds a
second partly taken by others (single-mode sends, other campaigns) may still fit in it, and
the provider's request rate (Resend: 5 a second) is not spent on many small requests. A
request is sent in the second its places were taken in: when the provider's rate makes it
wait past that second, its places go unused and it takes new ones.

A group answering with deferrals (Gmail's 421 4.7.28, Yahoo's 421 4.7.0 [TSS04], a delivery
delay the provider reports) slows that group alone: its cap is multiplied by a shared factor
that each deferral cuts and that recovers while none arrives, as the provider limiter's does
on a 429.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sendonce.domain.deliverability.mailbox_groups import OTHER, MailboxGroups, MailboxGroupsError
from sendonce.domain.deliverability.ports import EventKind

# Caps are stored as DynamoDB numbers and compared with whole places per second.
CAP_LEAST = 0.001
CAP_MOST = 100_000
# A send group to a capped mailbox group carries at most this share of its cap (see above).
GROUP_SHARE_OF_CAP = 0.5
MAX_SEND_GROUP = 100  # Resend's batch limit
# The deferral codes that say a mailbox provider wants less, in a bounce's or delay's detail.
DEFERRAL_CODES = re.compile(r"4\.7\.28|TSS0\d|throttl", re.IGNORECASE)

T = TypeVar("T")


class PacingError(MailboxGroupsError):
    """A pacing table that cannot be used; the message names the group and the value."""


def parse_pacing(value: object, groups: MailboxGroups, *, where: str = "pacing") -> dict[str, float]:
    """`{group: emails per second}`, each group known to `groups` (`other` included), each cap
    a number from CAP_LEAST to CAP_MOST; anything else is refused naming the field."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PacingError(f"{where}: expected a mapping of mailbox group -> emails per second, got {value!r}")
    caps: dict[str, float] = {}
    for group, cap in value.items():
        if group not in groups.names:
            raise PacingError(
                f"{where}.{group}: unknown mailbox group; the groups are {', '.join(groups.names)}"
                " (a deployment adds its own with mailbox_groups)"
            )
        if isinstance(cap, bool) or not isinstance(cap, int | float) or math.isnan(cap) or math.isinf(cap):
            raise PacingError(f"{where}.{group}: {cap!r} is not a number of emails per second")
        if not CAP_LEAST <= cap <= CAP_MOST:
            raise PacingError(
                f"{where}.{group}: a cap of {cap:g} emails/s; it must be from {CAP_LEAST:g} to {CAP_MOST:,}"
                " (to stop a group, pause the campaign)"
            )
        caps[str(group)] = float(cap)
    return caps


@dataclass(frozen=True)
class GroupPacing:
    """The deployment's mailbox groups and caps; a campaign's caps apply under them."""

    groups: MailboxGroups = field(default_factory=MailboxGroups)
    caps: Mapping[str, float] = field(default_factory=dict)

    def group_of(self, address: str) -> str:
        return self.groups.of_address(address)

    def cap(self, group: str, campaign_caps: Mapping[str, float] | None = None) -> float | None:
        """The tightest cap on `group` for a campaign with `campaign_caps`; None: uncapped."""
        found = [c for c in (self.caps.get(group), (campaign_caps or {}).get(group)) if c is not None]
        return min(found) if found else None

    def capped(self, campaign_caps: Mapping[str, float] | None = None) -> bool:
        """Whether any group is capped for such a campaign."""
        return bool(self.caps) or bool(campaign_caps)

    def send_groups(
        self,
        members: Sequence[T],
        address_of: Callable[[T], str],
        campaign_caps: Mapping[str, float] | None = None,
    ) -> list[list[T]]:
        """`members` (at most one batch) as send groups: one per mailbox group, in the order
        each group first appears, each cut to `send_group_size` of its cap. Deterministic
        for the same members and caps. Without any cap: one group of all."""
        if not self.capped(campaign_caps):
            return [list(members)] if members else []
        by_group: dict[str, list[T]] = {}
        for member in members:
            by_group.setdefault(self.group_of(address_of(member)), []).append(member)
        out: list[list[T]] = []
        for group, those in by_group.items():
            size = send_group_size(self.cap(group, campaign_caps))
            out.extend(those[i : i + size] for i in range(0, len(those), size))
        return out


def send_group_size(cap: float | None) -> int:
    """The most recipients one request to a group with `cap` emails/s carries."""
    if cap is None:
        return MAX_SEND_GROUP
    return max(1, min(MAX_SEND_GROUP, math.floor(cap * GROUP_SHARE_OF_CAP)))


def is_deferral(kind: EventKind, *, hard: bool, detail: str | None) -> bool:
    """Whether a provider event says the recipient's mailbox provider wants less: a soft
    bounce or a delay whose detail names a rate-limit code (4.7.28, TSS04, ...), or a delay
    without any detail (Resend's delays carry no reason)."""
    if kind is EventKind.DELIVERY_DELAYED and not detail:
        return True
    if kind is EventKind.DELIVERY_DELAYED or (kind is EventKind.BOUNCED and not hard):
        return DEFERRAL_CODES.search(detail or "") is not None
    return False


__all__ = [
    "OTHER",
    "GroupPacing",
    "PacingError",
    "is_deferral",
    "parse_pacing",
    "send_group_size",
]
