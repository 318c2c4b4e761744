"""`make bench-scale` on a tiny campaign: the stack deployed into moto, the campaign
published in streams, sent in batch mode with provider events, completed; the JSON report
has every figure, nobody is sent twice or missed, and the accountant saw the writes.
Counts only: no timing assertion (the machine is shared).

Marked slow: deploying the CDK app into moto alone takes about a minute here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RECIPIENTS = 200
PHASE = {
    "seconds",
    "recipients_per_s",
    "dynamodb_requests_per_recipient",
    "write_units_per_recipient",
    "write_units_per_recipient_by_table",
    "hottest",
    "partition_write_units_per_s",
}
HOTTEST = {"key", "write_units_per_recipient", "ceiling_recipients_per_s", "peak_key", "peak_write_units_per_s"}


def run_bench(module: str, *args: str, timeout: int) -> str:
    """`python -m <module> <args>` on its own moto (the environment's AWS settings left out);
    its stdout, after checking it exited 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SENDONCE_", "RESEND_"))}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / p) for p in ("lambdas", "src", "."))
    run = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return run.stdout


@pytest.mark.timeout(1500)
def test_bench_scale_reports_every_figure_with_no_duplicate_and_nobody_missing(tmp_path):
    out, captured = tmp_path / "bench-scale.json", tmp_path / "stream.jsonl"
    stdout = run_bench(
        "bench.scale",
        *("--sizes", str(RECIPIENTS), "--webhook-wait", "300", "--capture-stream", str(captured), "--out", str(out)),
        timeout=840,
    )
    report = json.loads(stdout)
    assert json.loads(out.read_text()) == report

    [campaign] = report["campaigns"]
    assert campaign["recipients"] == RECIPIENTS
    assert (campaign["duplicates"], campaign["missing"], campaign["state"]) == (0, 0, "completed")
    for phase in ("publish", "send"):
        assert PHASE <= set(campaign[phase]), phase
        assert campaign[phase]["write_units_per_recipient"] > 0  # the accountant saw the writes
        assert all(HOTTEST <= set(h) for h in campaign[phase]["hottest"].values())
    # Publishing writes batch records in the campaigns table; sending writes the ledger
    # (two 100-item transactions: at least 4 units per recipient) and its events.
    assert campaign["publish"]["hottest"]["campaigns"]["write_units_per_recipient"] > 0
    assert campaign["send"]["write_units_per_recipient_by_table"]["ledger"] >= 4
    assert campaign["send"]["completed"] is True and campaign["send"]["webhooks"] > 0
    # The counters' status read and the full read agree, the counters' one is smaller
    status = campaign["status"]
    assert status["agree"] is True
    assert status["counters"]["bytes"] < status["full_read"]["bytes"]
    # Who wrote (bench/scale_writers.py): every write under a writer the cost model describes,
    # the consumer's ledger claims and the events function's annotations among them; one size
    # is no line to fit fixed and per-recipient figures to.
    writers = campaign["writers"]["writers"]
    assert [name for name in writers if "unclassified" in name] == []
    assert writers["consumer: ledger claims and settles"]["write_units_per_recipient"] >= 4
    assert writers["events: ledger annotations"]["write_units"] > 0
    assert sum(w["write_units"] for w in writers.values()) == campaign["writers"]["write_units"]
    assert report["writers_fit"] is None
    assert {e["recipients"] for e in report["extrapolated"]} == {100_000, 1_000_000}
    assert report["config"]["consumers"] >= 1 and report["machine"]["nproc"] >= 1
    # One batch-mode message against the one-by-one path: both sent by the deployed consumer,
    # each recipient once; one provider request per batch-mode message, one per recipient one
    # by one; the batch-mode consumer makes fewer DynamoDB requests per message than it has
    # recipients (its campaign's completion check included), one by one at least two per
    # recipient. The ratio is reported, not asserted (a timing).
    per_message = report["per_message"]
    for path, requests in (("one_by_one", 100), ("batch", 1)):
        figures = per_message[path]
        assert (figures["duplicates"], figures["missing"]) == (0, 0), path
        assert figures["provider_requests_per_message"] == requests, path
        assert len(figures["message_s"]) == figures["messages"], path
    assert per_message["batch"]["consumer_dynamodb_requests_per_message"] < 100
    assert per_message["one_by_one"]["consumer_dynamodb_requests_per_message"] >= 200
    assert per_message["batch_vs_one_by_one_ratio"] > 0 and per_message["goal"] == 0.125

    # The aggregator's records, replayed as a 1,000-recipients/s table's 8 stream shards would
    # batch them: the counters come out equal to the ledger, in fewer writes per record.
    replayed = run_bench(
        "bench.stream_replay", str(captured), "--rates", "1000", "--out", str(tmp_path / "r.json"), timeout=600
    )
    [run] = json.loads(replayed)["runs"]
    assert run["exact"] is True and run["recipients"] == RECIPIENTS
    assert run["counted"]["states"] == {"sent": RECIPIENTS} and run["counted"]["published"] == RECIPIENTS
    assert run["stream_shards_per_table"] == 8 and run["records_per_counter_write"] > 1
