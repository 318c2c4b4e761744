"""Gmail's Feedback-ID header: which campaign, stream and customer a spam report is about.

Every email carries one, composed before it goes to the provider (which DKIM-signs what it
is given, so the header is signed with the rest):

    Feedback-ID: <campaign_id>:<stream>:<customer>:<sender_id>

Gmail aggregates spam reports by each of the four colon-separated fields from the right; the
last, the SenderId, is mandatory (5-15 characters) and must stay the same across the mail
stream, so it is the deployment's, not a campaign's. The campaign id is already limited to
letters, digits, '_' and '-' (models.ID_PATTERN). Nothing about a recipient ever goes in:
Gmail reports only on identifiers with volume, and a per-recipient value would both defeat
that and leak who was sent what (docs/deliverability.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADER = "Feedback-ID"
DEFAULT_SENDER_ID = "sendonce"
DEFAULT_STREAM = "campaign"
SENDER_ID_LENGTH = (5, 15)  # Gmail's bounds for the SenderId
PART_MAX_LENGTH = 32  # stream and customer: short enough to keep the header on one line
# No colon (it separates the fields), no space or other character a header value would need
# folded or encoded: what is configured is what Gmail reports.
_SAFE = re.compile(r"[A-Za-z0-9._-]*")
SAFE_CHARACTERS = "letters, digits, '.', '_' and '-'"


def _charset_problem(value: str) -> str | None:
    if _SAFE.fullmatch(value):
        return None
    why = " (a colon would split the header's fields)" if ":" in value else ""
    return f"{value!r} has characters other than {SAFE_CHARACTERS}{why}"


def sender_id_problem(value: str) -> str | None:
    """What is wrong with `value` as the SenderId, or None."""
    low, high = SENDER_ID_LENGTH
    if not low <= len(value) <= high:
        return f"a SenderId of {len(value)} characters: Gmail's Feedback-ID needs {low}-{high}"
    return _charset_problem(value)


def stream_problem(value: str) -> str | None:
    """What is wrong with `value` as the stream (1-32 characters), or None."""
    if not 1 <= len(value) <= PART_MAX_LENGTH:
        return f"a stream of {len(value)} characters: it needs 1-{PART_MAX_LENGTH}"
    return _charset_problem(value)


def customer_problem(value: str) -> str | None:
    """What is wrong with `value` as the customer (empty, or up to 32 characters), or None."""
    if len(value) > PART_MAX_LENGTH:
        return f"a customer of {len(value)} characters: at most {PART_MAX_LENGTH}"
    return _charset_problem(value)


def problems(sender_id: str, stream: str, customer: str) -> list[tuple[str, str]]:
    """(field, what is wrong) for each bad part; empty when all three are valid."""
    found = [
        ("sender_id", sender_id_problem(sender_id)),
        ("stream", stream_problem(stream)),
        ("customer", customer_problem(customer)),
    ]
    return [(name, problem) for name, problem in found if problem is not None]


@dataclass(frozen=True)
class FeedbackId:
    """The deployment's Feedback-ID parts; raises ValueError naming each bad field."""

    sender_id: str = DEFAULT_SENDER_ID
    stream: str = DEFAULT_STREAM
    customer: str = ""

    def __post_init__(self) -> None:
        found = problems(self.sender_id, self.stream, self.customer)
        if found:
            raise ValueError("invalid Feedback-ID: " + "; ".join(f"{name}: {problem}" for name, problem in found))

    def value(self, campaign_id: str) -> str:
        return f"{campaign_id}:{self.stream}:{self.customer}:{self.sender_id}"

    def header(self, campaign_id: str) -> tuple[str, str]:
        """(name, value) of the header a campaign's emails carry."""
        return HEADER, self.value(campaign_id)
