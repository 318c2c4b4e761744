"""The public endpoints under mutated credentials (issue 18, item 5): a second tool beside
Schemathesis. Hypothesis takes a valid Svix-signed webhook or a valid unsubscribe token
and mutates it - truncated, re-encoded (base64 / base64url, padding, case, hex), bytes
flipped, relabelled (`v1,`), several signatures, headers missing, the timestamp skewed
past the ±300 s tolerance either way, another secret or key - then replays the original.
Every mutation runs in every example (12 for webhooks, 7 for tokens), with its positions,
characters, keys and skews drawn by Hypothesis, derandomized.

Every request is a fresh event or a fresh recipient, so that accepting it would change
state; the properties: never a 5xx; a request that does not verify is refused with its
documented status (401 for webhooks, 403 for tokens, 404 for a path that is no token) and
changes nothing - the ledger, campaigns (counters) and suppressions tables are scanned
before and after; the valid original is then accepted and changes state (so the mutant
would have), and sent again changes nothing."""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import boto3
import hypothesis
import pytest
import requests
from hypothesis import strategies as st

from sendonce.domain.deliverability.unsubscribe import UnsubscribeTokens
from sendonce.domain.models import Receipt
from sendonce_local.resend_server import new_webhook_secret, svix_headers, svix_signature
from tests.fuzz.conftest import REQUEST_TIMEOUT_S
from tests.integration.test_deliverability import claim

pytestmark = pytest.mark.integration

WEBHOOK_EXAMPLES = 3  # x 12 mutations
TOKEN_EXAMPLES = 3  # x 7 mutations
SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
TOLERANCE_S = 300
RECIPIENTS = ("r0", "r1", "r2", "r3")
PRINTABLE = [chr(c) for c in range(33, 127)]  # no whitespace: a header value cannot start with it
TOKEN_CHARS = [*"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~"]


@dataclass(frozen=True)
class Webhook:
    body: str
    headers: dict[str, str] = field(default_factory=dict)

    def with_header(self, name: str, value: str | None) -> Webhook:
        headers = {k: v for k, v in self.headers.items() if k != name}
        return replace(self, headers=headers if value is None else {**headers, name: value})


class Rig:
    """The public APIs over moto with four sent deliveries of campaign c1, and a snapshot of
    every table a public request could change."""

    def __init__(self, public, system):
        self.public = public
        self.session = requests.Session()
        self.secret = public.resources.webhook_secret
        self.numbers = itertools.count()
        self.last: dict[str, list[str]] | None = None  # the state after the previous check
        self._dynamodb = boto3.client("dynamodb")
        self._tables = (
            system.resources.ledger_table,
            system.resources.campaigns_table,
            public.resources.suppressions_table,
        )

    def snapshot(self) -> dict[str, list[str]]:
        return {
            table: sorted(
                json.dumps(item, sort_keys=True)
                for page in self._dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
                for item in page["Items"]
            )
            for table in self._tables
        }

    def post_webhook(self, hook: Webhook) -> requests.Response:
        return self.session.post(
            f"{self.public.events_api.url}/webhooks/resend",
            data=hook.body.encode(),
            headers=hook.headers,
            timeout=REQUEST_TIMEOUT_S,
        )

    def unsubscribe(self, method: str, token: str) -> requests.Response:
        body = "List-Unsubscribe=One-Click" if method == "POST" else None
        headers = {"content-type": "application/x-www-form-urlencoded"} if body else {}
        return self.session.request(
            method,
            f"{self.public.unsubscribe_api.url}/u/{token}",
            data=body,
            headers=headers,
            timeout=REQUEST_TIMEOUT_S,
        )

    def fresh_webhook(self, kind: str, rid: str, *, timestamp: int | None = None) -> Webhook:
        """A webhook nobody has seen: a new svix-id, and for feedback a new address."""
        n = f"{next(self.numbers):06d}"
        data = {
            "email_id": f"email-{n}",
            "from": "news@example.com",
            "to": [f"fuzz{n}@example.com"],
            "subject": "Hi",
            "created_at": "2026-12-01T10:00:00.000Z",
            "tags": {"campaign_id": "c1", "recipient_id": rid},
        }
        if kind == "email.bounced":
            data["bounce"] = {"type": "Permanent", "subType": "General", "message": "gone"}
        body = json.dumps({"type": kind, "created_at": "2026-12-01T10:00:01.000Z", "data": data})
        return self.signed(body, f"msg_fuzz{n}", timestamp=timestamp)

    def signed(self, body: str, svix_id: str, *, timestamp: int | None = None, secret: str | None = None) -> Webhook:
        headers = svix_headers(secret or self.secret, svix_id, body, timestamp)
        return Webhook(body, {**headers, "content-type": "application/json"})


