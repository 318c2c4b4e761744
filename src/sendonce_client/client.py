"""A publisher client for the operator HTTP API, signed with SigV4 (docs/api.md, "Publishing
from your backend").

Every request is signed for `execute-api` with the credentials of the boto3 / botocore
session given (or the default chain), so a SaaS backend publishes with the IAM role it
already runs as. Transient answers — no connection, 429, 5xx — are retried with capped,
jittered exponential backoff. That is safe for publish because batch ids are content-
addressed (the same recipients in the same order make the same batches, and the ledger
sends each delivery once whatever happens); resume and cancel are idempotent on the server
(each answers with its job); for create and pause a 409 that follows an attempt whose
outcome was lost is checked against the campaign's state.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import botocore.session
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from sendonce_client.errors import (
    Conflict,
    ConnectionFailed,
    FieldError,
    InvalidRequest,
    JobFailed,
    JobTimedOut,
    PublishFailed,
    SendonceAPIError,
    error_for,
)
from sendonce_client.forecast import ForecastResult, s3_source
from sendonce_client.recipients import recipient_dict
from sendonce_client.streams import DEFAULT_STREAMS, Chunk, check_streams, merged_ranges, run_in_streams

SERVICE = "execute-api"
# The API's limit on inline recipients per publish request (PublishBody in handlers/api.py).
MAX_RECIPIENTS_PER_REQUEST = 1000
_EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
_RECIPIENT_INDEX = re.compile(r"^body\.recipients\.(\d+)")


def region_from_url(api_url: str) -> str | None:
    """`https://abc123.execute-api.eu-west-1.amazonaws.com/` -> `eu-west-1`; None for other hosts."""
    match = _EXECUTE_API_HOST.match((urlsplit(api_url).hostname or "").lower())
    return match.group(1) if match else None


@dataclass
class PublishSummary:
    """What one `publish` call did, summed over its requests."""

    campaign_id: str
    accepted: int = 0  # recipients recorded and enqueued, or found enqueued already
    duplicates: int = 0  # recipient_ids seen before in this call: published once
    duplicate_addresses: int = 0  # with dedupe_addresses: addresses seen before in this call
    batches_new: int = 0
    batches_already_enqueued: int = 0
    messages_sent: int = 0
    requests: int = 0  # publish requests that succeeded

    def add(self, answer: Mapping[str, Any]) -> None:
        self.accepted += int(answer.get("accepted", 0))
        self.duplicates += int(answer.get("duplicates", 0))
        self.batches_new += int(answer.get("batches_new", 0))
        self.batches_already_enqueued += int(answer.get("batches_already_enqueued", 0))
        self.messages_sent += int(answer.get("messages_sent", 0))
        self.requests += 1

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Client:
    """The operator API, for a backend that publishes campaigns.

    `api_url` is the stack's `ApiUrl` output (or `sendonce local api`'s URL).
    Credentials come from `session` (a `boto3.Session` or a botocore session) or the
    default chain; the region from `region`, else from an `execute-api` URL, else from
    the session."""

    def __init__(
        self,
        api_url: str,
        *,
        session: Any = None,
        region: str | None = None,
        timeout: float | tuple[float, float] = (5.0, 35.0),  # API Gateway ends a request after 29 s
        max_attempts: int = 5,
        backoff_base_s: float = 0.25,
        backoff_cap_s: float = 8.0,
        chunk_size: int = MAX_RECIPIENTS_PER_REQUEST,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if not urlsplit(api_url).scheme.startswith("http"):
            raise ValueError("api_url must be an http(s) URL")
        if not 1 <= chunk_size <= MAX_RECIPIENTS_PER_REQUEST:
            raise ValueError(f"chunk_size must be 1..{MAX_RECIPIENTS_PER_REQUEST}")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.api_url = api_url.rstrip("/")
        self._session = session if session is not None else botocore.session.get_session()
        self.region = region or region_from_url(api_url) or _session_region(self._session)
        if not self.region:
            raise ValueError("no region: pass region=, use an execute-api URL or configure the session's region")
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._chunk_size = chunk_size
        self._sleep = sleep
        # One requests.Session per thread: publish's streams each keep their own connection.
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._sessions_lock = threading.Lock()

    def close(self) -> None:
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, []
        for http in sessions:
            http.close()

    @property
    def _http(self) -> requests.Session:
        http: requests.Session | None = getattr(self._local, "http", None)
        if http is None:
            http = self._local.http = requests.Session()
            with self._sessions_lock:
                self._sessions.append(http)
        return http

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- campaigns -----------------------------------------------------------------

    def create_campaign(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """POST /campaigns: the new campaign (state `draft`). A retry whose first attempt
        created it returns it; an id taken by a different campaign is a `Conflict`."""
        try:
            return self._request("POST", "/campaigns", body=dict(spec))
        except Conflict as exc:
            if not getattr(exc, "after_lost_attempt", False):
                raise
            existing = self.get_campaign(str(spec["id"]))
            fields = ("name", "subject", "provider", "from", "weight", "priority", "max_rate")
            same = all(existing.get(k) == spec.get(k) for k in fields if k in spec)
            if not same:
                raise
            return existing

    def get_campaign(self, campaign_id: str) -> dict[str, Any]:
        return self._request("GET", f"/campaigns/{_segment(campaign_id)}")

    def list_campaigns(self, state: str | None = None) -> list[dict[str, Any]]:
        """GET /campaigns[?state=...]: the campaigns, optionally in one state."""
        answer = self._request("GET", "/campaigns", query={"state": state} if state else None)
        return list(answer.get("campaigns", []))

    def status(self, campaign_id: str) -> dict[str, Any]:
        """GET /campaigns/{id}/delivery-status: counts by outcome (`sent`, `remaining`, ...)."""
        return self._request("GET", f"/campaigns/{_segment(campaign_id)}/delivery-status")

    def pause(self, campaign_id: str, reason: str | None = None) -> dict[str, Any]:
        try:
            return self._request("POST", f"/campaigns/{_segment(campaign_id)}/pause", body=_reason(reason))
        except Conflict as exc:
            # The attempt whose answer was lost may have paused it: pausing starts no work,
            # so finding it paused is the answer.
            if getattr(exc, "after_lost_attempt", False):
                current = self.get_campaign(campaign_id)
                if current.get("state") == "paused":
                    return current
            raise

    def resume(self, campaign_id: str, reason: str | None = None) -> dict[str, Any]:
        """Back to sending (202): the answer's `job` republishes every recipient not yet ended
        (`job(job_id)` follows it; `republished` is set once it is done). Safe to retry: on a
        campaign already sending it starts that job again, never a 409."""
        return self._request("POST", f"/campaigns/{_segment(campaign_id)}/resume", body=_reason(reason))

    def cancel(self, campaign_id: str, reason: str | None = None) -> dict[str, Any]:
        """Cancelled (202): the answer's `job` closes every delivery not yet ended. Safe to
        retry: a cancelled campaign answers with its closing job (started if it never was),
        so a 409 here always means the campaign cannot be cancelled."""
        return self._request("POST", f"/campaigns/{_segment(campaign_id)}/cancel", body=_reason(reason))

    def pick(self, campaign_id: str, variant: str | None = None, reason: str | None = None) -> dict[str, Any]:
        """POST /campaigns/{id}/pick: an A/B campaign's winner (`variant`; None: by the test's
        figures so far), recorded once, and the `job_id` sending it to the rest. Safe to
        retry: the first decision stands, so a retry (or a pick after the schedule's) answers
        with the winner that stands and `decided_now` false; compare `variant`. A campaign
        without a test, or not yet sending, is a Conflict; an unknown variant an InvalidRequest."""
        body: dict[str, Any] = {"variant": variant} if variant is not None else {}
        if reason is not None:
            body["reason"] = reason
        return self._request("POST", f"/campaigns/{_segment(campaign_id)}/pick", body=body or None)

    def job(self, job_id: str) -> dict[str, Any]:
        """GET /jobs/{id}: a job (resume, cancel, reconcile): `state` (running, done, failed),
        `progress`, and once done its `result`."""
        return self._request("GET", f"/jobs/{_segment(job_id)}")

    def publish_s3(
        self,
        campaign_id: str,
        bucket: str,
        key: str,
        *,
        format: str | None = None,
        strict: bool = True,
        dedupe_addresses: bool = False,
    ) -> dict[str, Any]:
        """POST /campaigns/{id}/publish naming an S3 object (202): the `publish_s3` job that
        publishes it server-side, its byte ranges in parallel; follow it with `job(job_id)`
        (`progress`: ranges_done of ranges, accepted, bad_rows; `result.problems` by line;
        a strict publish with a bad row fails, naming them, having published nothing). Safe
        to call again: the same object publishes the same batches, recorded once."""
        source: dict[str, Any] = {"bucket": bucket, "key": key}
        if format is not None:
            source["format"] = format
        body: dict[str, Any] = {"s3": source, "strict": strict}
        if dedupe_addresses:
            body["dedupe_addresses"] = True
        return self._request("POST", f"/campaigns/{_segment(campaign_id)}/publish", body=body)

    def wait_for_job(self, job_id: str, *, timeout_s: float = 900.0, poll_s: float = 2.0) -> dict[str, Any]:
        """`job(job_id)` every `poll_s` until it is done: its JobView (`result` set). Raises
        `JobFailed` when it failed, `JobTimedOut` when it still runs after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job.get("state") == "done":
                return job
            if job.get("state") == "failed":
                raise JobFailed(job)
            if time.monotonic() >= deadline:
                raise JobTimedOut(job, timeout_s)
            self._sleep(poll_s)

    def forecast(
        self,
        campaign_id: str,
        recipients: Iterable[Any] | None = None,
        *,
        s3: Mapping[str, str] | str | None = None,
        dedupe_addresses: bool = False,
        timeout_s: float = 900.0,
        price: bool = True,
    ) -> ForecastResult:
        """POST /campaigns/{id}/forecast: who the list would reach (after bad rows, repeats and
        suppressions; per mailbox-provider group) and when the send would end; nothing is
        published. `recipients` (as `publish` takes them, at most 1,000: exact) or `s3`
        ({"bucket", "key", "format"?} or "s3://bucket/key"): a job counts the object in ranges
        and this waits for it (`wait_for_job`; exact for one range, docs/api.md). Priced here
        with `sendonce cost`'s model (`cost`) unless `price` is False."""
        if (recipients is None) == (s3 is None):
            raise ValueError("give exactly one of recipients or s3")
        body: dict[str, Any] = {}
        if recipients is not None:
            body["recipients"] = [recipient_dict(r) for r in recipients]
            if not body["recipients"]:
                raise ValueError("no recipients to forecast")
            if len(body["recipients"]) > MAX_RECIPIENTS_PER_REQUEST:
                raise ValueError(f"at most {MAX_RECIPIENTS_PER_REQUEST} inline recipients; forecast more from S3 (s3=)")
        else:
            body["s3"] = s3_source(s3)  # type: ignore[arg-type]
        if dedupe_addresses:
            body["dedupe_addresses"] = True
        answer = self._request("POST", f"/campaigns/{_segment(campaign_id)}/forecast", body=body)
        if recipients is not None:
            return ForecastResult.of(answer, price=price)
        job = self.wait_for_job(answer["job_id"], timeout_s=timeout_s)
        return ForecastResult.of(job["result"], job_id=job["job_id"], price=price)

    def audit(self, campaign_id: str) -> dict[str, Any]:
        """POST /campaigns/{id}/audit (202): a job that sets the provider's own records
        against the ledger; once `job(job_id)` is done, `result` holds `clean`, the verdict
        `counts`, `duplicates` and the findings' `digest`. Read-only; each call audits anew."""
        return self._request("POST", f"/campaigns/{_segment(campaign_id)}/audit")

    def reconcile(self, campaign_id: str) -> dict[str, Any]:
        """POST /campaigns/{id}/reconcile (202): a job that compares the campaign's counters
        with its ledger; once `job(job_id)` is done, its `result` holds the drifts. Each call
        starts a new job (a retry only reads the ledger once more); no 409 is ever success."""
        return self._request("POST", f"/campaigns/{_segment(campaign_id)}/reconcile")

    # --- publishing ----------------------------------------------------------------

    def publish(
        self,
        campaign_id: str,
        recipients: Iterable[Any],
        *,
        dedupe_addresses: bool = False,
        streams: int = DEFAULT_STREAMS,
    ) -> PublishSummary:
        """Publish recipients — any iterable of dicts or objects with `recipient_id`,
        `email` and optionally `variables` — in requests of up to 1,000, streamed, with up
        to `streams` requests in flight at once (1: one after another). The first request
        goes alone (a draft starts sending on it); at most `streams` + 1 requests'
        recipients and the ids seen are held at a time.

        A repeated `recipient_id` is published once. With `dedupe_addresses=True` a repeated
        address (compared case-insensitively) is also published once, within this call, and
        the API is asked to apply its own rule (`"dedupe_addresses": true`; the flag is
        sent only when set).

        Safe to call again with the same recipients: nothing already enqueued is enqueued
        again. If a request is refused, no new one starts and `PublishFailed` says what (its
        `fields` name positions in `recipients`, counted from 0), what was published
        (`published`, and `landed`: the position ranges of the requests that landed, which
        with several streams may include some after the refused one) and which requests
        failed (`failed`)."""
        check_streams(streams)
        summary = PublishSummary(campaign_id=campaign_id)
        landed: list[tuple[int, int, int]] = []

        def send(chunk: Chunk[tuple[list[dict[str, Any]], list[int]]]) -> Any:
            items, positions = chunk.items
            body: dict[str, Any] = {"recipients": items}
            if dedupe_addresses:
                body["dedupe_addresses"] = True
            try:
                return self._request("POST", f"/campaigns/{_segment(campaign_id)}/publish", body=body)
            except SendonceAPIError as exc:
                raise _in_stream_positions(exc, positions) from exc

        def done(chunk: Chunk[Any], answer: Any) -> None:
            summary.add(answer)
            landed.append((chunk.index, chunk.first, chunk.last))

        failures = run_in_streams(
            self._chunks(recipients, summary, dedupe_addresses), send, streams=streams, landed=done
        )
        if failures:
            first = failures[0].error
            if not isinstance(first, SendonceAPIError):
                raise first
            raise PublishFailed(
                first,
                summary,
                landed=merged_ranges(landed),
                failed=[(f.first, f.last, f.error) for f in failures],
            ) from first.__cause__
        if not summary.requests:
            raise ValueError("no recipients to publish")
        return summary

    def _chunks(
        self, recipients: Iterable[Any], summary: PublishSummary, dedupe_addresses: bool
    ) -> Iterator[Chunk[tuple[list[dict[str, Any]], list[int]]]]:
        """The recipients in requests' worth, repeats dropped: one chunk built at a time."""
        seen_ids: set[str] = set()
        seen_addresses: set[str] = set()
        chunk: list[dict[str, Any]] = []
        positions: list[int] = []
        index = 0
        for position, recipient in enumerate(recipients):
            item = recipient_dict(recipient)
            recipient_id = item.get("recipient_id")
            if isinstance(recipient_id, str):
                if recipient_id in seen_ids:
                    summary.duplicates += 1
                    continue
                seen_ids.add(recipient_id)
            if dedupe_addresses and isinstance(item.get("email"), str):
                address = item["email"].strip().lower()
                if address in seen_addresses:
                    summary.duplicate_addresses += 1
                    continue
                seen_addresses.add(address)
            chunk.append(item)
            positions.append(position)
            if len(chunk) == self._chunk_size:
                yield Chunk(index, positions[0], positions[-1], (chunk, positions))
                chunk, positions = [], []
                index += 1
        if chunk:
            yield Chunk(index, positions[0], positions[-1], (chunk, positions))

    # --- transport -----------------------------------------------------------------

    def _request(self, method: str, path: str, *, body: Any = None, query: Mapping[str, str] | None = None) -> Any:
        url = self.api_url + path + (f"?{urlencode(query)}" if query else "")
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        lost = False  # an earlier attempt may have been carried out without us hearing of it
        last: SendonceAPIError | None = None
        for attempt in range(self._max_attempts):
            if attempt:
                self._sleep(self._backoff(attempt, last))
            prepared = self._signed(method, url, data)
            try:
                response = self._http.request(
                    method, prepared.url, data=prepared.body, headers=dict(prepared.headers), timeout=self._timeout
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = ConnectionFailed(None, type(exc).__name__, str(exc)[:300])
                lost = True
                continue
            parsed = _json_or_text(response)
            if response.status_code < 400:
                return parsed
            error = error_for(response.status_code, parsed)
            error.retry_after = _retry_after(response.headers)  # type: ignore[attr-defined]
            if response.status_code == 429 or response.status_code >= 500:
                last = error
                lost = lost or response.status_code >= 500  # a 429 from API Gateway ran nothing
                continue
            error.after_lost_attempt = lost  # type: ignore[attr-defined]
            raise error
        assert last is not None
        raise last

    def _signed(self, method: str, url: str, data: bytes | None):
        credentials = self._session.get_credentials()
        if credentials is None:
            raise ConnectionFailed(None, "NoCredentials", "no AWS credentials to sign the request with")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = AWSRequest(method=method, url=url, data=data, headers=headers)
        SigV4Auth(credentials.get_frozen_credentials(), SERVICE, self.region).add_auth(request)
        return request.prepare()

    def _backoff(self, attempt: int, last: SendonceAPIError | None) -> float:
        retry_after = getattr(last, "retry_after", None)
        if retry_after is not None:
            return min(self._backoff_cap_s, retry_after)
        return random.uniform(0, min(self._backoff_cap_s, self._backoff_base_s * 2**attempt))  # full jitter


def _in_stream_positions(exc: SendonceAPIError, positions: list[int]) -> SendonceAPIError:
    """Field errors name an index in one request; give the caller's position instead."""

    def fix(loc: tuple) -> tuple:
        if len(loc) > 2 and loc[:2] == ("body", "recipients") and isinstance(loc[2], int) and loc[2] < len(positions):
            return (*loc[:2], positions[loc[2]], *loc[3:])
        return loc

    fields = [FieldError(loc=fix(f.loc), msg=f.msg, type=f.type) for f in exc.fields]
    message = exc.message
    match = _RECIPIENT_INDEX.match(message)
    if match and int(match.group(1)) < len(positions):
        message = f"body.recipients.{positions[int(match.group(1))]}" + message[match.end() :]
    return type(exc)(exc.status, exc.error, message, fields, exc.body)


def _reason(reason: str | None) -> dict[str, Any] | None:
    return {"reason": reason} if reason else None


def _segment(value: str) -> str:
    if not value:
        raise InvalidRequest(None, "InvalidCampaignId", "campaign_id must not be empty")
    return quote(value, safe="")


def _session_region(session: Any) -> str | None:
    region = getattr(session, "region_name", None)
    if region is None and hasattr(session, "get_config_variable"):
        region = session.get_config_variable("region")
    return region


def _json_or_text(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        return max(0.0, float(headers["retry-after"]))
    except (KeyError, TypeError, ValueError):
        return None
