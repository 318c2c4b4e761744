"""The deep profile's figures summed over its workers (tests/model/figures.py)."""

import json

from tests.model import figures


def test_parts_are_summed_and_seconds_are_the_longest_workers(tmp_path):
    path = tmp_path / "model-figures.json"
    (tmp_path / "model-figures.json.gw0").write_text(
        json.dumps({"profile": "deep", "steps": 7, "crashes": 2, "seconds": 10.5})
    )
    (tmp_path / "model-figures.json.gw1").write_text(
        json.dumps({"profile": "deep", "steps": 5, "drains": 1, "seconds": 12.0})
    )

    assert figures.main([str(path), "--min-steps", "12"]) == 0

    merged = json.loads(path.read_text())
    assert merged == {"profile": "deep", "workers": 2, "steps": 12, "crashes": 2, "drains": 1, "seconds": 12.0}
    assert not list(tmp_path.glob("*.gw*"))


def test_a_profile_short_of_its_steps_fails(tmp_path, capsys):
    path = tmp_path / "model-figures.json"
    path.write_text(json.dumps({"profile": "deep", "steps": 19_999, "seconds": 1.0}))

    assert figures.main([str(path), "--min-steps", "20000"]) == 1
    assert "19,999 steps, fewer than the 20,000 asked" in capsys.readouterr().out