@pytest.fixture
def rig(public, system):
    system.campaign(provider="resend")
    ledger = system.ledger()
    for rid in RECIPIENTS:
        request = claim(ledger, rid, provider="resend")
        ledger.mark_sent(request.key, owner="A", receipt=Receipt(provider_message_id=f"email-{rid}"))
    return Rig(public, system)


# --- webhook mutations: each returns the mutant and whether it still verifies ---------------

Mutation = Callable[[Rig, Webhook, st.DataObject], tuple[Webhook, bool]]
SIGNED_PARTS = ("body", "svix-id", "svix-timestamp", "svix-signature")


def _get(hook: Webhook, part: str) -> str:
    return hook.body if part == "body" else hook.headers[part]


def _set(hook: Webhook, part: str, value: str) -> Webhook:
    return replace(hook, body=value) if part == "body" else hook.with_header(part, value)


def truncated(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    part = data.draw(st.sampled_from(SIGNED_PARTS), label="part")
    value = _get(hook, part)
    return _set(hook, part, value[: data.draw(st.integers(0, len(value) - 1), label="keep")]), False


def flipped(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    part = data.draw(st.sampled_from(SIGNED_PARTS), label="part")
    value = _get(hook, part)
    i = data.draw(st.integers(0, len(value) - 1), label="index")
    char = data.draw(st.sampled_from([c for c in PRINTABLE if c != value[i]]), label="char")
    return _set(hook, part, value[:i] + char + value[i + 1 :]), False


def _reencodings(mac: str) -> dict[str, str]:
    raw = base64.b64decode(mac)
    return {
        "base64url": base64.urlsafe_b64encode(raw).decode(),
        "unpadded": mac.rstrip("="),
        "extra padding": mac + "==",
        "swapped case": mac.swapcase(),
        "hex": binascii.hexlify(raw).decode(),
        "base64 twice": base64.b64encode(mac.encode()).decode(),
        "base32": base64.b32encode(raw).decode(),
    }


def reencoded(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    label, mac = hook.headers["svix-signature"].split(",", 1)
    mutant = _reencodings(mac)[data.draw(st.sampled_from(sorted(_reencodings(mac))), label="encoding")]
    # base64url of a MAC without '+' or '/' is the same text: then it still verifies.
    return hook.with_header("svix-signature", f"{label},{mutant}"), mutant == mac


def relabelled(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    label = data.draw(st.sampled_from(["v2,", "v0,", "V1,", "v1a,", ",", "", "v1;", "1,", "v11,", "v1,v1,"]))
    mac = hook.headers["svix-signature"].split(",", 1)[1]
    return hook.with_header("svix-signature", label + mac), False


def _others(data: st.DataObject) -> list[str]:
    return data.draw(
        st.lists(
            st.tuples(st.sampled_from(["v1,", "v2,", "v1a,"]), st.binary(min_size=32, max_size=32)).map(
                lambda t: t[0] + base64.b64encode(t[1]).decode()
            ),
            min_size=1,
            max_size=4,
        ),
        label="other signatures",
    )


def several_wrong(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    return hook.with_header("svix-signature", " ".join(_others(data))), False


def several_with_ours(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    # Svix sends several during a secret rotation: one that verifies is enough.
    entries = data.draw(st.permutations([*_others(data), hook.headers["svix-signature"]]), label="order")
    return hook.with_header("svix-signature", " ".join(entries)), True


def missing(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    names = data.draw(st.sets(st.sampled_from(SIGNED_PARTS[1:]), min_size=1), label="missing")
    for name in names:
        hook = hook.with_header(name, None)
    return hook, False


def _resigned_at(rig: Rig, hook: Webhook, seconds: int) -> Webhook:
    return rig.signed(hook.body, hook.headers["svix-id"], timestamp=int(time.time()) + seconds)


def stale(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    # Signed correctly, but longer ago than the tolerance (a captured request replayed late).
    return _resigned_at(rig, hook, -data.draw(st.integers(TOLERANCE_S + 10, 10**7), label="age")), False


def from_the_future(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    return _resigned_at(rig, hook, data.draw(st.integers(TOLERANCE_S + 10, 10**7), label="ahead")), False


def skewed_within_tolerance(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    seconds = data.draw(st.integers(-(TOLERANCE_S - 20), TOLERANCE_S - 20), label="skew")
    return _resigned_at(rig, hook, seconds), True


def other_secret(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    # Another (rotated-out) secret, or ours used as text instead of base64-decoded.
    how = data.draw(st.sampled_from(["another secret", "the secret's text", "the text after whsec_"]))
    if how == "another secret":
        secret = new_webhook_secret()
    else:
        text = rig.secret if how == "the secret's text" else rig.secret.removeprefix("whsec_")
        secret = "whsec_" + base64.b64encode(text.encode()).decode()
    headers = hook.headers
    signature = svix_signature(secret, headers["svix-id"], headers["svix-timestamp"], hook.body)
    return hook.with_header("svix-signature", signature), False


def renamed_headers(rig: Rig, hook: Webhook, data: st.DataObject) -> tuple[Webhook, bool]:
    # Header names are case-insensitive: a control that must still verify.
    case = data.draw(st.sampled_from([str.upper, str.title]))
    return Webhook(hook.body, {case(k): v for k, v in hook.headers.items()}), True


MUTATIONS: list[Mutation] = [
    truncated,
    flipped,
    reencoded,
    relabelled,
    several_wrong,
    several_with_ours,
    missing,
    stale,
    from_the_future,
    skewed_within_tolerance,
    other_secret,
    renamed_headers,
]


def check_webhook(rig: Rig, kind: str, rid: str, mutation: Mutation, data: st.DataObject) -> None:
    # Given a valid webhook for a delivery of ours, that nobody has sent yet, and a mutant of it
    original = rig.fresh_webhook(kind, rid)
    mutant, verifies = mutation(rig, original, data)
    hypothesis.event(f"{mutation.__name__} ({'verifies' if verifies else 'refused'})")
    before = rig.last or rig.snapshot()

    # When the mutant is posted
    response = rig.post_webhook(mutant)

    # Then it is refused and nothing changed; or, when it still verifies, applied once
    if not verifies:
        assert response.status_code == 401, (mutation.__name__, response.text)
        assert rig.snapshot() == before, mutation.__name__
        response = rig.post_webhook(original)
    assert (response.status_code, response.json()) == (200, {"status": "applied"}), mutation.__name__
    after = rig.snapshot()
    assert after != before  # a mutant that was refused would have changed state
    # and sent again (signed afresh, as a Svix retry is), the original changes nothing
    replayed = rig.post_webhook(rig.signed(original.body, original.headers["svix-id"]))
    assert (replayed.status_code, replayed.json()) == (200, {"status": "duplicate"}), mutation.__name__
    rig.last = rig.snapshot()
    assert rig.last == after, mutation.__name__


@hypothesis.settings(max_examples=WEBHOOK_EXAMPLES, **SETTINGS)
@hypothesis.given(
    kind=st.sampled_from(["email.complained", "email.bounced", "email.delivered", "email.sent"]),
    rid=st.sampled_from(RECIPIENTS),
    data=st.data(),
)
def test_a_mutated_webhook_is_refused_with_401_and_changes_nothing(rig, kind, rid, data):
    rig.last = None
    for mutation in MUTATIONS:  # every mutation in every example: none is left to chance
        check_webhook(rig, kind, rid, mutation, data)


# --- unsubscribe token mutations ------------------------------------------------------------


def _token_parts(token: str) -> list[str]:
    return token.split(".")


def t_truncated(rig: Rig, token: str, data: st.DataObject) -> str:
    return token[: data.draw(st.integers(0, len(token) - 1), label="keep")]


def t_flipped(rig: Rig, token: str, data: st.DataObject) -> str:
    i = data.draw(st.integers(0, len(token) - 1), label="index")
    return token[:i] + data.draw(st.sampled_from([c for c in TOKEN_CHARS if c != token[i]])) + token[i + 1 :]


def t_reencoded(rig: Rig, token: str, data: st.DataObject) -> str:
    *head, mac = _token_parts(token)
    raw = base64.urlsafe_b64decode(mac + "=")
    mutant = {
        "base64": base64.b64encode(raw).decode().rstrip("="),
        "padded": mac + "=",
        "swapped case": mac.swapcase(),
        "hex": binascii.hexlify(raw).decode(),
        "upper-case fingerprint": None,
    }[data.draw(st.sampled_from(["base64", "padded", "swapped case", "hex", "upper-case fingerprint"]))]
    if mutant is None:
        return ".".join([*head[:3], head[3].upper(), mac])
    return ".".join([*head, mutant])


def t_version(rig: Rig, token: str, data: st.DataObject) -> str:
    version = data.draw(st.sampled_from(["v2", "v0", "V1", "v", "", "v1.v1", "v11"]))
    return version + token[len("v1") :]


def t_other_key(rig: Rig, token: str, data: st.DataObject) -> str:
    # Signed with a key that is not configured: rotated out, or never ours.
    key = data.draw(st.binary(min_size=32, max_size=48), label="key")
    _, campaign_id, recipient_id, _, _ = _token_parts(token)
    return UnsubscribeTokens([key]).sign(campaign_id, recipient_id, f"{recipient_id}@example.com")


def t_spliced(rig: Rig, token: str, data: st.DataObject) -> str:
    # Another recipient's valid signature on this token's claims (or the reverse).
    _, campaign_id, recipient_id, fingerprint, mac = _token_parts(token)
    other = _token_parts(rig.public.tokens().sign("c1", "r0", "r0@example.com"))
    field_ = data.draw(st.sampled_from(["mac", "recipient", "fingerprint", "campaign"]))
    if field_ == "mac":
        return ".".join(["v1", campaign_id, recipient_id, fingerprint, other[4]])
    swapped = {"recipient": 2, "fingerprint": 3, "campaign": 1}[field_]
    parts = _token_parts(token)
    parts[swapped] = other[swapped] if other[swapped] != parts[swapped] else parts[swapped] + "x"
    return ".".join(parts)


def t_swapped_case(rig: Rig, token: str, data: st.DataObject) -> str:
    return token.swapcase()


TOKEN_MUTATIONS = [t_truncated, t_flipped, t_reencoded, t_version, t_other_key, t_spliced, t_swapped_case]


def check_token(rig: Rig, mutation: Callable[[Rig, str, st.DataObject], str], method: str, data) -> None:
    # Given a valid token for a recipient who has not unsubscribed, and a mutant of it
    n = f"{next(rig.numbers):06d}"
    token = rig.public.tokens().sign("c1", f"u{n}", f"u{n}@example.com")
    mutant = mutation(rig, token, data)
    if mutant == token:  # a re-encoding that changed nothing
        return
    hypothesis.event(mutation.__name__)
    before = rig.last or rig.snapshot()

    # When the mutant is opened or one-clicked
    response = rig.unsubscribe(method, mutant)

    # Then it is refused (404 only when the path holds no token) and nothing changed
    assert response.status_code == (404 if mutant == "" or "/" in mutant else 403), (mutation.__name__, mutant)
    assert rig.snapshot() == before, mutation.__name__
    # and the original unsubscribes (so the mutant would have), once
    assert rig.unsubscribe("POST", token).status_code == 200
    after = rig.snapshot()
    assert after != before
    assert [rig.unsubscribe(m, token).status_code for m in ("POST", "GET")] == [200, 200]
    rig.last = rig.snapshot()
    assert rig.last == after, mutation.__name__


@hypothesis.settings(max_examples=TOKEN_EXAMPLES, **SETTINGS)
@hypothesis.given(method=st.sampled_from(["POST", "GET"]), data=st.data())
def test_a_mutated_unsubscribe_token_is_refused_and_changes_nothing(rig, method, data):
    rig.last = None
    for mutation in TOKEN_MUTATIONS:
        check_token(rig, mutation, method, data)
