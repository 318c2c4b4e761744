"""moto_api.py: /moto-api/data.json without a Docker engine."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from tests.integration.moto_patches.helpers import (
    PATCHED,
    _lambda_function,
    moto_as,
)

pytestmark = pytest.mark.integration


def test_stock_moto_data_json_fails_once_a_lambda_function_exists_without_docker(no_docker: None) -> None:
    with moto_as("stock"):
        # Given a Lambda function and no Docker engine
        function = _lambda_function()

        # Then its docker_client raises DockerException only, and data.json fails with it
        with pytest.raises(docker.errors.DockerException) as raised:
            _ = function.docker_client
        assert not isinstance(raised.value, AttributeError)
        with pytest.raises(docker.errors.DockerException):
            requests.get("http://motoapi.amazonaws.com/moto-api/data.json", timeout=30)


@pytest.mark.parametrize("profile", PATCHED)
def test_patched_moto_data_json_skips_the_docker_probe(profile: str, no_docker: None) -> None:
    with moto_as(profile):
        # Given a Lambda function and no Docker engine
        function = _lambda_function()

        # Then its docker_client raises a DockerException that is an AttributeError too
        with pytest.raises(docker.errors.DockerException) as raised:
            _ = function.docker_client
        assert isinstance(raised.value, AttributeError)
        assert "Error while fetching server API version" in str(raised.value)

        # And data.json lists the function, without that one attribute
        response = requests.get("http://motoapi.amazonaws.com/moto-api/data.json", timeout=30)
        assert response.status_code == 200
        [listed] = response.json()["awslambda"]["LambdaFunction"]
        assert listed["function_name"] == "fn"
        assert "docker_client" not in listed
