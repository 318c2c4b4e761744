"""List Sent Emails and Retrieve Email on the local Resend server, read with the real `resend`
SDK: newest first, cursors, limits, no tags in the list, tags on retrieve, the retention
window, and the team's rate limit shared with sending."""

from __future__ import annotations

import pytest
import resend
from resend.exceptions import RateLimitError, ResendError

from sendonce_local.resend_server import LocalResendServer
from tests.integration.test_resend_server import FrozenClock, email

pytestmark = pytest.mark.integration
DAY = 24 * 3600


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def server(clock):
    with LocalResendServer(rate_limit=None, clock=clock, retention_seconds=3 * DAY) as srv:
        yield srv


@pytest.fixture
def sdk(server, monkeypatch):
    monkeypatch.setattr(resend, "api_key", "re_test_local")
    monkeypatch.setattr(resend, "api_url", server.url)
    monkeypatch.setattr(resend, "default_http_client", resend.RequestsClient(timeout=5))
    return resend


def send_tagged(sdk, clock, n: int) -> list[str]:
    ids = []
    for i in range(n):
        clock.now += 1
        tags = [{"name": "campaign_id", "value": "c1"}, {"name": "recipient_id", "value": f"r{i}"}]
        ids.append(sdk.Emails.send(email(to=f"user{i}@example.com", subject=f"Hello {i}", tags=tags))["id"])
    return ids


def test_the_list_is_newest_first_paged_by_cursor_and_carries_no_tags(sdk, clock):
    sent = send_tagged(sdk, clock, 7)
    pages, after = [], None
    while True:
        params = {"limit": 3, **({"after": after} if after else {})}
        page = sdk.Emails.list(params)
        pages.append(page)
        if not page["has_more"]:
            break
        after = page["data"][-1]["id"]
    listed = [item for page in pages for item in page["data"]]
    assert [p["object"] for p in pages] == ["list"] * 3
    assert [item["id"] for item in listed] == list(reversed(sent))
    assert [len(p["data"]) for p in pages] == [3, 3, 1]
    first = listed[0]
    assert first["to"] == ["user6@example.com"] and first["subject"] == "Hello 6"
    assert first["last_event"] == "delivered" and "tags" not in first
    # `before` walks back towards the newest
    before = sdk.Emails.list({"limit": 2, "before": listed[4]["id"]})
    assert [item["id"] for item in before["data"]] == [listed[2]["id"], listed[3]["id"]]
    assert before["has_more"] is True


def test_retrieve_returns_the_tags_and_the_default_page_is_twenty(sdk, clock):
    sent = send_tagged(sdk, clock, 25)
    assert len(sdk.Emails.list()["data"]) == 20
    got = sdk.Emails.get(sent[3])
    assert got["object"] == "email" and got["id"] == sent[3]
    assert {t["name"]: t["value"] for t in got["tags"]} == {"campaign_id": "c1", "recipient_id": "r3"}


def test_bad_limits_and_cursors_are_refused_as_resend_refuses_them(sdk, clock, server):
    send_tagged(sdk, clock, 2)
    for params in ({"limit": 0}, {"limit": 101}, {"after": "no-such-id"}):
        with pytest.raises(ResendError) as refused:
            sdk.Emails.list(params)
        assert refused.value.code == 422
    with pytest.raises(ResendError) as missing:
        sdk.Emails.get("00000000-0000-0000-0000-000000000000")
    assert missing.value.code == 404


def test_emails_older_than_the_retention_are_neither_listed_nor_retrievable(sdk, clock, server):
    old = send_tagged(sdk, clock, 2)
    clock.now += 3 * DAY + 60
    new = send_tagged(sdk, clock, 1)
    assert [item["id"] for item in sdk.Emails.list()["data"]] == new
    with pytest.raises(ResendError):
        sdk.Emails.get(old[0])
    server.set_retention(None)
    assert len(sdk.Emails.list()["data"]) == 3


def test_reading_shares_the_team_rate_limit_with_sending(sdk, clock, server):
    send_tagged(sdk, clock, 1)
    server.set_rate_limit(2)
    sdk.Emails.list()
    sdk.Emails.send(email())
    with pytest.raises(RateLimitError):
        sdk.Emails.list()
