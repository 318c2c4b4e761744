"""`sendonce campaign preview` and `test-send` (and their API routes) against the local stack:
moto's server, the real `resend` SDK against the local Resend server, the real consumer."""

from __future__ import annotations

import json
import os

import pytest

from sendonce.domain.deliverability.ports import SuppressionReason
from sendonce.domain.models import CampaignState, email_fingerprint
from sendonce.handlers import api
from sendonce.handlers.preview_routes import SendingOnDemand
from tests.integration.operator_helpers import api_event, as_json, lambda_context, sendonce, spec_file, write_csv

pytestmark = pytest.mark.integration


def test_preview_and_check_name_the_template_error_by_variable_and_line(system, tmp_path):
    sendonce(system, "campaign", "create", "--spec", str(spec_file(tmp_path / "c.yaml", system)))
    people = tmp_path / "people.jsonl"
    people.write_text(
        json.dumps({"recipient_id": "r1", "email": f"a@{system.domain}", "variables": {"name": "Ann"}})
        + "\n"
        + json.dumps({"recipient_id": "r2", "email": f"b@{system.domain}", "variables": {"nmae": "Bob"}})
        + "\n"
        + json.dumps({"recipient_id": "r3", "email": "nobody"})
        + "\n"
    )

    missing = sendonce(system, "campaign", "preview", "c1", "--vars", '{"nmae": "Ann"}')
    shown = as_json(sendonce(system, "campaign", "preview", "c1", "--recipient", f"{people}:1", "--json"))
    out = tmp_path / "c1.html"
    written = sendonce(system, "campaign", "preview", "c1", "--vars", '{"name": "<Ann>"}', "--out", str(out))
    checked = sendonce(system, "campaign", "preview", "c1", "--recipients", str(people), "--check")

    assert missing.exit_code == 2
    assert "'name' is undefined" in missing.stderr
    assert "variables the templates use, not given: name" in missing.stderr
    assert "variables given, used by no template: nmae" in missing.stderr
    assert (shown["ok"], shown["subject"], shown["recipient_id"]) == (True, "Hello Ann", "r1")
    assert shown["html"] == "<p>Hi Ann</p>" and shown["text"] == "Hi Ann"
    assert written.exit_code == 0 and out.read_text() == "<p>Hi &lt;Ann&gt;</p>"
    assert checked.exit_code == 2
    assert f"{people}:2 (r2): template variable missing: 'name' is undefined" in checked.stderr
    assert f"{people}:3: email: not a valid email address" in checked.stderr
    assert "checked 2 recipient(s)" in checked.stdout and "2 failed" in checked.stdout
    assert system.operator.get("c1").state is CampaignState.DRAFT and system.deliveries() == {}


def test_a_test_send_reaches_the_provider_marked_and_the_real_send_still_happens_once(system, tmp_path):
    sendonce(system, "campaign", "create", "--spec", str(spec_file(tmp_path / "c.yaml", system)))
    me = f"user0@{system.domain}"

    sent = sendonce(system, "campaign", "test-send", "c1", "--to", me, "--vars", '{"name": "Tester"}')
    status = as_json(sendonce(system, "campaign", "status", "c1", "--json"))

    assert sent.exit_code == 0, sent.stderr
    assert "1 of 1 sent" in sent.stdout and me not in sent.stdout
    [test] = system.resend.accepted()
    assert test.subject == "[TEST] Hello Tester" and test.headers["X-Sendonce-Test"] == "1"
    assert test.idempotency_key.startswith("sendonce-test:c1:")
    assert "recipient_id" not in {tag["name"] for tag in test.tags}
    # Nothing of the campaign moved: still a draft, no delivery in the ledger.
    assert (status["state"], status["total"]) == ("draft", 0)
    assert status["test_sends"]["count"] == 1
    [recorded] = status["test_sends"]["recent"]
    assert recorded["by"] == "ann" and recorded["outcomes"][0]["email_fingerprint"] == email_fingerprint(me)
    assert system.domain not in json.dumps(status)
    assert list(system.operator.records("c1")) == []

    # When the campaign is published to the same address and consumed
    people = write_csv(tmp_path / "people.csv", [("r0", me, "Ann")])
    assert sendonce(system, "campaign", "publish", "c1", "--recipients", str(people)).exit_code == 0
    system.poller().run_until_idle(idle_seconds=1, max_seconds=30)

    # Then the real email went out once, under the real key, and the test is still the only test
    real = [e for e in system.resend.accepted() if not e.subject.startswith("[TEST]")]
    assert [(e.subject, e.idempotency_key) for e in real] == [("Hello Ann", "sendonce:c1:r0")]
    assert system.deliveries() == {me: 2}  # one test, one real
    after = as_json(sendonce(system, "campaign", "status", "c1", "--json"))
    assert (after["state"], after["sent"], after["test_sends"]["count"]) == ("completed", 1, 1)
    table = sendonce(system, "campaign", "status", "c1")
    assert "test sends: 1" in table.stdout


