"""Mailbox-provider groups (issue 32, item 1): which mailbox provider a recipient's domain
belongs to, as one table of data that a deployment can extend.

A sender's reputation is kept per mailbox provider (Gmail, Outlook, Yahoo each judge the mail
they receive), so the figures that guard it are per group: how many recipients a campaign has
at each (`campaign forecast`), and, as they land, the caps that pace each.

A domain pattern is a domain (`gmail.com`: that domain only) or a first label and a star
(`hotmail.*`: `hotmail.com`, `hotmail.co.uk`, any domain whose first label is `hotmail`).
A domain no pattern matches is `other`. Matching ignores case.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

from sendonce.domain.errors import InvalidCampaignError

OTHER = "other"
DEFAULT_GROUPS: Mapping[str, tuple[str, ...]] = {
    "google": ("gmail.com", "googlemail.com"),
    "microsoft": ("outlook.com", "hotmail.*", "live.*", "msn.com"),
    "yahoo": ("yahoo.*", "ymail.com", "aol.com"),
    "apple": ("icloud.com", "me.com", "mac.com"),
}
_GROUP_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})+")
_FIRST_LABEL = re.compile(rf"({_LABEL})\.\*")


class MailboxGroupsError(InvalidCampaignError):
    """A groups table that cannot be used; the message names the group and the pattern."""


class MailboxGroups:
    """Domain -> group, from the table `groups` (group -> domain patterns)."""

    def __init__(self, groups: Mapping[str, Iterable[str]] = DEFAULT_GROUPS):
        self._exact: dict[str, str] = {}
        self._first_label: dict[str, str] = {}
        self._table: dict[str, tuple[str, ...]] = {}
        for group, patterns in groups.items():
            self._add(group, tuple(patterns))

    def _add(self, group: str, patterns: tuple[str, ...]) -> None:
        if not isinstance(group, str) or not _GROUP_NAME.fullmatch(group) or group == OTHER:
            raise MailboxGroupsError(
                f"mailbox group {group!r}: a name is 1-32 lowercase letters, digits or '-', starting with a letter"
                f" ({OTHER!r} is what no pattern matches)"
            )
        if not patterns:
            raise MailboxGroupsError(f"mailbox group {group!r}: no domain pattern")
        for raw in patterns:
            pattern = str(raw).strip().lower()
            star = _FIRST_LABEL.fullmatch(pattern)
            if star is None and not _DOMAIN.fullmatch(pattern):
                raise MailboxGroupsError(
                    f"mailbox group {group!r}: {raw!r} is neither a domain (gmail.com) nor a first label and a star"
                    " (hotmail.*)"
                )
            index, key = (self._first_label, star[1]) if star else (self._exact, pattern)
            if index.get(key, group) != group:
                raise MailboxGroupsError(f"mailbox group {group!r}: {raw!r} is already in group {index[key]!r}")
            index[key] = group
        self._table[group] = tuple(self._table.get(group, ())) + tuple(str(p).strip().lower() for p in patterns)

    @property
    def table(self) -> dict[str, tuple[str, ...]]:
        """Group -> its domain patterns, as matched."""
        return dict(self._table)

    @property
    def names(self) -> tuple[str, ...]:
        """Every group, `other` last."""
        return (*self._table, OTHER)

    def extended(self, more: Mapping[str, Iterable[str]]) -> MailboxGroups:
        """This table with `more`'s patterns added (to a group of the table, or to a new one);
        a pattern already in another group is refused."""
        merged = MailboxGroups(self._table)
        for group, patterns in more.items():
            merged._add(group, tuple(patterns))
        return merged

    def of_domain(self, domain: str) -> str:
        domain = domain.strip().lower().rstrip(".")
        if domain in self._exact:
            return self._exact[domain]
        first, dot, rest = domain.partition(".")
        if dot and rest and first in self._first_label:
            return self._first_label[first]
        return OTHER

    def of_address(self, address: str) -> str:
        return self.of_domain(address.rpartition("@")[2])

    def count(self, addresses: Iterable[str]) -> dict[str, int]:
        """Addresses per group, every group listed (0 included), `other` last."""
        counts = Counter(self.of_address(a) for a in addresses)
        return {name: counts.get(name, 0) for name in self.names}
