"""What the wheel installs at the top level of site-packages: names that start with
`sendonce` only, so that none collides with a package of the user's own (an `infra`
did). Read from the metadata setuptools builds the wheel's dist-info from (top_level.txt,
SOURCES.txt), offline and in about a second; tests/infra/test_wheel.py builds and installs
the wheel itself."""

from __future__ import annotations

from tests.wheel import wheel_metadata


def test_every_top_level_name_the_wheel_installs_starts_with_sendonce(tmp_path):
    # Given the metadata of the wheel built from the sources
    metadata = wheel_metadata(tmp_path)

    # When its top-level names and its files are listed
    top_level = set((metadata / "top_level.txt").read_text().split())
    files = set((metadata / "SOURCES.txt").read_text().split())

    # Then every top-level name starts with sendonce, and the repository's app is in it (the demo deploys it)
    assert len(top_level) >= 5, "no names: this test would pass vacuously"
    assert sorted(n for n in top_level if not n.startswith("sendonce")) == []
    assert {
        "sendonce",
        "sendonce_cdk",
        "sendonce_client",
        "sendonce_infra",
        "sendonce_local",
        "sendonce_ops",
    } <= top_level
    assert "infra/sendonce_infra/app.py" in files
    # `sendonce cost` (the base install) prices DynamoDB from bench-scale's capture: it ships too
    assert "src/sendonce_ops/cost/measured.json" in files
