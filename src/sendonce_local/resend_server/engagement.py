"""Opens and clicks for the local server's webhooks: which recipients of an accepted email open
it, click a link and open it again, by rules matched on its subject (the ``engagement`` knob).

Every decision is a hash of (email id, address, kind) compared with a share, so the same email
always engages the same way and a test can recompute what the server did.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from sendonce_local.resend_server.wire import AcceptedEmail, normalise_address

SHARES = ("opens", "clicks", "reopens")
RULE_KEYS = ("subject_contains", *SHARES)
ANY_SUBJECT = "*"
# Seconds after acceptance: after email.delivered (+0.05 s), as a reader opens a delivered email.
OPEN_AFTER_SECONDS = (0.2, 0.6)
CLICK_AFTER_OPEN_SECONDS = (0.1, 0.3)
REOPEN_AFTER_OPEN_SECONDS = 0.5
DEFAULT_LINK = "https://example.com/"
_LINK = re.compile(r"""href\s*=\s*["'](https?://[^"']+)["']""", re.IGNORECASE)


@dataclass(frozen=True)
class EngagementRule:
    """Shares of an email's ``to`` addresses that open, click and open again."""

    subject_contains: str
    opens: float
    clicks: float
    reopens: float = 0.0

    def matches(self, subject: str) -> bool:
        return self.subject_contains == ANY_SUBJECT or self.subject_contains in subject

    def to_json(self) -> dict[str, Any]:
        return {
            "subject_contains": self.subject_contains,
            "opens": self.opens,
            "clicks": self.clicks,
            "reopens": self.reopens,
        }


class Engagement(NamedTuple):
    opens: bool
    clicks: bool
    reopens: bool


class EngagementEvent(NamedTuple):
    """One webhook to queue: its type, seconds after acceptance, and the address it speaks of."""

    type: str
    delay: float
    recipient: str


def parse_engagement(rules: Iterable[Mapping[str, Any] | EngagementRule] | None) -> tuple[EngagementRule, ...]:
    """The ``engagement`` knob as rules; None or [] clears it. ValueError names the bad field."""
    if rules is None:
        return ()
    if isinstance(rules, (str, bytes, Mapping)) or not isinstance(rules, Iterable):
        raise ValueError("engagement must be a list of rules or null")
    return tuple(_rule(f"engagement[{index}]", rule) for index, rule in enumerate(rules))


def _rule(where: str, rule: Mapping[str, Any] | EngagementRule) -> EngagementRule:
    if isinstance(rule, EngagementRule):
        rule = rule.to_json()
    if not isinstance(rule, Mapping):
        raise ValueError(f"{where} must be an object with keys {list(RULE_KEYS)}")
    unknown = sorted(set(rule) - set(RULE_KEYS))
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; known: {list(RULE_KEYS)}")
    subject = rule.get("subject_contains")
    if not isinstance(subject, str) or not subject:
        raise ValueError(f'{where}.subject_contains must be a non-empty string ("*" for any subject)')
    shares = {}
    for name in SHARES:
        if name not in rule and name != "reopens":
            raise ValueError(f"{where}.{name} is required (a number from 0 to 1)")
        value = rule.get(name, 0.0)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not 0 <= value <= 1
        ):
            raise ValueError(f"{where}.{name} must be a number from 0 to 1")
        shares[name] = float(value)
    return EngagementRule(subject_contains=subject, **shares)


def engagement_draw(email_id: str, address: str, kind: str) -> float:
    """A number in [0, 1) fixed by (email id, address, kind)."""
    digest = hashlib.sha256(f"{email_id}\0{address}\0{kind}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def engagement_of(email_id: str, address: str, rule: EngagementRule) -> Engagement:
    """Whether ``address`` opens, clicks and re-opens the email ``email_id`` under ``rule``.

    Clicks are a share of all recipients and every clicker opens; the others open at the rate
    that makes the share of openers max(opens, clicks). Re-opens are a share of the openers.
    """
    clicks = engagement_draw(email_id, address, "clicked") < rule.clicks
    rest = 0.0 if rule.clicks >= 1 else max(rule.opens - rule.clicks, 0.0) / (1 - rule.clicks)
    opens = clicks or engagement_draw(email_id, address, "opened") < rest
    reopens = opens and engagement_draw(email_id, address, "reopened") < rule.reopens
    return Engagement(opens=opens, clicks=clicks, reopens=reopens)


def engagement_events(record: AcceptedEmail, rules: Iterable[EngagementRule]) -> list[EngagementEvent]:
    """The opens and clicks of ``record``'s ``to`` addresses under the first rule its subject matches."""
    rule = next((r for r in rules if r.matches(record.subject)), None)
    if rule is None:
        return []
    events = []
    addresses = dict.fromkeys(a for raw in record.to if (a := normalise_address(raw)) is not None)
    for address in addresses:
        engaged = engagement_of(record.id, address, rule)
        if not engaged.opens:
            continue
        opened = _between(OPEN_AFTER_SECONDS, engagement_draw(record.id, address, "opened_at"))
        events.append(EngagementEvent("email.opened", opened, address))
        if engaged.clicks:
            click = _between(CLICK_AFTER_OPEN_SECONDS, engagement_draw(record.id, address, "clicked_at"))
            events.append(EngagementEvent("email.clicked", opened + click, address))
        if engaged.reopens:
            events.append(EngagementEvent("email.opened", opened + REOPEN_AFTER_OPEN_SECONDS, address))
    return events


def clicked_link(record: AcceptedEmail) -> str:
    """The link a click reports: the email's first http(s) link, else example.com."""
    found = _LINK.search(record.html or "")
    return found.group(1) if found else DEFAULT_LINK


def _between(bounds: tuple[float, float], draw: float) -> float:
    low, high = bounds
    return low + (high - low) * draw
