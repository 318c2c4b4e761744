"""The published contracts (schemas/, docs/openapi.json) are the code's: regenerated here and
compared with the committed files; real message bodies validate against the committed
schema; the batch id recipe in docs/messages.md is batch_id_for."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from sendonce.domain.campaigns.service import CampaignService, batch_id_for
from sendonce.domain.models import Recipient
from sendonce.handlers import api
from sendonce_local import generated_files
from tests.fakes import FakeCampaignStore, FakeLedger, FakeQueue

ROOT = Path(__file__).resolve().parents[2]
MESSAGES_DOC = ROOT / "docs" / "messages.md"


def committed(path: str) -> dict:
    return json.loads((ROOT / path).read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", sorted(generated_files.CONTRACTS))
def test_the_committed_contract_is_what_the_code_generates(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    assert text == generated_files.generated()[path], f"{path} is stale: run `make contracts` and commit it"


def test_check_names_a_drifted_or_missing_file_and_write_repairs_it(tmp_path, capsys):
    generated_files.write(tmp_path)
    assert generated_files.main(["--check", "--root", str(tmp_path)]) == 0
    schema = tmp_path / generated_files.BATCH_MESSAGE_PATH
    schema.write_text(schema.read_text().replace('"maxItems": 100', '"maxItems": 99'))
    (tmp_path / generated_files.OPENAPI_PATH).unlink()

    assert generated_files.main(["--check", "--root", str(tmp_path)]) == 1
    errors = capsys.readouterr().err
    assert generated_files.BATCH_MESSAGE_PATH in errors and generated_files.OPENAPI_PATH in errors
    assert generated_files.CAMPAIGN_SPEC_PATH not in errors
    assert generated_files.write(tmp_path) == [generated_files.BATCH_MESSAGE_PATH, generated_files.OPENAPI_PATH]
    assert generated_files.drifted(tmp_path) == []


@pytest.mark.parametrize("path", [generated_files.BATCH_MESSAGE_PATH, generated_files.CAMPAIGN_SPEC_PATH])
def test_each_schema_is_draft_2020_12_with_a_stable_id(path):
    schema = committed(path)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert (
        schema["$id"]
        == {
            generated_files.BATCH_MESSAGE_PATH: "urn:sendonce:schema:batch-message:v1",
            generated_files.CAMPAIGN_SPEC_PATH: "urn:sendonce:schema:campaign-spec:v1",
        }[path]
    )
    jsonschema.Draft202012Validator.check_schema(schema)


def test_the_committed_openapi_document_is_the_one_the_api_serves():
    service = CampaignService(
        campaigns=FakeCampaignStore(), ledger=FakeLedger(), queue=FakeQueue(), provider_names=["ses", "resend"]
    )
    event = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/openapi.json",
        "rawQueryString": "",
        "headers": {},
        "requestContext": {"http": {"method": "GET", "path": "/openapi.json"}, "requestId": "r", "stage": "$default"},
        "isBase64Encoded": False,
    }

    answer = api.lambda_handler(event, _Context(), service=service)

    assert answer["statusCode"] == 200
    assert json.loads(answer["body"]) == committed(generated_files.OPENAPI_PATH)
    assert "get" in committed(generated_files.OPENAPI_PATH)["paths"]["/campaigns"]


class _Context:
    function_name = "sendonce-api"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:sendonce-api"
    aws_request_id = "r"


# --- a real published body against the committed schema ---------------------------------


def _published_bodies() -> list[dict]:
    from sendonce.domain.models import Campaign, Content

    queue = FakeQueue()
    service = CampaignService(
        campaigns=FakeCampaignStore(), ledger=FakeLedger(), queue=queue, provider_names=["ses", "resend"]
    )
    service.create(
        Campaign(
            campaign_id="spring-launch",
            name="Spring",
            provider="ses",
            sender="news@example.com",
            content=Content(subject="Hi {{ name }}", text="Hi {{ name }}"),
        )
    )
    recipients = [
        Recipient(
            recipient_id=f"r{i}",
            email=f"user{i}@example.com",
            variables={"name": f"Zoë {i}", "visits": i, "score": i / 2, "vip": i % 2 == 0, "team": None},
        )
        for i in range(150)
    ]
    service.publish("spring-launch", recipients)
    return [json.loads(body) for body in queue.published]


def test_a_published_message_body_validates_against_the_committed_schema():
    validator = jsonschema.Draft202012Validator(committed(generated_files.BATCH_MESSAGE_PATH))
    bodies = _published_bodies()

    assert [len(b["recipients"]) for b in bodies] == [100, 50]
    for body in bodies:
        validator.validate(body)
        assert body["batch_id"] == batch_id_for(body["campaign_id"], [Recipient(**r) for r in body["recipients"]])


@pytest.mark.parametrize(
    "breaks", ["101 recipients", "extra field", "schema_version 2", "address as id", "nested value"]
)
def test_the_schema_refuses_what_the_consumer_treats_as_poison(breaks):
    validator = jsonschema.Draft202012Validator(committed(generated_files.BATCH_MESSAGE_PATH))
    body = _published_bodies()[0]
    if breaks == "101 recipients":
        body["recipients"] += [{"recipient_id": "extra", "email": "x@example.com"}]
    elif breaks == "extra field":
        body["priority"] = "high"
    elif breaks == "schema_version 2":
        body["schema_version"] = 2
    elif breaks == "address as id":
        body["recipients"][0]["recipient_id"] = "ann@example.com"
    else:
        body["recipients"][0]["variables"]["name"] = {"first": "Ann"}

    assert not validator.is_valid(body)


def test_the_campaign_spec_schema_accepts_the_documented_spec_and_states_batch_needs_resend():
    validator = jsonschema.Draft202012Validator(committed(generated_files.CAMPAIGN_SPEC_PATH))
    spec = {
        "id": "spring-2026",
        "name": "Spring launch",
        "subject": "Hello {{ name }}",
        "from": "News <news@example.com>",
        "reply_to": "help@example.com",
        "html": "<p>Hi {{ name }}</p>",
        "text": "Hi {{ name }}",
        "provider": "ses",
    }

    assert validator.is_valid(spec)
    assert validator.is_valid({**spec, "provider": "resend", "delivery_mode": "batch"})
    assert not validator.is_valid({**spec, "delivery_mode": "batch"})  # ses sends no batches
    assert not validator.is_valid({k: v for k, v in spec.items() if k not in ("html", "text")})
    assert not validator.is_valid({**spec, "from": "News <news@example.com>\r\nBcc: x@example.com"})


# --- the batch id recipe in docs/messages.md ----------------------------------------------


def _between(marker: str) -> str:
    text = MESSAGES_DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- {marker}:start -->\n```[a-z]*\n(.*?)```\n<!-- {marker}:end -->", text, re.S)
    assert found, f"docs/messages.md lost its {marker} block"
    return found.group(1)


def test_the_documented_batch_id_recipe_and_example_match_batch_id_for():
    # Given the example block of docs/messages.md, run as a foreign producer would run it
    namespace: dict = {}
    exec(_between("batch-id-example"), namespace)
    recipients = [Recipient(**r) for r in namespace["recipients"]]

    # Then it computes batch_id_for's id, the one the document prints, from the bytes it shows
    expected = batch_id_for(namespace["campaign_id"], recipients)
    assert namespace["batch_id"] == expected
    assert f"and the id: **`{expected}`**." in MESSAGES_DOC.read_text(encoding="utf-8")
    canonical = [json.dumps(r.model_dump(mode="json"), sort_keys=True) for r in recipients]
    assert _between("batch-id-canonical").splitlines() == canonical
    assert any("\\u00eb" in line for line in canonical)  # the example shows ensure_ascii at work
