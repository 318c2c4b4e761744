"""Whether an API request is served: its API key and User-Agent, a halt set on the server, and
one slot of the team's rate limit (a sliding second, with Resend's ratelimit-* headers)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from sendonce_local.resend_server.wire import (
    HALT_ERRORS,
    RATE_LIMIT_WINDOW_SECONDS,
    _ApiError,
    _Reply,
    rate_limited,
)


class RequestAdmission:
    """The admission of LocalResendServer's API requests (a mixin: the state lives on the server)."""

    def _answer(self, headers: Mapping[str, str], action: Callable[[], _Reply]) -> _Reply:
        """An API request: authorised, then one slot of the team's rate limit, then `action`."""
        with self._lock:
            self._requests += 1
        rate_headers: dict[str, str] = {}
        try:
            self._authorise(headers)
            rate_headers = self._take_rate_slot()
            reply = action()
        except _ApiError as error:
            with self._lock:
                self._errors[error.name] += 1
            reply = error.reply()
        reply.headers = {**rate_headers, **reply.headers}
        return reply

    def _authorise(self, headers: Mapping[str, str]) -> None:
        if not headers.get("user-agent"):
            raise _ApiError(403, "validation_error", "Requests must include a `User-Agent` header.")
        scheme, _, key = headers.get("authorization", "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise _ApiError(
                401,
                "missing_api_key",
                "Missing API key in the authorization header. Include the following header "
                "Authorization: Bearer YOUR_API_KEY in the request.",
            )
        valid = key == self.api_key if self.api_key is not None else key.startswith("re_")
        if not valid:
            raise _ApiError(403, "invalid_api_key", "API key is invalid")
        with self._lock:
            halt = self._halt
        if halt is not None:
            status, message = HALT_ERRORS[halt]
            raise _ApiError(status, halt, message)

    def _take_rate_slot(self) -> dict[str, str]:
        with self._lock:
            limit = self._rate_limit
            if limit is None:
                return {}
            now = self.now()
            window = self._rate_window
            while window and window[0] <= now - RATE_LIMIT_WINDOW_SECONDS:
                window.popleft()
            allowed = len(window) < limit
            if allowed:
                window.append(now)
            reset = max(1, math.ceil(window[0] + RATE_LIMIT_WINDOW_SECONDS - now)) if window else 1
            rate_headers = {
                "ratelimit-limit": str(limit),
                "ratelimit-remaining": str(max(0, limit - len(window))),
                "ratelimit-reset": str(reset),
            }
        if not allowed:
            raise rate_limited(limit, rate_headers, reset)
        return rate_headers
