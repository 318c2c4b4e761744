"""The ``/_local/*`` control endpoints: health, what was accepted and delivered, stats, faults,
reset, webhooks (list, emit, redeliver) and the clock (docs/local-resend.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sendonce_local.resend_server.wire import (
    _ApiError,
    _Reply,
    _require_object,
)


class ControlEndpoints:
    """The /_local/* endpoints of LocalResendServer (a mixin: the state lives on the server)."""

    def _handle_control(self, method: str, path: str, body: bytes) -> _Reply:
        routes: dict[tuple[str, str], Callable[[Any], Any]] = {
            ("GET", "/_local/health"): lambda _: {
                "status": "ok",
                "url": self.url if self._httpd else None,
                "emails_accepted": len(self.accepted()),
                "in_flight": self.in_flight(),
            },
            ("GET", "/_local/deliveries"): lambda _: {
                "deliveries": self.deliveries(),
                "emails_accepted": len(self.accepted()),
            },
            ("GET", "/_local/accepted"): lambda _: {"accepted": [e.to_json() for e in self.accepted()]},
            ("GET", "/_local/stats"): lambda _: self.stats(),
            ("GET", "/_local/faults"): lambda _: self.faults(),
            ("POST", "/_local/faults"): lambda spec: self.apply_faults(_require_object(spec)),
            ("POST", "/_local/reset"): lambda _: (self.reset(), {"status": "reset"})[1],
            ("GET", "/_local/webhooks"): lambda _: {"webhooks": [h.to_json() for h in self.webhook_deliveries()]},
            ("POST", "/_local/webhooks/emit"): lambda spec: {
                "queued": self.emit_webhook(str(_require_object(spec)["address"]), str(spec["type"]))
            },
            ("POST", "/_local/webhooks/redeliver"): lambda spec: (
                self.redeliver(str(_require_object(spec)["svix_id"])),
                {"status": "queued"},
            )[1],
            ("POST", "/_local/clock"): lambda spec: {
                "now": self.advance_clock(float(_require_object(spec).get("advance_seconds", 0)))
            },
        }
        route = routes.get((method, path))
        if route is None:
            if any(known_path == path for _, known_path in routes):
                return _ApiError(405, "method_not_allowed", f"{method} is not allowed on {path}.").reply()
            return _ApiError(404, "not_found", f"No control endpoint {path}.").reply()
        try:
            spec = json.loads(body) if body.strip() else {}
            return _Reply(200, route(spec))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            return _ApiError(400, "validation_error", str(error)).reply()