def test_a_suppressed_address_is_refused_unless_included(system, deliverability, tmp_path):
    sendonce(system, "campaign", "create", "--spec", str(spec_file(tmp_path / "c.yaml", system)))
    gone = f"gone@{system.domain}"
    deliverability.suppressions.add(gone, SuppressionReason.UNSUBSCRIBED, "test")
    five_plus_one = ",".join(f"me{i}@{system.domain}" for i in range(6))

    refused = sendonce(system, "campaign", "test-send", "c1", "--to", gone, "--vars", '{"name": "A"}')
    too_many = sendonce(system, "campaign", "test-send", "c1", "--to", five_plus_one, "--vars", '{"name": "A"}')
    included = as_json(
        sendonce(
            system, "campaign", "test-send", "c1", "--to", gone, "--vars", '{"name": "A"}', "--include-suppressed",
            "--json",
        )
    )  # fmt: skip

    assert refused.exit_code == 2 and "to[0] (unsubscribed" in refused.stderr and gone not in refused.stderr
    assert too_many.exit_code == 2 and "at most 5" in too_many.stderr
    assert included["outcomes"][0]["suppressed"].startswith("unsubscribed") and included["sent"] == 1
    [email] = system.resend.accepted()
    assert email.headers["List-Unsubscribe"].startswith("<https://unsubscribe.example.com/u/v1.c1.test-")
    assert deliverability.suppressions.is_suppressed(gone).source == "test"  # unchanged


def call(system, method, path, body=None, env=None):
    response = api.lambda_handler(
        api_event(method, path, body),
        lambda_context(),
        service=system.operator,
        sending=SendingOnDemand.from_env(env if env is not None else dict(os.environ)),
    )
    return response["statusCode"], json.loads(response["body"])


def test_the_api_previews_test_sends_and_shows_them_in_the_status(system, deliverability):
    system.campaign()
    me = f"user0@{system.domain}"

    preview = call(system, "POST", "/campaigns/c1/preview", {"variables": {"nmae": "Ann"}})
    good = call(system, "POST", "/campaigns/c1/preview", {"recipient": {"recipient_id": "r1", "email": me, "variables": {"name": "Ann"}}})  # fmt: skip
    both = call(system, "POST", "/campaigns/c1/preview", {"variables": {}, "recipient": {"recipient_id": "r1", "email": me}})  # fmt: skip
    sent = call(system, "POST", "/campaigns/c1/test-sends", {"to": [me], "variables": {"name": "Tester"}})
    # The test send's webhooks reach the events function in this process: let them land before
    # calling the API again (Powertools keeps the event being resolved on its BaseRouter class,
    # shared by every resolver of a process, so one handler at a time, as Lambda runs them).
    assert system.resend.wait_for_webhooks(30)
    bad = call(system, "POST", "/campaigns/c1/test-sends", {"to": [me], "variables": {}})
    missing = call(system, "POST", "/campaigns/nope/test-sends", {"to": [me]})
    status = call(system, "GET", "/campaigns/c1/delivery-status")

    assert preview[0] == 200 and preview[1]["ok"] is False
    assert (preview[1]["missing"], preview[1]["unused"]) == (["name"], ["nmae"])
    assert good[0] == 200 and good[1]["subject"] == "Hello Ann" and good[1]["from"] == f"news@{system.domain}"
    assert both[0] == 422
    assert sent[0] == 200 and sent[1]["sent"] == 1 and sent[1]["by"].endswith("user/ann")
    assert me not in json.dumps(sent[1])
    assert bad[0] == 409 and "'name' is undefined" in bad[1]["message"]
    assert missing[0] == 404
    assert status[0] == 200 and (status[1]["total"], status[1]["test_sends"]["count"]) == (0, 1)
    assert system.resend.accepted()[0].subject == "[TEST] Hello Tester"
    assert good[1]["headers"]["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"


def test_the_api_previews_and_test_sends_an_ab_campaigns_variants(system, deliverability):
    spec = {
        "id": "ab",
        "name": "A/B",
        "from": f"news@{system.domain}",
        "provider": "resend",
        "variants": [
            {"id": "A", "subject": "A for {{ name }}", "html": "<p>A</p>"},
            {"id": "B", "subject": "B for {{ name }}", "text": "B"},
        ],
        "test": {"share": 0.5, "pick_by": "opens", "after": "1h"},
        "tracking": {"opens": True},
    }
    me = f"user0@{system.domain}"
    assert call(system, "POST", "/campaigns", spec)[0] == 201

    shown = call(system, "POST", "/campaigns/ab/preview", {"variables": {"name": "Ann"}, "variant": "B"})
    sent = call(system, "POST", "/campaigns/ab/test-sends", {"to": [me], "variables": {"name": "Ann"}})
    assert system.resend.wait_for_webhooks(30)
    unknown = call(system, "POST", "/campaigns/ab/preview", {"variant": "Z"})

    assert shown[0] == 200 and (shown[1]["variant"], shown[1]["subject"], shown[1]["text"]) == ("B", "B for Ann", "B")
    assert sent[0] == 200 and [o["variant"] for o in sent[1]["outcomes"]] == ["A", "B"] and sent[1]["sent"] == 2
    assert sorted(e.subject for e in system.resend.accepted()) == ["[TEST] A for Ann", "[TEST] B for Ann"]
    assert unknown[0] == 400 and unknown[1]["message"] == "variant: 'Z' is not one of A, B"


def test_the_api_refuses_test_sends_without_the_consumers_settings(system):
    system.campaign()

    refused = call(system, "POST", "/campaigns/c1/test-sends", {"to": [f"me@{system.domain}"]}, env=system.env)

    assert refused[0] == 400 and refused[1]["error"] == "TestSendsUnavailable"
    assert system.resend.accepted() == []
