"""Schemathesis holds the operator API to its own OpenAPI document: generated requests
(valid and invalid) against the local API server over moto, checked for no 5xx, documented
status codes and content types, responses matching their schemas, and schema-invalid
requests refused. Bounded (derandomized, max examples) so that it runs in well under a minute."""

from __future__ import annotations

import json

import hypothesis
import pytest
import requests
import schemathesis
from schemathesis import checks
from schemathesis.specs.openapi import checks as openapi_checks

from sendonce.handlers import api

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 40
EXISTING = "fuzz-campaign"


# The document the server serves at /openapi.json, built from the handler's models (a test
# checks the two are the same); loaded at collection so that pytest can parametrize by route.
schema = schemathesis.openapi.from_dict(
    json.loads(api.app.get_openapi_json_schema(title=api.TITLE, version=api.VERSION))
)


@pytest.fixture
def existing_campaign(system):
    system.campaign(EXISTING)  # so that generated requests reach a campaign as well as 404


def test_the_fuzzed_document_is_the_one_the_server_serves(operator_api):
    assert requests.get(f"{operator_api.url}/openapi.json", timeout=10).json() == schema.raw_schema


CHECKS = [
    checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.negative_data_rejection,
]
# Schema-valid requests must be accepted too (2xx, or 404 / 409 for a missing campaign or a
# state that forbids it) - except an S3 publish, whose object does not exist: that is a 400
# naming the object, which no schema can foresee; and a test send, which is a 400 when the
# campaign's templates fail for its variables or the function has no suppression list.
POSITIVE = [*CHECKS, openapi_checks.positive_data_acceptance]


@schema.parametrize()
@hypothesis.settings(
    max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(hypothesis.HealthCheck)
)
def test_the_operator_api_answers_every_generated_request_as_documented(case, operator_api, existing_campaign):
    if case.path_parameters and case.path_parameters.get("campaign_id") and len(str(case.body)) % 2:
        case.path_parameters["campaign_id"] = EXISTING
    names_s3_object = isinstance(case.body, dict) and "s3" in case.body
    unforeseeable = names_s3_object or case.path.endswith("/test-sends")
    case.call_and_validate(base_url=operator_api.url, checks=CHECKS if unforeseeable else POSITIVE)
