"""The shared rate follows the limit Resend states in its answers' headers: the real SDK
against the local Resend server with a team limit, the real limiter against moto's
DynamoDB, and the limiter's decisions read on an injected clock (no timed assertion)."""

from __future__ import annotations

import boto3
import pytest

from sendonce.adapters.dynamodb.limiter_state import STATE_TTL_S
from sendonce.adapters.dynamodb.rate_limiter import DynamoDBRateLimiter
from sendonce.adapters.providers.resend.sender import RateLimitHeaders, ResendProvider, exhausted_for
from sendonce.domain.errors import RetryableProviderError
from sendonce.domain.models import OutboundEmail
from tests.fakes import LimiterClock

pytestmark = pytest.mark.integration


def limiter(system, clock: LimiterClock, *, rate: float = 10.0, reserve: float = 1.0) -> DynamoDBRateLimiter:
    return DynamoDBRateLimiter(
        client=boto3.client("dynamodb"),
        table_name=system.resources.campaigns_table,
        rates={"resend": rate},
        reserve={"resend": reserve},
        chunk=4,
        clock=clock,
        sleep=clock.sleep,
    )


def send_times(limiter: DynamoDBRateLimiter, clock: LimiterClock, n: int) -> list[float]:
    times = []
    for _ in range(n):
        assert limiter.acquire("resend")
        times.append(clock.now)
    return times


def per_second(times: list[float]) -> list[int]:
    first = int(times[0])
    counts = [0] * (int(times[-1]) - first + 1)
    for t in times:
        counts[int(t) - first] += 1
    return counts


def email(system, i: int) -> OutboundEmail:
    return OutboundEmail(
        idempotency_key=f"sendonce:c1:r{i}",
        sender=f"news@{system.domain}",
        to=f"user{i}@{system.domain}",
        subject="Hello",
        text="Hi",
        tags={"campaign_id": "c1", "recipient_id": f"r{i}"},
    )


def test_the_headers_are_read_from_successes_and_errors_alike():
    assert RateLimitHeaders.parse({"ratelimit-limit": "5", "ratelimit-remaining": "4", "ratelimit-reset": "1"}) == (
        RateLimitHeaders(limit_per_s=5.0, remaining=4, reset_s=1.0)
    )
    assert RateLimitHeaders.parse(
        {"RateLimit-Limit": "100", "RateLimit-Policy": "100;w=60"}
    ).limit_per_s == pytest.approx(100 / 60)
    assert RateLimitHeaders.parse({"content-type": "application/json"}) == RateLimitHeaders(None, None, None)
    assert RateLimitHeaders.parse(None).limit_per_s is None


def test_a_limit_learned_from_resend_headers_changes_every_consumers_pacing(system):
    # Given a team limit of 3/s at Resend and consumers configured for 10/s
    system.resend.set_rate_limit(3)
    clock = LimiterClock()
    here, elsewhere = limiter(system, clock), limiter(system, clock)
    provider = ResendProvider(api_key="re_test_local", api_url=system.resend.url, limiter=here)
    before = send_times(elsewhere, clock, 18)

    # When one send through the real SDK comes back with Resend's headers
    provider.send(email(system, 1))
    clock.now = int(clock.now) + STATE_TTL_S + 1  # the other consumer's copy of the state expires
    after_here = send_times(here, clock, 6)
    after_elsewhere = send_times(elsewhere, clock, 6)

    # Then both pace at the stated limit less the reserve: 2 places a second, not 9
    assert per_second(before)[:2] == [9, 9]
    assert (here.limit("resend"), here.rate("resend")) == (3.0, 2.0)
    assert (elsewhere.limit("resend"), elsewhere.rate("resend")) == (3.0, 2.0)
    assert max(per_second(after_here)) == 2 and max(per_second(after_elsewhere)) == 2
    state = boto3.client("dynamodb").get_item(
        TableName=system.resources.campaigns_table, Key={"pk": {"S": "limiter#resend"}, "sk": {"S": "state"}}
    )["Item"]
    assert state["limit"]["N"] == "3"


