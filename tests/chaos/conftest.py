"""The chaos matrix runs on the same local system as the integration tests."""

from tests.integration.conftest import LocalSystem, resend_server, system  # noqa: F401
