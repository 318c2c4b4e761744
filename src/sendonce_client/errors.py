"""Typed errors for the operator API's answers (docs/api.md, "Errors")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One field the API refused (a 422's `detail` entry): where, and why."""

    loc: tuple[str | int, ...]
    msg: str
    type: str = ""

    @property
    def path(self) -> str:
        """`body.recipients.3.email`, as the API's `message` names it."""
        return ".".join(str(part) for part in self.loc)


class SendonceAPIError(Exception):
    """The API answered with an error (or, for `ConnectionFailed`, not at all).

    `status` is the HTTP status, `error` the API's error name (`CampaignNotFound`,
    `IllegalTransition`, `ValidationError`, ...), `message` its explanation and `fields`
    the field errors of a 422 (empty otherwise)."""

    def __init__(
        self, status: int | None, error: str, message: str, fields: list[FieldError] | None = None, body: Any = None
    ):
        super().__init__(f"{status} {error}: {message}" if status else f"{error}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.fields = list(fields or [])
        self.body = body


class InvalidRequest(SendonceAPIError):
    """400 (the service refused the input) or 422 (the request does not match the schema)."""


class NotFound(SendonceAPIError):
    """404: no such campaign, or no such route (`error` says which)."""


class Conflict(SendonceAPIError):
    """409: not allowed in the campaign's current state, or the campaign id exists."""


class Throttled(SendonceAPIError):
    """429 after every retry: API Gateway's throttling."""


class ServerError(SendonceAPIError):
    """5xx after every retry."""


class ConnectionFailed(SendonceAPIError):
    """No answer after every retry (connection refused, reset, timed out)."""


class PublishFailed(SendonceAPIError):
    """A publish stopped part way: `published` counts what the requests that landed
    published; `landed` lists the (first, last) positions in the caller's recipients of
    those requests (with several streams in flight, requests after the refused one may
    have landed too); `failed` lists each request that did not, as (first, last, error).
    The exception itself is the first failure's (`cause`).

    Publishing is idempotent, so calling `publish` again with the same recipients (after
    fixing what `cause` names) publishes only what is missing."""

    def __init__(
        self,
        cause: SendonceAPIError,
        published: Any,
        *,
        landed: list[tuple[int, int]] | None = None,
        failed: list[tuple[int, int, BaseException]] | None = None,
    ):
        super().__init__(cause.status, cause.error, cause.message, cause.fields, cause.body)
        self.cause = cause
        self.published = published
        self.landed = list(landed or [])
        self.failed = list(failed or [])


class JobFailed(SendonceAPIError):
    """A job the client waited for ended `failed`: `job` is its JobView, `message` its error."""

    def __init__(self, job: dict[str, Any]):
        super().__init__(None, "JobFailed", str(job.get("error") or "the job failed"), body=job)
        self.job = job


class JobTimedOut(SendonceAPIError):
    """A job the client waited for was still running when the wait ran out: `job` is its
    JobView as last read (it goes on; `Client.job(job_id)` follows it)."""

    def __init__(self, job: dict[str, Any], timeout_s: float):
        super().__init__(
            None, "JobTimedOut", f"job {job.get('job_id')!r} still running after {timeout_s:g} s", body=job
        )
        self.job = job


_BY_STATUS: dict[int, type[SendonceAPIError]] = {
    400: InvalidRequest,
    404: NotFound,
    409: Conflict,
    422: InvalidRequest,
    429: Throttled,
}


def error_for(status: int, body: Any) -> SendonceAPIError:
    """The typed error for an answer's status and JSON body (`{"statusCode", "error", "message", "detail"?}`)."""
    if isinstance(body, dict):
        error = str(body.get("error") or body.get("message") or "Error")
        message = str(body.get("message") or "")
        fields = [
            FieldError(loc=tuple(d.get("loc") or ()), msg=str(d.get("msg", "")), type=str(d.get("type", "")))
            for d in body.get("detail") or []
            if isinstance(d, dict)
        ]
    else:
        error, message, fields = "Error", str(body or "")[:500], []
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else SendonceAPIError)
    return cls(status, error, message, fields, body)
