"""The operator API's routes as its OpenAPI document states them, for use at run time: the
links from an answer naming a campaign to the operations on it, and the methods each path
serves (a 405's `Allow`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# The operations on one campaign, which every answer naming a campaign links to by its
# `campaign_id` (OpenAPI links): a client, or Schemathesis' stateful phase, goes from a
# created campaign to every operation on that same campaign, so each is reached with a real
# campaign in whatever state the sequence left it.
CAMPAIGN_OPERATIONS = {
    "GetCampaign": ("get", "/campaigns/{campaign_id}"),
    "Publish": ("post", "/campaigns/{campaign_id}/publish"),
    "Forecast": ("post", "/campaigns/{campaign_id}/forecast"),
    "Pause": ("post", "/campaigns/{campaign_id}/pause"),
    "Resume": ("post", "/campaigns/{campaign_id}/resume"),
    "Cancel": ("post", "/campaigns/{campaign_id}/cancel"),
    "Pick": ("post", "/campaigns/{campaign_id}/pick"),
    "DeliveryStatus": ("get", "/campaigns/{campaign_id}/delivery-status"),
    "Preview": ("post", "/campaigns/{campaign_id}/preview"),
    "TestSend": ("post", "/campaigns/{campaign_id}/test-sends"),
    "Reschedule": ("post", "/campaigns/{campaign_id}/reschedule"),
    "Unschedule": ("post", "/campaigns/{campaign_id}/unschedule"),
    "Reconcile": ("post", "/campaigns/{campaign_id}/reconcile"),
    "Audit": ("post", "/campaigns/{campaign_id}/audit"),
}
# An answer naming a job links to the job.
JOB_OPERATIONS = {"GetJob": ("get", "/jobs/{job_id}")}


def campaign_links() -> dict[str, Any]:
    """The `links` of a response whose body has `campaign_id`."""
    return _links(CAMPAIGN_OPERATIONS, "campaign_id")


def job_links() -> dict[str, Any]:
    """The `links` of a response whose body has `job_id`."""
    return _links(JOB_OPERATIONS, "job_id")


def _links(operations: Mapping[str, tuple[str, str]], field: str) -> dict[str, Any]:
    return {
        name: {
            # A JSON pointer to the operation: "/" in a path is "~1" (RFC 6901).
            "operationRef": f"#/paths/{path.replace('~', '~0').replace('/', '~1')}/{method}",
            "parameters": {field: f"$response.body#/{field}"},
        }
        for name, (method, path) in operations.items()
    }


def _path_pattern(path: str) -> re.Pattern[str]:
    return re.compile("[^/]+".join(re.escape(part) for part in re.split(r"\{[^}]+\}", path)))


class ServedPaths:
    """Paths as OpenAPI writes them (`/campaigns/{campaign_id}`: a parameter is one segment)
    and the methods each serves."""

    def __init__(self, paths: Mapping[str, Iterable[str]], *, bodies: Iterable[tuple[str, str]] = ()):
        self._paths = [
            (_path_pattern(path), methods)
            for path, methods in ((p, sorted(m.upper() for m in ms)) for p, ms in paths.items())
        ]
        self._bodies = [(method, _path_pattern(path)) for method, path in bodies]

    def takes_body(self, method: str, path: str) -> bool:
        """Whether the operation `method` `path` takes a request body (`bodies`, METHOD and path)."""
        return any(m == method.upper() and pattern.fullmatch(path) for m, pattern in self._bodies)

    def methods(self, path: str) -> list[str]:
        """The methods served on `path`, sorted; empty when no route has this path."""
        return sorted({m for pattern, methods in self._paths if pattern.fullmatch(path) for m in methods})
