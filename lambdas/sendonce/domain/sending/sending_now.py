"""What the operator sees of campaigns sharing a provider's rate (issue 31): who is sending
now, at what rate, with what share, how long their messages wait, and when each will be done.

Read from the shared limiter's slot items (adapters/dynamodb/rate_limiter.py), the
`LimiterSlots` port: one item per provider and second, holding per campaign the places it
took there, how it shares (its `Claimant`) and the dwell of its latest message. A window of
them is one Query per provider: O(window), whatever the campaigns' sizes. What is left to
send comes from the campaign's status (its counters: O(1)).

For each campaign seen in the window, over the window's whole seconds:

- `rate`: its places per second, i.e. provider requests per second (a place reserved and
  then dropped, rare, counts too);
- `share`: its places over all the provider's places there (an audit's listing and test
  sends take places too, so the campaigns' shares may add up to less than 1);
- `assigned_rate`: what `shares.divide` gives it at the rate in force now, among the
  campaigns seen in the window;
- `dwell_s`: how long its latest message waited in the queue before its send;
- `eta_s`: its recipients still to send (pending and in progress; dead-lettered ones wait
  for a redrive, not for the rate) over its rate times the recipients a request carries:
  1 in single mode; in batch mode the provider's batch size, at most one SQS message's
  100. A campaign published in smaller batches (`publish --batch-size`) carries fewer per
  request, so its ETA is then early.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sendonce.domain.campaigns.status import DeliveryStatus
from sendonce.domain.errors import CampaignNotFoundError
from sendonce.domain.models import MAX_RECIPIENTS_PER_BATCH, Campaign
from sendonce.domain.sending.shares import Claimant, divide

DEFAULT_WINDOW_S = 30
MAX_WINDOW_S = 3600  # the limiter keeps its slot items this long (SLOT_RETENTION_S)


@dataclass(frozen=True)
class SlotUsage:
    """One second of one provider's shared rate, as its slot item says."""

    slot: int  # epoch second
    used: int  # places taken in it, by every campaign and every other request
    places: Mapping[str, int]  # campaign id -> places it took
    claimants: Mapping[str, Claimant]  # campaign id -> how it shares
    dwell_ms: Mapping[str, int]  # campaign id -> how long its latest message waited


class LimiterSlots(Protocol):
    """The shared limiter's slot items, read (never written) for the operator."""

    def read(self, provider: str, *, first: int, last: int) -> list[SlotUsage]:
        """The provider's slots from second `first` to `last`, both included, oldest first
        (seconds nobody asked in are absent): one Query, paged."""
        ...

    def rate(self, provider: str) -> float | None:
        """The provider's rate in force now (requests/s), as the consumers compute it: the
        limit (stated by the provider, else configured) less the reserve, times the shared
        throttle factor. None: the provider is not known here."""
        ...


class CampaignProgress(Protocol):
    """What a campaign is and how far it is (the operator service answers both)."""

    def get(self, campaign_id: str) -> Campaign: ...

    def status(self, campaign_id: str) -> DeliveryStatus: ...


@dataclass(frozen=True)
class CampaignSending:
    """One campaign seen sending in the window."""

    campaign_id: str
    provider: str
    claimant: Claimant  # as its latest slot says it shares
    window_s: int
    places: int
    share: float  # of the provider's places in the window
    assigned_rate: float | None  # requests/s divide() gives it now; None: rate in force unknown
    dwell_ms: int | None  # its latest message's wait in the queue; None: no send recorded one
    seen_s_ago: int  # seconds from its latest slot to now
    to_send: int | None = None  # recipients pending or in progress; None: status unread
    recipients_per_request: int | None = None

    @property
    def rate(self) -> float:
        """Its provider requests per second over the window."""
        return self.places / self.window_s

    @property
    def dwell_s(self) -> float | None:
        return None if self.dwell_ms is None else self.dwell_ms / 1000

    @property
    def eta_s(self) -> float | None:
        """Seconds until its recipients still to send are sent, at its rate in the window;
        None when it took no place there (or what is left is unknown)."""
        if self.to_send is None or self.recipients_per_request is None:
            return None
        if self.to_send == 0:
            return 0.0
        if not self.places:
            return None
        return self.to_send / (self.rate * self.recipients_per_request)

    def as_dict(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "provider": self.provider,
            "weight": self.claimant.weight,
            "priority": self.claimant.priority,
            "max_rate": self.claimant.max_rate,
            "window_s": self.window_s,
            "places": self.places,
            "rate": self.rate,
            "share": self.share,
            "assigned_rate": self.assigned_rate,
            "dwell_s": self.dwell_s,
            "seen_s_ago": self.seen_s_ago,
            "to_send": self.to_send,
            "recipients_per_request": self.recipients_per_request,
            "eta_s": self.eta_s,
        }


@dataclass(frozen=True)
class ProviderSending:
    """One provider's rate in the window and the campaigns that shared it."""

    provider: str
    window_s: int
    places: int  # every place taken in the window
    rate_in_force: float | None
    campaigns: tuple[CampaignSending, ...]

    @property
    def rate(self) -> float:
        return self.places / self.window_s

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "window_s": self.window_s,
            "places": self.places,
            "rate": self.rate,
            "rate_in_force": self.rate_in_force,
            "campaigns": len(self.campaigns),
        }


