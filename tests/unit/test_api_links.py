"""The operator API's route table read from its OpenAPI paths (a 405's `Allow`), and its links."""

from __future__ import annotations

from sendonce.handlers.api_links import CAMPAIGN_OPERATIONS, ServedPaths, campaign_links

PATHS = {
    "/campaigns": ["get", "post"],
    "/campaigns/{campaign_id}": ["get"],
    "/campaigns/{campaign_id}/publish": ["post"],
}


def test_a_parameter_is_one_segment_and_a_path_matches_whole():
    served = ServedPaths(PATHS)

    assert served.methods("/campaigns") == ["GET", "POST"]
    assert served.methods("/campaigns/c-1") == ["GET"]
    assert served.methods("/campaigns/c-1/publish") == ["POST"]
    assert served.methods("/campaigns/a/b") == []
    assert served.methods("/campaigns/") == []
    assert served.methods("/campaigns/c-1/publish/more") == []
    assert served.methods("/nothing") == []


def test_regex_characters_in_a_path_are_literal():
    served = ServedPaths({"/openapi.json": ["GET"]})

    assert served.methods("/openapi.json") == ["GET"]
    assert served.methods("/openapiXjson") == []


def test_links_point_at_each_operation_by_json_pointer_with_the_answers_campaign_id():
    links = campaign_links()

    assert set(links) == set(CAMPAIGN_OPERATIONS)
    assert links["Publish"] == {
        "operationRef": "#/paths/~1campaigns~1{campaign_id}~1publish/post",
        "parameters": {"campaign_id": "$response.body#/campaign_id"},
    }
