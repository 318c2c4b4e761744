"""`make bench-fair` on tiny campaigns: the stack deployed into moto, a small campaign
published behind a large one (and the large one alone), then one large and two small ones
in one order, weights 2:1 and a high-priority campaign last, and a campaign 60 % Google under
a Google cap; every campaign completed, nobody sent twice or missed, and the report has its
figures. Counts only: no timing assertion (the machine is shared).

Marked slow: about a minute on an idle machine (the deploy, then four rounds, each waiting for
its campaigns to complete), several beside the test suite."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_bench_scale_smoke import run_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LARGE, SMALL, SMALLS = 300, 100, 2
SHARE_LARGE, SHARE_SMALL, WEIGHTED = 40, 10, 20  # the rounds of shares: single mode, one email a request
GROUPS = 100  # the round of caps per mailbox group: 60 Google recipients under a cap of 20/s


@pytest.mark.timeout(1200)
def test_bench_fair_completes_every_campaign_with_no_duplicate_and_nobody_missing(tmp_path):
    out = tmp_path / "bench-fair.json"
    args = ("--large", str(LARGE), "--small", str(SMALL), "--smalls", str(SMALLS), "--consumers", "default")
    args += ("--share-large", str(SHARE_LARGE), "--share-small", str(SHARE_SMALL), "--weighted", str(WEIGHTED))
    args += ("--groups", str(GROUPS), "--google-cap", "20")
    stdout = run_bench("bench.fair", *args, "--no-noisy", "--orders", "large-first", "--out", str(out), timeout=900)
    report = json.loads(out.read_text())
    assert "small behind large" in stdout and "equal shares" in stdout
    assert report["skipped"] == [] and report["command"].endswith("--out " + str(out))
    assert report["machine"]["nproc"] >= 1 and report["config"]["default_consumers"] >= 1

    caps = report["mailbox_groups"]
    assert (caps["duplicates"], caps["missing"], caps["completed"]) == (0, 0, True)
    assert caps["by_group"]["google"] == 60 and caps["google_send_group"] == 10
    assert caps["google_busiest_second"] > 0 and "caps per mailbox group" in stdout

    [behind] = report["small_behind_large"]
    assert (behind["large"], behind["small"], behind["noisy_reachable"]) == (LARGE, SMALL, False)
    rounds = [behind["rounds"]["alone"], behind["rounds"]["together"]]
    [equal] = report["equal_shares"]
    rounds.append(equal["round"])
    [weighted] = report["weighted"]
    [urgent] = report["priority"]
    rounds += [weighted["round"], urgent["round"]]
    assert [list(r["campaigns"]) for r in rounds] == [
        ["large"],
        ["large", "small"],
        ["large", "small1", "small2"],
        ["heavy", "light"],
        ["normal1", "normal2", "urgent"],
    ]
    assert [c["recipients"] for c in urgent["round"]["campaigns"].values()] == [SHARE_LARGE, SHARE_LARGE, SHARE_SMALL]
    assert {c["weight"] for c in weighted["round"]["campaigns"].values()} == {1, 2}
    assert urgent["round"]["campaigns"]["urgent"]["priority"] == "high"
    for round_ in rounds:
        for role, campaign in round_["campaigns"].items():
            assert (campaign["duplicates"], campaign["missing"], campaign["completed"]) == (0, 0, True), role
            assert campaign["emails_accepted"] == campaign["recipients"], role
            assert campaign["time_s"] is not None, role
        # The limiter's key was written while they sent, and its units per recipient reported.
        assert round_["limiter_key"] == "limiter#resend" and round_["limiter_writes"] > 0
        assert round_["limiter_write_units_per_recipient"] > 0

    # The shares are of the emails accepted while all three had work queued: they add up to
    # 1, and Jain's index lies between 1/n (one campaign took everything) and 1 (even).
    # Each campaign of the rounds of shares was forecast before its consumers started, and its
    # error against the measured time reported (the figure, not a goal: the machine is shared).
    shares_rounds = [equal["round"], weighted["round"], urgent["round"]]
    forecast = [c for r in shares_rounds for c in r["campaigns"].values()]
    assert all(c["forecast_s"] > 0 and c["forecast_error"] is not None for c in forecast)
    assert report["forecast"]["campaigns"] == len(forecast) == 8
    assert "campaign forecast's ETA" in stdout
    assert sum(equal["shares"].values()) == pytest.approx(1.0, abs=0.01)
    assert 1 / 3 - 0.001 <= equal["jain"] <= 1.0
    assert sum(equal["emails_in_window"].values()) == sum(sum(s) for s in equal["per_second"].values())