def test_a_429_keeps_the_learned_limit_and_a_spent_window_holds_the_next_send(system):
    system.resend.set_rate_limit(1)
    frozen = system.resend.now()
    system.resend.clock = lambda: frozen  # the server's window never moves on: the second send is a 429
    clock = LimiterClock()
    shared = limiter(system, clock)
    provider = ResendProvider(api_key="re_test_local", api_url=system.resend.url, limiter=shared)

    # The team's only place this second: the answer says remaining 0, reset 1
    provider.send(email(system, 1))
    held_from = clock.now
    assert shared.acquire("resend")
    waited = clock.now - held_from
    shared.throttled("resend")  # a 429's slow-down keeps the learned limit on the shared item
    other = limiter(system, clock)

    assert waited >= 1.0
    assert other.limit("resend") == 1.0 and other.rate("resend") == pytest.approx(0.5 * 0.7)
    # A 429's headers hold the next send too; with a deadline before the reset the limiter says no
    with pytest.raises(RetryableProviderError) as throttled:
        provider.send(email(system, 2))
    assert throttled.value.throttled and throttled.value.retry_after == 1.0
    held_from = clock.now
    assert not shared.acquire("resend", deadline=clock.now + 0.5)
    assert shared.acquire("resend") and clock.now >= held_from + 1.0


def test_an_accepted_send_that_spends_the_window_holds_one_place_of_the_limit_not_the_rounded_second(system):
    # Given a team of 5/s whose window (frozen) the fifth send fills: accepted, remaining 0,
    # reset 1 (Resend rounds it up to whole seconds)
    system.resend.set_rate_limit(5)
    frozen = system.resend.now()
    system.resend.clock = lambda: frozen
    clock = LimiterClock()
    shared = limiter(system, clock, rate=5, reserve=1)
    provider = ResendProvider(api_key="re_test_local", api_url=system.resend.url, limiter=shared)
    for i in range(5):
        provider.send(email(system, i))

    # When the consumer asks for its next place
    held_from = clock.now
    assert shared.acquire("resend")

    # Then it held one place of the limit (0.2 s), not the whole rounded second
    assert clock.slept[0] == pytest.approx(0.2) and clock.now - held_from < 1.0
    # (a refusal holds its whole reset: the test above)
    headers = RateLimitHeaders(limit_per_s=5, remaining=0, reset_s=1)
    assert (exhausted_for(headers, accepted=True), exhausted_for(headers, accepted=False)) == (0.2, 1)


def test_a_short_hold_keeps_the_places_reserved_after_it(system):
    # Given a consumer holding places for the rest of its second (paced at 4/s: 0.25 s apart)
    clock = LimiterClock(2_000_000_000.0)
    shared = limiter(system, clock, rate=5, reserve=1)
    assert shared.acquire("resend")
    writes = shared.requests

    # When an answer says the window is spent for 0.3 s
    shared.exhausted("resend", reset_s=0.3)
    assert shared.acquire("resend")

    # Then its next send waits for the hold and uses a place it already held (0.5 s into
    # the second: the one at 0.25 s fell inside the hold), with no new reservation
    assert clock.now == pytest.approx(2_000_000_000.5)
    assert shared.requests == writes


def test_a_default_team_is_not_sent_429s_by_consumers_configured_too_fast(system, monkeypatch):
    # Given Resend's default team limit (5/s) and consumers told 10/s, the old default
    system.resend.set_rate_limit(5)
    monkeypatch.setenv("SENDONCE_RESEND_REQUESTS_PER_SECOND", "10")
    system.campaign()
    system.operator.publish("c1", system.recipients(24))

    pollers = [system.poller(concurrency=1) for _ in range(2)]
    for p in pollers:
        p.start()
    pollers[0].run_until_idle(idle_seconds=2, max_seconds=90)

    deliveries = system.deliveries()
    assert len(deliveries) == 24 and set(deliveries.values()) == {1}
    # Told 10/s with the old defaults, the benchmark's consumers drew 7 429s; learning the
    # limit from the first answers leaves none, or on a loaded machine one burst that crosses
    # the server's one-second window.
    assert system.resend.stats()["errors"].get("rate_limit_exceeded", 0) <= 1
    assert system.operator.status("c1").sent == 24
