"""moto's own API (``/moto-api/data.json``) without a Docker engine (a defect fix).

Written against moto ``MOTO_VERSION`` only: ``sendonce_local.moto_patches`` checks the
installed version before it applies any patch. Tested against stock moto in
tests/integration/moto_patches/test_moto_api.py.
"""

from __future__ import annotations

from typing import Any

from sendonce_local.moto_patches.replacing import Replace


def docker_probe_fails_as_missing_attribute(replace: Replace) -> None:
    """GET /moto-api/data.json answers HTTP 500 once a Lambda function exists and Docker is absent.

    ``/moto-api/data.json`` (where moto's server shows, among everything else, the email its
    SES accepted) reads every public attribute of every model instance and skips those that
    raise ``TypeError``, ``AttributeError`` or ``ValueError``. ``DockerModel.docker_client``
    (inherited by Lambda functions and Batch jobs) calls ``docker.from_env()``, which raises
    ``docker.errors.DockerException`` when no Docker engine answers: the endpoint fails as a
    whole as soon as one Lambda function exists, as it does after deploying our stack.

    The patch re-raises that error from the property as ``DockerUnavailableError``, a
    ``DockerException`` that is also an ``AttributeError``: data.json skips the attribute,
    and every caller that catches ``DockerException`` (Lambda's invoke) still catches it.
    With Docker running, nothing changes.
    """
    import docker.errors
    from moto.utilities.docker_utilities import DockerModel

    class DockerUnavailableError(docker.errors.DockerException, AttributeError):
        """No Docker engine answered moto's ``docker.from_env()``."""

    stock = vars(DockerModel)["docker_client"]

    def docker_client(self: Any) -> Any:
        try:
            return stock.fget(self)
        except docker.errors.DockerException as exc:
            raise DockerUnavailableError(str(exc)) from exc

    replace(DockerModel, "docker_client", property(docker_client, doc=stock.__doc__))