def tally(
    provider: str, slots: Iterable[SlotUsage], *, window_s: int, now_slot: int, rate_in_force: float | None
) -> ProviderSending:
    """The campaigns in `slots` (the window's, any order) with their places, shares and
    latest claimant and dwell; without what they have left to send."""
    places: dict[str, int] = {}
    claimants: dict[str, tuple[int, Claimant]] = {}
    dwell: dict[str, tuple[int, int]] = {}
    used = 0
    for usage in slots:
        used += usage.used
        for cid, n in usage.places.items():
            places[cid] = places.get(cid, 0) + n
        for cid, claimant in usage.claimants.items():
            if cid not in claimants or claimants[cid][0] < usage.slot:
                claimants[cid] = (usage.slot, claimant)
        for cid, ms in usage.dwell_ms.items():
            if cid not in dwell or dwell[cid][0] < usage.slot:
                dwell[cid] = (usage.slot, ms)
    # `used` counts every place; a campaign's own count is within it (never above it).
    used = max(used, sum(places.values()))
    assigned = divide(rate_in_force, [c for _, c in claimants.values()]) if rate_in_force is not None else {}
    campaigns = [
        CampaignSending(
            campaign_id=cid,
            provider=provider,
            claimant=claimant,
            window_s=window_s,
            places=places.get(cid, 0),
            share=places.get(cid, 0) / used if used else 0.0,
            assigned_rate=assigned.get(cid) if rate_in_force is not None else None,
            dwell_ms=dwell[cid][1] if cid in dwell else None,
            seen_s_ago=now_slot - seen,
        )
        for cid, (seen, claimant) in claimants.items()
    ]
    campaigns.sort(key=lambda c: (-c.places, c.campaign_id))
    return ProviderSending(
        provider=provider, window_s=window_s, places=used, rate_in_force=rate_in_force, campaigns=tuple(campaigns)
    )


def to_send(status: DeliveryStatus) -> int:
    """The recipients the consumers still have to send (dead-lettered ones wait for a redrive)."""
    return status.pending + status.in_progress


class SendingNow:
    """`sendonce sending` and the sharing lines of `campaign status|watch`."""

    def __init__(
        self,
        *,
        slots: LimiterSlots,
        campaigns: CampaignProgress,
        batch_sizes: Mapping[str, int],
        clock: Callable[[], float],
    ):
        """`batch_sizes`: every provider to read, with the most recipients one of its
        batch-mode requests carries (1 for a provider without batches)."""
        self._slots = slots
        self._campaigns = campaigns
        self._batch_sizes = dict(batch_sizes)
        self._clock = clock

    def providers(self, *, window_s: int = DEFAULT_WINDOW_S) -> list[ProviderSending]:
        """Every provider a campaign sent with in the last `window_s` seconds, each campaign
        with what it has left and its ETA (two small reads per campaign)."""
        found = [self.provider(provider, window_s=window_s) for provider in self._batch_sizes]
        return [sending for sending in found if sending.campaigns]

    def provider(self, provider: str, *, window_s: int = DEFAULT_WINDOW_S) -> ProviderSending:
        """One provider's campaigns sending in the last `window_s` seconds, each with what it
        has left (a forecast reads its own provider's only)."""
        sending = self._provider(provider, window_s)
        campaigns = []
        for c in sending.campaigns:
            try:
                campaign = self._campaigns.get(c.campaign_id)
                status = self._campaigns.status(c.campaign_id)
            except CampaignNotFoundError:  # another deployment's campaign on the same table
                campaigns.append(c)
                continue
            campaigns.append(self._with_progress(c, campaign, status))
        return replace(sending, campaigns=tuple(campaigns))

    def campaign(
        self, campaign: Campaign, status: DeliveryStatus, *, window_s: int = DEFAULT_WINDOW_S
    ) -> CampaignSending | None:
        """The campaign as its provider's slots show it in the window; None: not sending now."""
        sending = self._provider(campaign.provider, window_s, only=campaign.campaign_id)
        found = next((c for c in sending.campaigns if c.campaign_id == campaign.campaign_id), None)
        return None if found is None else self._with_progress(found, campaign, status)

    def rate_in_force(self, provider: str) -> float | None:
        """The rate the shared limiter paces the provider at now (its learned or configured
        limit, less the reserve, times its throttle factor), whoever is sending; None: a
        provider it does not pace."""
        return self._slots.rate(provider)

    def batch_size(self, provider: str) -> int:
        """The most recipients one of the provider's batch-mode requests carries."""
        return min(self._batch_sizes.get(provider, 1), MAX_RECIPIENTS_PER_BATCH)

    def _provider(self, provider: str, window_s: int, only: str | None = None) -> ProviderSending:
        if not 1 <= window_s <= MAX_WINDOW_S:
            raise ValueError(f"window must be 1..{MAX_WINDOW_S} seconds, not {window_s}")
        now_slot = int(self._clock())
        # The window's whole seconds: the current one is still filling.
        slots = self._slots.read(provider, first=now_slot - window_s, last=now_slot - 1)
        if only is not None and not any(only in s.claimants for s in slots):
            return ProviderSending(provider=provider, window_s=window_s, places=0, rate_in_force=None, campaigns=())
        rate = self._slots.rate(provider) if slots else None
        return tally(provider, slots, window_s=window_s, now_slot=now_slot, rate_in_force=rate)

    def _with_progress(self, sending: CampaignSending, campaign: Campaign, status: DeliveryStatus) -> CampaignSending:
        per_request = 1
        if campaign.delivery_mode == "batch":
            per_request = min(
                self._batch_sizes.get(campaign.provider, MAX_RECIPIENTS_PER_BATCH), MAX_RECIPIENTS_PER_BATCH
            )
        return replace(sending, to_send=to_send(status), recipients_per_request=per_request)
