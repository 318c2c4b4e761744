"""The operator API's routes as its OpenAPI document states them, for use at run time: the
links from an answer naming a campaign to the operations on it, and the methods each path
serves (a 405's `Allow`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# The operations on one campaign, which every answer naming a campaign links to by its
# `campaign_id` (OpenAPI links): a client, or Schemathesis' stateful phase, goes from a
# created campaign to publishing, pausing, resuming and cancelling that same campaign.
CAMPAIGN_OPERATIONS = {
    "GetCampaign": ("get", "/campaigns/{campaign_id}"),
    "Publish": ("post", "/campaigns/{campaign_id}/publish"),
    "Pause": ("post", "/campaigns/{campaign_id}/pause"),
    "Resume": ("post", "/campaigns/{campaign_id}/resume"),
    "Cancel": ("post", "/campaigns/{campaign_id}/cancel"),
    "DeliveryStatus": ("get", "/campaigns/{campaign_id}/delivery-status"),
}
# Not linked: preview and test sends change nothing about the campaign, and a stateful
# fuzz that followed them would reach the operations that do less often; reschedule and
# unschedule act only on a scheduled campaign, which a link from an answer rarely is (a
# publish with send_at in the future is needed first): followed, they answer 409 and take
# the same share from the others. A job is named by a resume's or cancel's answer, not a
# campaign. Reconcile and audit change nothing and read the whole ledger (as a job).
UNLINKED_OPERATIONS = {
    ("post", "/campaigns/{campaign_id}/preview"),
    ("post", "/campaigns/{campaign_id}/test-sends"),
    ("post", "/campaigns/{campaign_id}/reschedule"),
    ("post", "/campaigns/{campaign_id}/unschedule"),
    ("post", "/campaigns/{campaign_id}/reconcile"),
    ("post", "/campaigns/{campaign_id}/audit"),
    ("get", "/jobs/{job_id}"),
}


def campaign_links() -> dict[str, Any]:
    """The `links` of a response whose body has `campaign_id`."""
    return {
        name: {
            # A JSON pointer to the operation: "/" in a path is "~1" (RFC 6901).
            "operationRef": f"#/paths/{path.replace('~', '~0').replace('/', '~1')}/{method}",
            "parameters": {"campaign_id": "$response.body#/campaign_id"},
        }
        for name, (method, path) in CAMPAIGN_OPERATIONS.items()
    }


class ServedPaths:
    """Paths as OpenAPI writes them (`/campaigns/{campaign_id}`: a parameter is one segment)
    and the methods each serves."""

    def __init__(self, paths: Mapping[str, Iterable[str]]):
        self._paths = [
            (re.compile("[^/]+".join(re.escape(part) for part in re.split(r"\{[^}]+\}", path))), methods)
            for path, methods in ((p, sorted(m.upper() for m in ms)) for p, ms in paths.items())
        ]

    def methods(self, path: str) -> list[str]:
        """The methods served on `path`, sorted; empty when no route has this path."""
        return sorted({m for pattern, methods in self._paths if pattern.fullmatch(path) for m in methods})
