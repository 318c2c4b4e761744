"""API Gateway routes exactly what the operator API's handler serves (its OpenAPI document)."""

from __future__ import annotations

import json
import re

from sendonce.handlers import api
from sendonce_cdk.operator_api import ROUTES


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


def test_every_route_of_the_openapi_document_is_routed_by_api_gateway():
    document = json.loads(api.document())
    served = {f"{method.upper()} {_shape(path)}" for path, item in document["paths"].items() for method in item}
    routed = {f"{method.value} {_shape(path)}" for method, path in ROUTES} - {"GET /openapi.json"}

    assert served == routed
