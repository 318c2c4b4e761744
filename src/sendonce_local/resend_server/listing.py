"""Reading back what was sent, as Resend's API answers it: List Sent Emails (`GET /emails`)
and Retrieve Email (`GET /emails/{id}`).

List: newest first; `limit` 1-100 (default 20); `after` / `before` take an email id (the
cursor itself excluded); `has_more`; each item carries id, to, from, subject, created_at,
cc, bcc, reply_to, last_event and scheduled_at, and no tags. Retrieve adds html, text and
the tags. Both list and retrieve only what is inside the retention window (Resend keeps
sent emails for the plan's retention, a few days: `retention_seconds`, steerable), and
both count against the team's rate limit like a send.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from sendonce_local.resend_server.wire import AcceptedEmail, _ApiError, _iso, _Reply

DEFAULT_LIST_LIMIT = 20
MAX_LIST_LIMIT = 100
# Resend lists sent emails only as far back as the plan's retention ("a few days").
DEFAULT_RETENTION_SECONDS = 3 * 24 * 60 * 60


class EmailListing:
    """The read endpoints of LocalResendServer (a mixin: the state lives on the server)."""

    def set_retention(self, seconds: float | None) -> None:
        """How long sent emails stay listable and retrievable (None: forever)."""
        if seconds is not None and seconds <= 0:
            raise ValueError("retention must be positive seconds or None")
        with self._lock:  # type: ignore[attr-defined]
            self._retention_seconds = seconds

    def _retained(self) -> list[AcceptedEmail]:
        """Accepted emails still inside the retention window, newest first. Under ``_lock``."""
        now = self.now()  # type: ignore[attr-defined]
        retention = self._retention_seconds
        kept = [e for e in self._accepted if retention is None or now - e.accepted_at <= retention]  # type: ignore[attr-defined]
        return sorted(kept, key=lambda e: (e.accepted_at, e.batch_index or 0), reverse=True)

    def _last_event(self, email: AcceptedEmail) -> str:
        """What the local 'mailbox providers' did with it: the same choice its webhooks report."""
        addresses = email.recipients
        if addresses & self._bounce:  # type: ignore[attr-defined]
            return "bounced"
        if addresses & self._complain:  # type: ignore[attr-defined]
            return "complained"
        return "delivered"

    def _summary(self, email: AcceptedEmail) -> dict[str, Any]:
        return {
            "id": email.id,
            "to": list(email.to),
            "from": email.sender,
            "created_at": _iso(email.accepted_at),
            "subject": email.subject,
            "bcc": list(email.bcc) or None,
            "cc": list(email.cc) or None,
            "reply_to": list(email.reply_to) or None,
            "last_event": self._last_event(email),
            "scheduled_at": None,
        }

    def _read(self, path: str, query: str) -> _Reply:
        if path == "/emails":
            return self._list(parse_qs(query, keep_blank_values=True))
        return self._retrieve(path.removeprefix("/emails/"))

    def _list(self, params: Mapping[str, list[str]]) -> _Reply:
        limit = _limit(params.get("limit", [str(DEFAULT_LIST_LIMIT)])[-1])
        after, before = params.get("after", [None])[-1], params.get("before", [None])[-1]
        if after and before:
            raise _ApiError(422, "validation_error", "You can only use one of `after` or `before`.")
        with self._lock:  # type: ignore[attr-defined]
            emails = self._retained()
            ids = [e.id for e in emails]
            cursor = after or before
            if cursor is not None and cursor not in ids:
                raise _ApiError(422, "validation_error", f"The cursor `{cursor}` does not name a listed email.")
            if after:
                start = ids.index(after) + 1
                page, has_more = emails[start : start + limit], start + limit < len(emails)
            elif before:
                end = ids.index(before)
                page, has_more = emails[max(0, end - limit) : end], end - limit > 0
            else:
                page, has_more = emails[:limit], limit < len(emails)
            data = [self._summary(e) for e in page]
        return _Reply(200, {"object": "list", "has_more": has_more, "data": data})

    def _retrieve(self, email_id: str) -> _Reply:
        with self._lock:  # type: ignore[attr-defined]
            found = next((e for e in self._retained() if e.id == email_id), None)
            if found is None:
                raise _ApiError(404, "not_found", "Email not found")
            body = {
                "object": "email",
                **self._summary(found),
                "html": found.html,
                "text": found.text,
                "tags": [dict(tag) for tag in found.tags],
            }
        return _Reply(200, body)


def _limit(raw: str) -> int:
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise _ApiError(
            422, "validation_error", f"The `limit` parameter must be between 1 and {MAX_LIST_LIMIT}, got `{raw}`."
        )
    return limit
