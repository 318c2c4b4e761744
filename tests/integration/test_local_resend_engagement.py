"""The local Resend server's opens and clicks (issue 33): Svix-signed ``email.opened`` and
``email.clicked`` webhooks for a share of the recipients per subject, as the resend SDK's
sends and a loopback webhook endpoint see them."""

from __future__ import annotations

import http.server
import threading
from collections import Counter
from typing import Any

import pytest
import requests
import resend

from sendonce.adapters.providers.resend.webhooks import SvixWebhookVerifier
from sendonce.domain.errors import WebhookSignatureError
from sendonce_local.resend_server import LocalResendServer
from sendonce_local.resend_server.cli import main as resend_server_main
from sendonce_local.resend_server.engagement import engagement_of, parse_engagement

pytestmark = pytest.mark.integration

DELIVERY_WAIT_S = 120  # generous: the machine is shared; nothing here is timed


class WebhookReceiver:
    """A webhook endpoint on loopback that checks each Svix signature with sendonce's own
    verifier, answers 200 (401 when it fails) and records the verified payloads in order."""

    def __init__(self, secret: str) -> None:
        verifier = SvixWebhookVerifier(secret=secret)
        received: list[tuple[str, dict[str, Any]]] = []
        rejected: list[str] = []
        lock = threading.Lock()
        self.received, self.rejected = received, rejected

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"])).decode()
                try:
                    payload = verifier.verify(body, dict(self.headers.items()))
                except WebhookSignatureError as error:
                    with lock:
                        rejected.append(str(error))
                    self.send_response(401)
                else:
                    with lock:
                        received.append((self.headers["svix-id"], payload))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/webhooks/resend"

    def of_type(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        return [(svix_id, payload) for svix_id, payload in self.received if payload["type"] == kind]

    def distinct(self, kind: str) -> dict[str, dict[str, Any]]:
        """svix-id -> payload, copies folded."""
        return dict(self.of_type(kind))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def receiver(resend_server: LocalResendServer):
    hooks = WebhookReceiver(resend_server.webhook_secret)
    resend_server.set_webhook(hooks.url)
    yield hooks
    resend_server.set_webhook(None)
    hooks.close()


@pytest.fixture
def sdk(resend_server: LocalResendServer, monkeypatch):
    monkeypatch.setattr(resend, "api_key", "re_test_local")
    monkeypatch.setattr(resend, "api_url", resend_server.url)
    monkeypatch.setattr(resend, "default_http_client", resend.RequestsClient(timeout=30))
    return resend


def email(to: str, subject: str = "Spring campaign") -> dict[str, Any]:
    return {
        "from": "News <news@sendonce.example>",
        "to": [to],
        "subject": subject,
        "html": '<p>Hello</p><p><a href="https://shop.example/spring">Shop</a></p>',
        "tags": [{"name": "campaign_id", "value": "spring"}],
    }


def faults(server: LocalResendServer, spec: dict[str, Any]) -> requests.Response:
    return requests.post(f"{server.url}/_local/faults", json=spec, timeout=30)


def delivered(server: LocalResendServer) -> None:
    assert server.wait_for_webhooks(DELIVERY_WAIT_S)


def test_opens_and_clicks_follow_the_rule_that_matches_the_subject(resend_server, receiver, sdk):
    # Given variant B set to open three times as often as variant A, over /_local/faults
    rules = [
        {"subject_contains": "[A]", "opens": 0.2, "clicks": 0.05},
        {"subject_contains": "[B]", "opens": 0.6, "clicks": 0.2},
        {"subject_contains": "*", "opens": 0, "clicks": 0},
    ]
    assert faults(resend_server, {"engagement": rules}).json()["engagement"] == [{**r, "reopens": 0} for r in rules]

    # When 200 recipients get each variant and 20 get another subject
    for variant, count in (("[A]", 200), ("[B]", 200), ("[C]", 20)):
        addresses = [f"{variant[1].lower()}{i}@example.com" for i in range(count)]
        for start in range(0, count, 100):
            sdk.Batch.send([email(a, f"{variant} Spring sale") for a in addresses[start : start + 100]])
    delivered(resend_server)

    # Then the opens and clicks are exactly those the rule decides for each email and address
    matched = parse_engagement(rules)
    expected: Counter[tuple[str, str]] = Counter()
    for record in resend_server.accepted():
        variant = record.subject[:3]
        rule = next(r for r in matched if r.matches(record.subject))
        decided = engagement_of(record.id, record.to[0], rule)
        expected[variant, "email.opened"] += decided.opens
        expected[variant, "email.clicked"] += decided.clicks
    seen: Counter[tuple[str, str]] = Counter()
    for kind in ("email.opened", "email.clicked"):
        for payload in receiver.distinct(kind).values():
            seen[payload["data"]["subject"][:3], kind] += 1
    assert seen == +expected
    assert receiver.rejected == []
    assert resend_server.engagement_sent() == {
        "email.opened": sum(n for (_, kind), n in expected.items() if kind == "email.opened"),
        "email.clicked": sum(n for (_, kind), n in expected.items() if kind == "email.clicked"),
    }
    # And they hold the shares: 40 and 120 of 200 expected, bands 5 standard deviations wide
    assert 10 <= seen["[A]", "email.opened"] <= 70
    assert 85 <= seen["[B]", "email.opened"] <= 155
    assert seen["[C]", "email.opened"] == seen["[C]", "email.clicked"] == 0


def test_every_clicker_opens_after_the_delivery_and_clicks_after_opening(resend_server, receiver, sdk):
    # Given more clicks than opens asked for: opens become max(opens, clicks)
    resend_server.set_engagement([{"subject_contains": "*", "opens": 0.1, "clicks": 0.5}])

    sdk.Batch.send([email(f"r{i}@example.com") for i in range(60)])
    delivered(resend_server)

    delivered_at = {p["data"]["email_id"]: p["created_at"] for _, p in receiver.of_type("email.delivered")}
    opened_at = {p["data"]["email_id"]: p["created_at"] for p in receiver.distinct("email.opened").values()}
    clicks = list(receiver.distinct("email.clicked").values())
    assert clicks, "at a click share of 0.5, 60 recipients click"
    assert {p["data"]["email_id"] for p in clicks} <= set(opened_at)
    assert all(opened_at[email_id] > delivered_at[email_id] for email_id in opened_at)
    for click in clicks:
        data = click["data"]
        assert opened_at[data["email_id"]] < click["created_at"] == data["click"]["timestamp"]
        assert set(data) == {"created_at", "email_id", "from", "to", "subject", "tags", "click"}
        assert data["click"]["link"] == "https://shop.example/spring"
        assert set(data["click"]) == {"ipAddress", "link", "timestamp", "userAgent"}
        assert data["tags"] == {"campaign_id": "spring"}


def test_a_bounced_address_never_opens_or_clicks(resend_server, receiver, sdk):
    resend_server.set_engagement([{"subject_contains": "*", "opens": 1, "clicks": 1}])
    resend_server.bounce(["bob@example.com"])

    sdk.Emails.send(email("ann@example.com"))
    sdk.Emails.send(email("bob@example.com"))
    delivered(resend_server)

    kinds = {
        to: sorted(p["type"] for _, p in receiver.received if p["data"]["to"] == [to])
        for to in ("ann@example.com", "bob@example.com")
    }
    assert kinds["bob@example.com"] == ["email.bounced", "email.sent"]
    assert kinds["ann@example.com"] == ["email.clicked", "email.delivered", "email.opened", "email.sent"]
    opened = next(h for h in resend_server.webhook_deliveries() if h.type == "email.opened")
    assert opened.recipient == "ann@example.com"


def test_out_of_order_with_two_copies_delivers_each_open_twice_with_its_svix_id(resend_server, receiver, sdk):
    state = faults(
        resend_server,
        {
            "engagement": [{"subject_contains": "Spring", "opens": 1, "clicks": 0}],
            "webhook_out_of_order": True,
            "webhook_copies": 2,
        },
    ).json()
    assert (state["webhook_out_of_order"], state["webhook_copies"]) == (True, 2)

    sdk.Emails.send(email("ann@example.com"))
    delivered(resend_server)

    opens = receiver.of_type("email.opened")
    assert len(opens) == 2 and opens[0][0] == opens[1][0]
    assert opens[0][1] == opens[1][1]
    firsts = list(dict.fromkeys((svix_id, p["type"]) for svix_id, p in receiver.received))
    assert [kind for _, kind in firsts] == ["email.opened", "email.delivered", "email.sent"]
    assert resend_server.engagement_sent() == {"email.opened": 1, "email.clicked": 0}


def test_a_reopen_is_a_second_open_with_its_own_svix_id_and_later_time(resend_server, receiver, sdk):
    resend_server.set_engagement([{"subject_contains": "*", "opens": 1, "clicks": 0, "reopens": 1}])

    sdk.Emails.send(email("ann@example.com"))
    delivered(resend_server)

    opens = receiver.distinct("email.opened")
    assert len(opens) == 2
    first, again = sorted(opens.values(), key=lambda p: p["created_at"])
    assert first["created_at"] < again["created_at"]
    assert first["data"] == again["data"]


def test_emit_webhook_sends_an_open_or_a_click_now(resend_server, receiver, sdk):
    sdk.Emails.send(email("ann@example.com"))
    delivered(resend_server)

    assert resend_server.emit_webhook("Ann <ANN@example.com>", "email.clicked") == 1
    response = requests.post(
        f"{resend_server.url}/_local/webhooks/emit",
        json={"address": "ann@example.com", "type": "email.opened"},
        timeout=30,
    )
    assert response.json() == {"queued": 1}
    delivered(resend_server)

    assert [p["data"]["click"]["link"] for p in receiver.distinct("email.clicked").values()] == [
        "https://shop.example/spring"
    ]
    assert len(receiver.distinct("email.opened")) == 1


@pytest.mark.parametrize(
    ("engagement", "named"),
    [
        ({"subject_contains": "*", "opens": 1, "clicks": 0}, "engagement must be a list"),
        (
            [{"subject_contains": "*", "opens": 0, "clicks": 0}, {"subject_contains": "B", "opens": 1.5, "clicks": 0}],
            "engagement[1].opens",
        ),
        ([{"subject_contains": "*", "opens": 0.5, "clicks": "0.1"}], "engagement[0].clicks"),
        ([{"subject_contains": "*", "opens": 0.5, "clicks": 0, "reopens": -0.1}], "engagement[0].reopens"),
        ([{"subject_contains": "*", "opens": True, "clicks": 0}], "engagement[0].opens"),
        ([{"subject_contains": "", "opens": 0.5, "clicks": 0}], "engagement[0].subject_contains"),
        ([{"opens": 0.5, "clicks": 0}], "engagement[0].subject_contains"),
        ([{"subject_contains": "*", "clicks": 0}], "engagement[0].opens"),
        ([{"subject_contains": "*", "opens": 0.5, "clicks": 0, "open": 1}], "engagement[0] has unknown keys ['open']"),
        (["*"], "engagement[0] must be an object"),
    ],
)
def test_a_bad_engagement_is_refused_with_a_400_naming_the_field(resend_server, engagement, named):
    response = faults(resend_server, {"engagement": engagement})

    assert (response.status_code, response.json()["name"]) == (400, "validation_error")
    assert named in response.json()["message"]
    assert requests.get(f"{resend_server.url}/_local/faults", timeout=30).json()["engagement"] == []


@pytest.mark.parametrize("cleared", [None, []])
def test_null_or_an_empty_list_clears_the_engagement(resend_server, receiver, sdk, cleared):
    assert faults(resend_server, {"engagement": [{"subject_contains": "*", "opens": 1, "clicks": 1}]}).ok
    assert faults(resend_server, {"engagement": cleared}).json()["engagement"] == []

    sdk.Emails.send(email("ann@example.com"))
    delivered(resend_server)

    assert sorted(p["type"] for _, p in receiver.received) == ["email.delivered", "email.sent"]
    assert resend_server.engagement_sent() == {"email.opened": 0, "email.clicked": 0}


def test_reset_restores_the_constructors_engagement():
    rules = [{"subject_contains": "[B]", "opens": 0.6, "clicks": 0.2, "reopens": 0.1}]
    with LocalResendServer(rate_limit=None, engagement=rules) as server:
        server.set_engagement(None)
        server.reset()
        assert server.faults()["engagement"] == rules


def test_the_cli_refuses_a_bad_engagement_naming_the_field(capsys):
    with pytest.raises(SystemExit) as exit_:
        resend_server_main(["--port", "0", "--engagement", '[{"subject_contains": "*", "opens": 2, "clicks": 0}]'])

    assert exit_.value.code == 2
    assert "engagement[0].opens must be a number from 0 to 1" in capsys.readouterr().err
