"""Unsubscribe key rotation: a warm verifier picks up a key added after it started once its
cache expires, and every consumer signs a delivery with the same key whatever key set it
happened to hold (a Resend retry must repeat its body byte for byte)."""

from __future__ import annotations

import json

import pytest

from sendonce.domain.deliverability.unsubscribe import KeySet, UnsubscribeLinks, UnsubscribeTokens, keys_from_secret
from sendonce.domain.errors import InvalidTokenError
from tests.fakes import FakeClock

OLD = "o" * 32
NEW = "n" * 32


class Secret:
    """The secret as Secrets Manager holds it, counting reads."""

    def __init__(self, value: str):
        self.value = value
        self.reads = 0

    def load(self) -> str:
        self.reads += 1
        return self.value


def dated(*keys: tuple[str, str | None]) -> str:
    return json.dumps({"keys": [{"key": k, "not_before": nb} if nb else k for k, nb in keys]})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start_ms=1_767_225_600_000)  # 2026-01-01T00:00:00Z


def seconds(clock: FakeClock):
    return lambda: clock() / 1000


def test_a_warm_verifier_accepts_a_key_added_after_it_started_once_its_cache_expires(clock):
    secret = Secret(OLD)
    verifier = UnsubscribeTokens(KeySet(secret.load, ttl_s=300, clock=seconds(clock)))
    verifier.verify(UnsubscribeTokens([OLD.encode()]).sign("c1", "r1", "a@example.com"))  # warm: keys read
    link = UnsubscribeTokens([NEW.encode()]).sign("c1", "r1", "a@example.com")

    secret.value = json.dumps({"keys": [OLD, NEW]})  # the operator adds the new key
    clock.advance(299_000)
    with pytest.raises(InvalidTokenError):
        verifier.verify(link)  # within the cache's lifetime: not read again
    clock.advance(1_000)

    assert verifier.verify(link).recipient_id == "r1"
    assert secret.reads == 2


def test_consumers_holding_different_key_sets_sign_a_delivery_identically(clock):
    secret = Secret(dated((OLD, None)))
    warm = UnsubscribeTokens(KeySet(secret.load, ttl_s=300, clock=seconds(clock)))
    warm.sign("c0", "r1", "a@example.com")  # has read {OLD}

    # The operator adds NEW, usable for campaigns created from 00:01; a campaign is created at 00:02
    secret.value = dated((OLD, None), (NEW, "2026-01-01T00:01:00Z"))
    clock.advance(120_000)
    cold = UnsubscribeTokens(KeySet(secret.load, ttl_s=300, clock=seconds(clock)))
    created_after, created_before = "2026-01-01T00:02:00.000+00:00", "2025-12-31T23:59:00.000+00:00"

    # Then both sign the new campaign with NEW (the warm one read its keys again first) ...
    assert (
        warm.sign("c1", "r1", "a@example.com", created_at=created_after)
        == cold.sign("c1", "r1", "a@example.com", created_at=created_after)
        == UnsubscribeTokens([NEW.encode()]).sign("c1", "r1", "a@example.com")
    )
    # ... and a campaign created before NEW's not_before keeps OLD, for every consumer
    assert (
        warm.sign("c2", "r1", "a@example.com", created_at=created_before)
        == cold.sign("c2", "r1", "a@example.com", created_at=created_before)
        == UnsubscribeTokens([OLD.encode()]).sign("c2", "r1", "a@example.com")
    )
    # and both verify links of either key
    for tokens in (warm, cold):
        tokens.verify(UnsubscribeTokens([OLD.encode()]).sign("c3", "r1", "a@example.com"))
        tokens.verify(UnsubscribeTokens([NEW.encode()]).sign("c3", "r1", "a@example.com"))


def test_a_campaign_older_than_every_key_is_signed_with_the_oldest_and_undated_keys_by_order():
    keys = dated((NEW, "2026-02-01T00:00:00Z"), (OLD, "2026-01-01T00:00:00Z"))
    tokens = UnsubscribeTokens.from_secret(keys)
    undated = UnsubscribeTokens.from_secret(json.dumps({"keys": [NEW, OLD]}))

    assert tokens.sign("c1", "r1", "a@example.com", created_at="2025-06-01T00:00:00Z") == UnsubscribeTokens(
        [OLD.encode()]
    ).sign("c1", "r1", "a@example.com")
    assert undated.sign("c1", "r1", "a@example.com", created_at="2026-06-01T00:00:00Z") == UnsubscribeTokens(
        [NEW.encode()]
    ).sign("c1", "r1", "a@example.com")


def test_a_key_set_read_before_a_campaign_is_read_again_once_for_it_not_once_per_email(clock):
    secret = Secret(OLD)
    tokens = UnsubscribeTokens(KeySet(secret.load, ttl_s=300, clock=seconds(clock)))
    tokens.sign("c0", "r1", "a@example.com")
    ahead = "2026-01-01T01:00:00Z"  # a creator whose clock is ahead of ours

    for recipient in ("r1", "r2", "r3"):
        tokens.sign("c1", recipient, "a@example.com", created_at=ahead)
    tokens.sign("c2", "r1", "a@example.com", created_at="2026-01-01T01:00:05Z")

    assert secret.reads == 3  # the first read, once for c1, once for c2


@pytest.mark.parametrize("secret", [dated((OLD, "yesterday")), json.dumps({"keys": [{"not_before": "2026-01-01"}]})])
def test_a_malformed_dated_key_is_refused(secret):
    with pytest.raises(ValueError):
        keys_from_secret(secret)


def test_links_ask_a_campaigns_creation_time_once():
    asked = []
    tokens = UnsubscribeTokens.from_secret(dated((OLD, None), (NEW, "2026-01-01T00:00:00Z")))
    links = UnsubscribeLinks(
        tokens, "https://u.example.com", created_at_of=lambda cid: asked.append(cid) or "2026-03-01T00:00:00Z"
    )

    first = links.headers("c1", "r1", "a@example.com")
    links.headers("c1", "r2", "b@example.com")

    assert asked == ["c1"]
    assert first["List-Unsubscribe"].endswith(UnsubscribeTokens([NEW.encode()]).sign("c1", "r1", "a@example.com") + ">")
